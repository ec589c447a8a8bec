"""The gateway's session routes: list, show, tag and delete sessions, their turns and
their branches. ``factory.py`` mounts them under ``/v1``, behind the API key::

    GET    /v1/sessions                          list: agent, metadata, updated_since, cursor
    GET    /v1/sessions/{id}                     one session's summary          404
    PATCH  /v1/sessions/{id}                     merge into its metadata        404 422
    DELETE /v1/sessions/{id}?force=              delete it (force: cancel its running turn)  404 409
    GET    /v1/sessions/{id}/turns               its turns, oldest first        404
    GET    /v1/sessions/{id}/messages            its conversation (?branch=)    404
    GET    /v1/sessions/{id}/usage               its token and cost totals
    GET    /v1/sessions/{id}/todos               its todo list, in order        404
    GET    /v1/sessions/{id}/branches            its branches                   404
    POST   /v1/sessions/{id}/branches            fork                           201 404 409 422
    PUT    /v1/sessions/{id}/active_branch       switch                         404
    POST   /v1/sessions/{id}/truncate            cut a branch                   404

A key scoped to a tenant lists the sessions of its prefix (and, with ``agents=``, of
its agents) only; every other route answers 404 for a session outside them
(``scopes.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Query

from reactq.producer.client import Producer
from reactq.producer.gateway.deps import (
    GatewayDep,
    MetadataPair,
    ScopeDep,
    SessionId,
    metadata_filter,
    only_query,
)
from reactq.producer.gateway.errors import ERROR_RESPONSES, GatewayError, state_store_errors
from reactq.producer.gateway.models import (
    AGENT_PATTERN,
    TURN_ID_PATTERN,
    ErrorBody,
    ForkRequest,
    MetadataPatch,
    SessionList,
    SessionMessage,
    SessionSummary,
    SwitchRequest,
    Truncated,
    TruncateRequest,
)
from reactq.producer.gateway.scopes import listing, touches
from reactq.producer.gateway.security import KeyScope
from reactq.producer.sessions import SessionDeleted, SessionDetail
from reactq.producer.turn_lookup import TurnInfo
from reactq.shared.errors import (
    BranchError,
    BranchNotFoundError,
    InvalidCursorError,
    InvalidMetadataError,
    SessionBusyError,
    SessionNotFoundError,
)
from reactq.shared.state import BranchInfo, SessionUsage
from reactq.shared.state.base import SessionPage, SessionRecord
from reactq.shared.state.listing import MAX_LIMIT, encode_cursor, key_of
from reactq.shared.state.todo_store import TodoItem

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such session (``session_not_found``)"}
}
_BRANCH_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {
        "model": ErrorBody,
        "description": "No such session (``session_not_found``) or branch (``branch_not_found``)",
    }
}


router = APIRouter(tags=["sessions"])


@contextlib.contextmanager
def _answers() -> Iterator[None]:
    """The producer's refusals as the gateway's error bodies (and a state store that
    does not answer as a 503)."""
    try:
        with state_store_errors():
            yield
    except SessionNotFoundError as exc:
        raise GatewayError(exc.message, status=404, error_code=exc.code) from None
    except BranchNotFoundError as exc:
        raise GatewayError(exc.message, status=404, error_code=exc.code) from None
    except BranchError as exc:
        if "from_sequence" in exc.details:
            raise GatewayError(
                exc.message, status=422, error_code=exc.code, field="body.from_sequence"
            ) from None
        # A branch id that is taken (the schema checks its form).
        raise GatewayError(
            exc.message, status=409, error_code=exc.code, field="body.name"
        ) from None
    except SessionBusyError as exc:
        raise GatewayError(exc.message, status=409, error_code=exc.code) from None
    except InvalidCursorError as exc:
        raise GatewayError(
            exc.message, status=422, error_code=exc.code, field="query.cursor"
        ) from None
    except InvalidMetadataError as exc:
        raise GatewayError(
            exc.message, status=422, error_code=exc.code, field="body.metadata"
        ) from None


async def _detail(producer: Producer, session_id: str) -> SessionDetail:
    detail = await producer.get_session(session_id)
    if detail is None:
        raise SessionNotFoundError(f"no session {session_id!r}", session_id=session_id)
    return detail


async def _tenant_page(
    producer: Producer,
    scope: KeyScope,
    agent: str | None,
    metadata: dict[str, Any] | None,
    updated_since: float | None,
    limit: int,
    cursor: str | None,
) -> SessionPage:
    """A page of the sessions the key sees (its prefix, its agents): the stores list
    by creation, not by id, so this reads their listing in large pages and keeps the
    tenant's. A cursor is a place in that order whatever the filter, so the page's
    last session makes its next_cursor as it does for an unfiltered listing."""
    page: list[SessionRecord] = []
    while True:
        batch = await producer.list_sessions(
            agent=agent,
            metadata=metadata,
            updated_since=updated_since,
            limit=MAX_LIMIT,
            cursor=cursor,
        )
        for session in batch.sessions:
            if not (scope.sees_session(session.session_id) and scope.may_run(session.agent)):
                continue
            if len(page) == limit:
                return SessionPage(sessions=page, next_cursor=encode_cursor(key_of(page[-1])))
            page.append(session)
        if batch.next_cursor is None:
            return SessionPage(sessions=page)
        cursor = batch.next_cursor


@router.get(
    "/sessions",
    response_model=SessionList,
    summary="List sessions",
    dependencies=[
        listing(),
        only_query("agent", "metadata", "updated_since", "limit", "cursor"),
    ],
    responses={
        422: {
            "model": ErrorBody,
            "description": "Invalid input: a cursor that is not one a listing handed out "
            "(``invalid_cursor``), an unknown query parameter; ``field`` says which",
        }
    },
)
async def list_sessions(
    gateway: GatewayDep,
    scope: ScopeDep,
    agent: Annotated[
        str | None, Query(pattern=AGENT_PATTERN, description="Only its sessions")
    ] = None,
    metadata: Annotated[
        list[MetadataPair] | None,
        Query(
            description="KEY=VALUE, repeatable: sessions whose metadata has KEY with VALUE "
            '(JSON, such as 2, true or "2", else the text)',
        ),
    ] = None,
    updated_since: Annotated[
        float | None, Query(description="Unix time: sessions written at or after it")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Sessions a page")] = 50,
    cursor: Annotated[
        str | None, Query(max_length=1000, description="A page's next_cursor")
    ] = None,
) -> SessionList:
    """The stored sessions, newest first, a page at a time (a scoped key's: of its
    prefix and its agents)."""
    producer = gateway.producer
    wanted = metadata_filter(metadata or [])
    if scope is not None and agent is not None and not scope.may_run(agent):
        return SessionList(sessions=[])
    with _answers():
        if scope is None or (scope.prefix is None and scope.agents is None):
            page = await producer.list_sessions(
                agent=agent,
                metadata=wanted,
                updated_since=updated_since,
                limit=limit,
                cursor=cursor,
            )
        else:
            page = await _tenant_page(producer, scope, agent, wanted, updated_since, limit, cursor)
    return SessionList(
        sessions=[SessionSummary.model_validate(s, from_attributes=True) for s in page.sessions],
        next_cursor=page.next_cursor,
    )


@router.get(
    "/sessions/{session_id}",
    dependencies=[touches(session="path.session_id")],
    response_model=SessionDetail,
    summary="A session",
    responses=_NOT_FOUND,
)
async def get_session(session_id: SessionId, gateway: GatewayDep) -> SessionDetail:
    """Its agent, active branch, message count, turns, last turn, usage and metadata."""
    producer = gateway.producer
    with _answers():
        return await _detail(producer, session_id)


@router.get(
    "/sessions/{session_id}/usage",
    dependencies=[touches(session="path.session_id")],
    response_model=SessionUsage,
    summary="A session's token and cost totals",
)
async def get_session_usage(session_id: SessionId, gateway: GatewayDep) -> SessionUsage:
    """Tokens and cost summed over its committed turns, as the state store keeps them
    (what ``session_max_tokens`` / ``session_max_cost`` check); zeros for a session the
    store does not have."""
    producer = gateway.producer
    with _answers():
        return await producer.usage(session_id)


@router.patch(
    "/sessions/{session_id}",
    dependencies=[touches(session="path.session_id")],
    response_model=SessionDetail,
    summary="Change a session's metadata",
    responses=_NOT_FOUND,
)
async def patch_session(
    session_id: SessionId, body: MetadataPatch, gateway: GatewayDep
) -> SessionDetail:
    """Merge ``metadata`` into the session's: a key set to null is removed."""
    producer = gateway.producer
    with _answers():
        await producer.update_session_metadata(session_id, body.metadata)
        return await _detail(producer, session_id)


