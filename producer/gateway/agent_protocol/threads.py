"""The Agent Protocol's threads: a thread is a reactq session (see the package's docstring)::

    POST   /threads                    create (thread_id, metadata, if_exists)   200 409
    POST   /threads/search             search: metadata, status, limit, offset   200
    POST   /threads/count              how many a search finds                   200
    GET    /threads/{thread_id}        the thread                                200 404
    PATCH  /threads/{thread_id}        merge into its metadata                   200 404
    DELETE /threads/{thread_id}        delete it (its session)                   204 404 409
    POST   /threads/{thread_id}/copy   a new thread with its messages, metadata  200 404
    GET    /threads/{thread_id}/state  its values: {"messages": [...]}           200 404
    POST   /threads/{thread_id}/history  its state after each run, newest first  200 404

A thread created before any run has no session yet (a session belongs to the agent of
its first turn): ``pending.py`` keeps it, and its metadata, until its first run. Its
status comes from its session's latest turn: ``busy`` while one runs or waits in the
queue, ``interrupted`` while one waits for approval, ``error`` after a failed one,
else ``idle``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from reactq.producer.gateway.agent_protocol import deleted, pending
from reactq.producer.gateway.agent_protocol.messages import thread_messages
from reactq.producer.gateway.agent_protocol.streams import interrupt
from reactq.producer.gateway.deps import GatewayDep, ScopeDep, SessionId
from reactq.producer.gateway.errors import GatewayError, state_store_errors
from reactq.producer.gateway.scopes import listing, session_visible, touches
from reactq.producer.gateway.service import Gateway
from reactq.producer.sessions import SessionDetail
from reactq.shared.errors import SessionBusyError, SessionNotFoundError
from reactq.shared.turns import SESSION_ID_RE, TurnStatus, validate_session_id

__all__ = [
    "ThreadCount",
    "ThreadCreate",
    "ThreadPatch",
    "ThreadSearch",
    "iso",
    "router",
    "thread_detail",
    "thread_exists",
    "thread_not_found",
    "thread_state",
    "thread_values",
]

router = APIRouter(tags=["agent-protocol: threads"])

ThreadStatus = Literal["idle", "busy", "interrupted", "error"]

_MAX_SEARCH = 1000


class ThreadCreate(BaseModel):
    """``POST /threads``'s body."""

    thread_id: str | None = Field(default=None, pattern=SESSION_ID_RE.pattern)
    """The thread's id (a new UUID when absent)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Its metadata."""
    if_exists: Literal["raise", "do_nothing"] = "raise"
    """An existing ``thread_id``: 409 (``raise``), or the existing thread."""


class HistoryQuery(BaseModel):
    """``POST /threads/{thread_id}/history``'s body."""

    limit: int = Field(default=10, ge=1, le=_MAX_SEARCH)
    """States at most, newest first."""
    before: str | dict[str, Any] | None = None
    """Only the states before this checkpoint (a run id, or ``{"checkpoint_id": ...}``)."""


class ThreadPatch(BaseModel):
    """``PATCH /threads/{thread_id}``'s body."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    """Merged into the thread's metadata (a key set to None is removed)."""


class ThreadSearch(BaseModel):
    """``POST /threads/search``'s body."""

    metadata: dict[str, Any] | None = None
    """Threads whose metadata holds each of these keys with that value."""
    status: ThreadStatus | None = None
    """Threads in this status."""
    limit: int = Field(default=10, ge=1, le=_MAX_SEARCH)
    """Threads at most."""
    offset: int = Field(default=0, ge=0)
    """Threads to skip (newest first)."""
    ids: list[str] | None = None
    """Only these threads."""


def iso(ts: float | None) -> str | None:
    """A Unix time as the ISO 8601 text the SDK's types hold."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def thread_not_found() -> GatewayError:
    """The 404 of a thread that does not exist."""
    return GatewayError("no such thread", status=404, error_code="thread_not_found")


def interrupts_of(detail: SessionDetail) -> list[dict[str, Any]]:
    """The Interrupts of the thread's run waiting for approval ([] for none)."""
    last = detail.last_turn
    if last is None or not last.pending_approvals:
        return []
    return [interrupt(last.turn_id, [c.model_dump() for c in last.pending_approvals])]