@router.delete(
    "/sessions/{session_id}",
    response_model=SessionDeleted,
    summary="Delete a session",
    dependencies=[touches(session="path.session_id"), only_query("force")],
    responses={
        **_NOT_FOUND,
        409: {
            "model": ErrorBody,
            "description": "A turn of the session runs (``session_busy``): pass force=true to "
            "cancel it first",
        },
    },
)
async def delete_session(
    session_id: SessionId,
    gateway: GatewayDep,
    force: Annotated[
        bool, Query(description="Cancel a running turn first (and wait for it to stop)")
    ] = False,
) -> SessionDeleted:
    """Delete the session's state, Redis keys, queued turns (cancelled first) and
    workspace; the audit log keeps its events."""
    producer = gateway.producer
    with _answers():
        return await producer.delete_session(session_id, force=force)


@router.get(
    "/sessions/{session_id}/messages",
    dependencies=[touches(session="path.session_id")],
    response_model=list[SessionMessage],
    summary="A session's conversation",
    responses={
        404: {
            "model": ErrorBody,
            "description": "No such session (``session_not_found``) or no such branch in it "
            "(``branch_not_found``)",
        },
        503: ERROR_RESPONSES[503],
    },
)
async def session_messages(
    session_id: SessionId,
    gateway: GatewayDep,
    branch: Annotated[
        str | None,
        Query(pattern=TURN_ID_PATTERN, description="A branch id (default: the active one)"),
    ] = None,
) -> list[SessionMessage]:
    """The messages of one branch of the session, oldest first, each with its
    ``sequence`` in the branch and the ``turn_id`` that wrote it."""
    with state_store_errors():
        store = await gateway.producer.state_store()
        if await store.get_session(session_id) is None:
            raise GatewayError("no such session", status=404, error_code="session_not_found")
        if branch is not None and branch not in {
            b.branch_id for b in await store.list_branches(session_id)
        }:
            raise GatewayError(
                f"session {session_id} has no branch {branch!r}",
                status=404,
                error_code=BranchNotFoundError.code,
            )
        messages = await store.get_messages(session_id, branch_id=branch)
    return [SessionMessage.of(m) for m in messages]


@router.get(
    "/sessions/{session_id}/turns",
    dependencies=[touches(session="path.session_id")],
    response_model=list[TurnInfo],
    summary="A session's turns",
    responses=_NOT_FOUND,
)
async def session_turns(session_id: SessionId, gateway: GatewayDep) -> list[TurnInfo]:
    """Its turns, oldest first, with status, attempt, final, usage and times."""
    producer = gateway.producer
    with _answers():
        turns = await producer.session_turns(session_id)
        if not turns and await (await producer.state_store()).get_session(session_id) is None:
            raise SessionNotFoundError(f"no session {session_id!r}", session_id=session_id)
    return turns


@router.get(
    "/sessions/{session_id}/todos",
    dependencies=[touches(session="path.session_id")],
    response_model=list[TodoItem],
    summary="A session's todo list",
    responses=_NOT_FOUND,
)
async def session_todos(session_id: SessionId, gateway: GatewayDep) -> list[TodoItem]:
    """The todo list its agent keeps (``reactq.bundles.todos``), in order, as last
    written; [] when it has none."""
    producer = gateway.producer
    with _answers():
        items = await producer.todos(session_id)
        if not items and await (await producer.state_store()).get_session(session_id) is None:
            raise SessionNotFoundError(f"no session {session_id!r}", session_id=session_id)
    return items