def status_of(detail: SessionDetail) -> ThreadStatus:
    """The thread's status from its session's latest turn and queue."""
    last = detail.last_turn.status if detail.last_turn is not None else None
    if last in (TurnStatus.AWAITING_APPROVAL, TurnStatus.AWAITING_CHILDREN):
        return "interrupted"
    if (
        detail.running_turn is not None
        or detail.queued
        or last
        in (
            TurnStatus.QUEUED,
            TurnStatus.RUNNING,
        )
    ):
        return "busy"
    if last is TurnStatus.ERROR:
        return "error"
    return "idle"


async def thread_values(gateway: Gateway, thread_id: str) -> dict[str, Any]:
    """The thread's values: ``{"messages": [...]}`` of its active branch."""
    with state_store_errors():
        history = await gateway.producer.history(thread_id)
    return {"messages": thread_messages(history)}


def _pending_object(thread: pending.PendingThread, values: bool) -> dict[str, Any]:
    return {
        "thread_id": thread.thread_id,
        "created_at": iso(thread.created_at),
        "updated_at": iso(thread.updated_at),
        "metadata": thread.metadata,
        "status": "idle",
        "values": {"messages": []} if values else None,
        "interrupts": {},
        "config": {},
    }


async def _session(gateway: Gateway, thread_id: str) -> SessionDetail | None:
    """The thread's session (a pending thread's metadata moved onto it first)."""
    with state_store_errors():
        await pending.adopt(gateway, thread_id)
        return await gateway.producer.get_session(thread_id)


async def thread_exists(gateway: Gateway, thread_id: str) -> bool:
    """True for a thread with a session or a pending one."""
    if await gateway.session_agent(thread_id) is not None:
        return True
    return await pending.get(gateway, thread_id) is not None


async def thread_detail(
    gateway: Gateway, thread_id: str, *, values: bool = True
) -> dict[str, Any] | None:
    """The Thread object (None for a thread that does not exist)."""
    detail = await _session(gateway, thread_id)
    if detail is None:
        waiting = await pending.get(gateway, thread_id)
        return None if waiting is None else _pending_object(waiting, values)
    return {
        "thread_id": thread_id,
        "created_at": iso(detail.created_at),
        "updated_at": iso(detail.updated_at),
        "metadata": detail.metadata,
        "status": status_of(detail),
        "values": await thread_values(gateway, thread_id) if values else None,
        "interrupts": {i["id"]: [i] for i in interrupts_of(detail)},
        "config": {},
    }


async def thread_state(gateway: Gateway, thread_id: str) -> dict[str, Any]:
    """The ThreadState object; 404 for a thread that does not exist."""
    detail = await _session(gateway, thread_id)
    if detail is None:
        waiting = await pending.get(gateway, thread_id)
        if waiting is None:
            raise thread_not_found()
        return _state({"messages": []}, waiting.metadata, waiting.updated_at, thread_id, None)
    last = detail.last_turn.turn_id if detail.last_turn is not None else None
    values = await thread_values(gateway, thread_id)
    state = _state(values, detail.metadata, detail.updated_at, thread_id, last)
    parked = interrupts_of(detail)
    if parked:
        task = {"id": parked[0]["id"], "name": "tools", "interrupts": parked, "state": None}
        state.update(next=["tools"], tasks=[task], interrupts=parked)
    return state


def _state(
    values: dict[str, Any], metadata: dict[str, Any], at: float, thread_id: str, last: str | None
) -> dict[str, Any]:
    return {
        "values": values,
        "next": [],
        "tasks": [],
        "metadata": metadata,
        "created_at": iso(at),
        "checkpoint": _checkpoint(thread_id, last),
        "parent_checkpoint": None,
        "interrupts": [],
    }


@router.post(
    "/threads",
    dependencies=[touches(session="body.thread_id", body=ThreadCreate)],
    summary="Create a thread",
)
async def create_thread(body: ThreadCreate, gateway: GatewayDep, scope: ScopeDep) -> dict[str, Any]:
    """A new thread (``pending.py`` keeps it until its first run); 409 for an existing
    ``thread_id`` unless ``if_exists`` is ``do_nothing``."""
    thread_id = body.thread_id or str(uuid.uuid4())
    if scope is not None and scope.prefix and not thread_id.startswith(scope.prefix):
        # A new id of a tenant's key is the tenant's.
        thread_id = scope.prefix + thread_id
    validate_session_id(thread_id)
    if await thread_exists(gateway, thread_id) or not await pending.put(
        gateway, pending.created(thread_id, body.metadata), new=True
    ):
        existing = await thread_detail(gateway, thread_id)
        if existing is not None and body.if_exists == "do_nothing":
            return existing
        raise GatewayError("the thread exists", status=409, error_code="thread_exists")
    created = await thread_detail(gateway, thread_id)
    if created is None:  # deleted meanwhile
        raise thread_not_found()
    return created