@router.get(
    "/sessions/{session_id}/branches",
    dependencies=[touches(session="path.session_id")],
    response_model=list[BranchInfo],
    summary="A session's branches",
    responses=_NOT_FOUND,
)
async def list_branches(session_id: SessionId, gateway: GatewayDep) -> list[BranchInfo]:
    """Its branches, oldest first: which one is active, their lengths."""
    producer = gateway.producer
    with _answers():
        branches = await producer.branches(session_id)
        if not branches:
            raise SessionNotFoundError(f"no session {session_id!r}", session_id=session_id)
    return branches


@router.post(
    "/sessions/{session_id}/branches",
    dependencies=[touches(session="path.session_id")],
    status_code=201,
    response_model=BranchInfo,
    summary="Fork a branch",
    responses={
        **_BRANCH_NOT_FOUND,
        409: {"model": ErrorBody, "description": "The branch id is taken (``branch_error``)"},
        422: {
            "model": ErrorBody,
            "description": "The fork point is past the branch's end (``branch_error``)",
        },
    },
)
async def fork(session_id: SessionId, body: ForkRequest, gateway: GatewayDep) -> BranchInfo:
    """Start a branch keeping messages 1..from_sequence ("edit a turn" is a fork, then
    a submit); the original line stays."""
    producer = gateway.producer
    with _answers():
        branch_id = await producer.fork(
            session_id,
            body.from_sequence,
            branch=body.branch,
            new_branch=body.name,
            activate=body.activate,
        )
        branches = await producer.branches(session_id)
    return next(b for b in branches if b.branch_id == branch_id)


@router.put(
    "/sessions/{session_id}/active_branch",
    dependencies=[touches(session="path.session_id")],
    response_model=SessionDetail,
    summary="Switch the active branch",
    responses=_BRANCH_NOT_FOUND,
)
async def switch(session_id: SessionId, body: SwitchRequest, gateway: GatewayDep) -> SessionDetail:
    """Make a branch the active one: the turns that start next run on it."""
    producer = gateway.producer
    with _answers():
        await producer.switch_branch(session_id, body.branch)
        return await _detail(producer, session_id)


@router.post(
    "/sessions/{session_id}/truncate",
    dependencies=[touches(session="path.session_id")],
    response_model=Truncated,
    summary="Cut a branch",
    responses=_BRANCH_NOT_FOUND,
)
async def truncate(session_id: SessionId, body: TruncateRequest, gateway: GatewayDep) -> Truncated:
    """Delete a branch's own messages after ``after`` (inherited ones stay; a branch
    forked inside the cut keeps its history)."""
    producer = gateway.producer
    with _answers():
        before = await producer.branches(session_id)
        if not before:
            raise SessionNotFoundError(f"no session {session_id!r}", session_id=session_id)
        name = body.branch or next(b.branch_id for b in before if b.active)
        if name not in {b.branch_id for b in before}:
            raise BranchNotFoundError(
                f"session {session_id} has no branch {name!r}", branch_id=name
            )
        await producer.truncate(session_id, body.after, branch=name)
        after = await producer.branches(session_id)
    length = next(b.length for b in after if b.branch_id == name)
    return Truncated(session_id=session_id, branch_id=name, length=length)