def _matches(metadata: dict[str, Any], wanted: dict[str, Any] | None) -> bool:
    return not wanted or all(k in metadata and metadata[k] == v for k, v in wanted.items())


async def _candidates(gateway: Gateway, body: ThreadSearch) -> AsyncIterator[str]:
    """Ids of the threads that may match, newest first: the pending ones, then the
    sessions (whose metadata the store matches)."""
    for waiting in await pending.scan(gateway):
        await _session(gateway, waiting.thread_id)  # adopted once it has a session
        if await pending.get(gateway, waiting.thread_id) is not None and _matches(
            waiting.metadata, body.metadata
        ):
            yield waiting.thread_id
    cursor: str | None = None
    while True:
        with state_store_errors():
            page = await gateway.producer.list_sessions(
                metadata=body.metadata, limit=100, cursor=cursor
            )
        for record in page.sessions:
            yield record.session_id
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


@router.post(
    "/threads/search",
    dependencies=[listing()],
    summary="Search threads",
)
async def search_threads(
    body: ThreadSearch, gateway: GatewayDep, scope: ScopeDep
) -> list[dict[str, Any]]:
    """Threads newest first, by metadata and status, ``limit`` of them after ``offset``
    (a scoped key's only)."""
    out: list[dict[str, Any]] = []
    skipped = 0
    wanted = set(body.ids) if body.ids is not None else None
    async for sid in _candidates(gateway, body):
        if wanted is not None and sid not in wanted:
            continue
        if not await session_visible(gateway, scope, sid):
            continue
        thread = await thread_detail(gateway, sid)
        if thread is None or (body.status is not None and thread["status"] != body.status):
            continue
        if skipped < body.offset:
            skipped += 1
            continue
        out.append(thread)
        if len(out) >= body.limit:
            break
    return out


class ThreadCount(BaseModel):
    """``POST /threads/count``'s body."""

    metadata: dict[str, Any] | None = None
    """Threads whose metadata holds each of these keys with that value."""
    status: ThreadStatus | None = None
    """Threads in this status."""


@router.post(
    "/threads/count",
    dependencies=[listing()],
    summary="Count threads",
)
async def count_threads(body: ThreadCount, gateway: GatewayDep, scope: ScopeDep) -> int:
    """How many threads ``POST /threads/search`` would find (without its limit)."""
    search = ThreadSearch(metadata=body.metadata, status=body.status, limit=_MAX_SEARCH)
    found = 0
    while True:
        page = await search_threads(search, gateway, scope)
        found += len(page)
        if len(page) < _MAX_SEARCH:
            return found
        search = search.model_copy(update={"offset": search.offset + _MAX_SEARCH})


@router.get(
    "/threads/{thread_id}",
    dependencies=[touches(session="path.thread_id")],
    summary="A thread",
)
async def get_thread(thread_id: SessionId, gateway: GatewayDep) -> dict[str, Any]:
    """The thread: its metadata, status and values."""
    thread = await thread_detail(gateway, thread_id)
    if thread is None:
        raise thread_not_found()
    return thread


@router.patch(
    "/threads/{thread_id}",
    dependencies=[touches(session="path.thread_id")],
    summary="Update a thread's metadata",
)
async def patch_thread(
    thread_id: SessionId, body: ThreadPatch, gateway: GatewayDep
) -> dict[str, Any]:
    """Merge ``metadata`` into the thread's (a key set to None is removed); the thread."""
    if await _session(gateway, thread_id) is None:
        waiting = await pending.get(gateway, thread_id)
        if waiting is None:
            raise thread_not_found()
        merged = {**waiting.metadata, **body.metadata}
        kept = {k: v for k, v in merged.items() if v is not None}
        changed = replace(waiting, metadata=kept, updated_at=time.time())
        await pending.put(gateway, changed)
        return await get_thread(thread_id, gateway)
    try:
        with state_store_errors():
            await gateway.producer.update_session_metadata(thread_id, body.metadata)
    except SessionNotFoundError:
        raise thread_not_found() from None
    return await get_thread(thread_id, gateway)


@router.delete(
    "/threads/{thread_id}",
    dependencies=[touches(session="path.thread_id")],
    status_code=204,
    summary="Delete a thread",
)
async def delete_thread(thread_id: SessionId, gateway: GatewayDep) -> Response:
    """Delete the thread's session (409 while a run is on it)."""
    if await pending.delete(gateway, thread_id) and await gateway.session_agent(thread_id) is None:
        return Response(status_code=204)
    try:
        with state_store_errors():
            await gateway.producer.delete_session(thread_id)
    except SessionNotFoundError:
        raise thread_not_found() from None
    except SessionBusyError:
        raise GatewayError("a run is on the thread", status=409, error_code="thread_busy") from None
    await deleted.clear(gateway, thread_id)
    return Response(status_code=204)


@router.post(
    "/threads/{thread_id}/copy",
    dependencies=[touches(session="path.thread_id")],
    summary="Copy a thread",
)
async def copy_thread(thread_id: SessionId, gateway: GatewayDep, scope: ScopeDep) -> dict[str, Any]:
    """A new thread (a fresh id, the key's tenant's) holding the thread's messages (its
    active branch, as they stand: a run going on adds its own only to the original)
    and metadata; each goes its own way after. Its history starts empty: the runs stay
    the original's."""
    copy_id = str(uuid.uuid4())
    if scope is not None and scope.prefix:
        copy_id = scope.prefix + copy_id
    detail = await _session(gateway, thread_id)
    if detail is None:
        waiting = await pending.get(gateway, thread_id)
        if waiting is None:
            raise thread_not_found()
        await pending.put(gateway, pending.created(copy_id, waiting.metadata), new=True)
    else:
        agent = await gateway.session_agent(thread_id)
        with state_store_errors():
            store = await gateway.producer.state_store()
            messages = await store.get_messages(thread_id)
            await store.ensure_session(copy_id, agent or detail.agent)
            await store.append(copy_id, messages)
            if detail.metadata:
                await store.update_metadata(copy_id, detail.metadata)
    copied = await thread_detail(gateway, copy_id)
    if copied is None:  # deleted meanwhile
        raise thread_not_found()
    return copied


@router.get(
    "/threads/{thread_id}/state",
    dependencies=[touches(session="path.thread_id")],
    summary="A thread's state",
)
async def get_thread_state(thread_id: SessionId, gateway: GatewayDep) -> dict[str, Any]:
    """The thread's values (``{"messages": [...]}`` in LangChain's message format)."""
    return await thread_state(gateway, thread_id)


@router.post(
    "/threads/{thread_id}/history",
    dependencies=[touches(session="path.thread_id")],
    summary="A thread's past states",
)
async def thread_history(
    thread_id: SessionId, body: HistoryQuery, gateway: GatewayDep
) -> list[dict[str, Any]]:
    """The thread's state after each of its runs, newest first (a checkpoint per run:
    its ``checkpoint_id`` is the run's id)."""
    current = await thread_state(gateway, thread_id)
    with state_store_errors():
        history = await gateway.producer.history(thread_id)
    messages = thread_messages(history)
    # Where each run's messages end: its state is the messages up to there.
    ends: dict[str, int] = {}
    for n, message in enumerate(history):
        if message.turn_id is not None:
            ends[message.turn_id] = n
    states: list[dict[str, Any]] = []
    runs = sorted(ends, key=lambda t: ends[t])
    place = {run_id: n for n, run_id in enumerate(runs)}
    for n, run_id in enumerate(runs):
        upto = [m for m in messages if place.get(_turn_of(m) or "", -1) <= n]
        parent = runs[n - 1] if n else None
        state = {**current, "values": {"messages": upto}, "next": [], "tasks": [], "interrupts": []}
        state["checkpoint"] = _checkpoint(thread_id, run_id)
        state["parent_checkpoint"] = None if parent is None else _checkpoint(thread_id, parent)
        states.append(state)
    states.reverse()
    if states and states[0]["checkpoint"] == current["checkpoint"]:
        # The newest is the current state (its interrupts too).
        states[0] = {**current, "parent_checkpoint": states[0]["parent_checkpoint"]}
    before = body.before.get("checkpoint_id") if isinstance(body.before, dict) else body.before
    if before is not None:
        ids = [st["checkpoint"]["checkpoint_id"] for st in states]
        states = states[ids.index(before) + 1 :] if before in ids else []
    return states[: body.limit]


def _checkpoint(thread_id: str, run_id: str | None) -> dict[str, Any]:
    return {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": run_id}


def _turn_of(message: dict[str, Any]) -> str | None:
    mid = str(message.get("id", ""))
    return None if mid.startswith("m-") else mid.rpartition("-")[0]
