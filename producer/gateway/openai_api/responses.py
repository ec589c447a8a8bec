"""``POST /v1/responses``: one turn of a hosted agent, as OpenAI's Responses API::

POST /v1/responses                   run a turn (``background``: queued, answer at once)
GET  /v1/responses/{id}              the turn as a Response (poll a background one)
POST /v1/responses/{id}/cancel       cancel a queued or running one

A response is a turn: its id is ``resp_<turn id>``, and ``previous_response_id``
continues that turn's session (a new response without it starts a new session, the
tenant's for a key with a prefix). Bodies are built with the ``openai`` SDK's own
``Response`` model, streamed as the API's semantic events (``items``), each checked by
the SDK's own event models. A call waiting for a person is an ``mcp_approval_request``
item; ``mcp_approval_response`` input with ``previous_response_id`` decides it, and the
same response goes on. ``conversation`` names a session to run in. What is served:
docs/guide/openai-clients.md.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse, StreamingResponse
from openai.types.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from reactq.producer.gateway.deps import CallerDep, GatewayDep, ScopeDep
from reactq.producer.gateway.errors import GatewayError
from reactq.producer.gateway.openai_api.common import agent_of_model, model_id
from reactq.producer.gateway.openai_api.items import (
    StreamTranslator,
    history_items,
    waiting_items,
)
from reactq.producer.gateway.openai_api.response_input import (
    RequestInput,
    bad,
    client_tools_of,
    input_of,
)
from reactq.producer.gateway.resume import events_after_decisions
from reactq.producer.gateway.scopes import listing, session_visible
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
from reactq.producer.turn_lookup import TurnInfo
from reactq.shared.errors import (
    ApprovalClosedError,
    ApprovalError,
    ApprovalNotFoundError,
    DecisionConflictError,
    InvalidTurnError,
)
from reactq.shared.events import ApprovalRequestedEvent, Event, FinalEvent
from reactq.shared.turns import SESSION_ID_RE, TurnStatus

__all__ = ["ResponseCreate", "router"]

router = APIRouter(tags=["openai: responses"])

_ID_PREFIX = "resp_"
_KEY = "openai_responses"
"""The turn's metadata entry where the response's own fields are kept."""
_WAIT_S = 600.0
"""How long a foreground request waits for its turn's end."""
_POLL_S = 0.2

_STATUS: dict[
    TurnStatus, Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]
] = {
    TurnStatus.QUEUED: "queued",
    TurnStatus.RUNNING: "in_progress",
    # As OpenAI answers a response that ends with calls for its client to run or a
    # person to approve: completed, the calls its last items.
    TurnStatus.AWAITING_APPROVAL: "completed",
    TurnStatus.AWAITING_CHILDREN: "in_progress",
    TurnStatus.COMPLETED: "completed",
    TurnStatus.MAX_ITERATIONS: "incomplete",
    TurnStatus.ERROR: "failed",
    TurnStatus.CANCELLED: "cancelled",
    TurnStatus.REJECTED: "failed",
    TurnStatus.BUDGET_EXCEEDED: "incomplete",
    TurnStatus.INVALID_OUTPUT: "failed",
}


class _ConversationRef(BaseModel):
    """``{"id": ...}``: a conversation named by its id."""

    id: str


class ResponseCreate(BaseModel):
    """The body of ``POST /v1/responses`` (the fields reactq serves)."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    """The agent: ``reactq/<agent>`` or its bare name."""
    input: str | list[dict[str, Any]]
    """The user's text, or input items (``message`` items' text is the turn's)."""
    instructions: str | None = None
    """Kept on the response; the agent's own system prompt still applies."""
    previous_response_id: str | None = None
    """Continue that response's session."""
    conversation: str | _ConversationRef | None = None
    """A session to run the turn in (its id, or ``{"id": ...}``): each response with it
    continues it, the tenant's for a key with a prefix. Not with
    ``previous_response_id``."""
    store: bool | None = True
    background: bool | None = False
    """True: answer at once with the queued response; poll it with ``GET``."""
    stream: bool | None = False
    metadata: dict[str, str] | None = None
    tools: list[dict[str, Any]] | None = None
    """Function tools the client runs (client tools): a call to one is a
    ``function_call`` item; send its ``function_call_output`` with
    ``previous_response_id``. Other tool types: 400."""


_bad = bad


def _conversation(body: ResponseCreate, scope: KeyScope | None) -> str | None:
    """The session ``conversation`` names (within the key's tenant), or None."""
    if body.conversation is None:
        return None
    if body.previous_response_id is not None:
        raise _bad("conversation cannot be used with previous_response_id", "conversation")
    name = body.conversation if isinstance(body.conversation, str) else body.conversation.id
    prefix = scope.prefix if scope is not None and scope.prefix else ""
    session_id = name if name.startswith(prefix) else prefix + name
    if not SESSION_ID_RE.fullmatch(session_id):
        raise _bad("conversation must be 1-128 characters from [A-Za-z0-9._:-]", "conversation")
    return session_id


def _conversation_out(session_id: Any) -> dict[str, str] | None:
    return {"id": session_id} if isinstance(session_id, str) else None


def _not_found(response_id: str) -> GatewayError:
    return GatewayError(
        f"No response found with id {response_id!r}",
        status=404,
        error_code="response_not_found",
        field="path.response_id",
    )


async def _lookup(gateway: Gateway, response_id: str, scope: KeyScope | None) -> TurnInfo:
    """The response's turn, else 404 (one of another tenant's is not there)."""
    turn_id = response_id.removeprefix(_ID_PREFIX)
    info = await gateway.producer.turn_info(turn_id) if response_id.startswith(_ID_PREFIX) else None
    ours = None if info is None else info.metadata.get(_KEY)
    if info is None or not isinstance(ours, dict):
        raise _not_found(response_id)
    if scope is not None and not (
        scope.sees_session(info.session_id) and scope.may_run(str(ours.get("agent")))
    ):
        raise _not_found(response_id)
    return info


def _usage(usage: dict[str, int]) -> dict[str, Any] | None:
    if not usage:
        return None
    prompt = int(usage.get("prompt_tokens", usage.get("input_tokens", 0)))
    completion = int(usage.get("completion_tokens", usage.get("output_tokens", 0)))
    return {
        "input_tokens": prompt,
        "output_tokens": completion,
        "total_tokens": prompt + completion,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def _body(
    turn_id: str,
    ours: dict[str, Any],
    status: str,
    output: list[dict[str, Any]],
    created_at: float,
    usage: dict[str, int] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """A Response's fields, checked by the SDK's ``Response``."""
    body = {
        "id": _ID_PREFIX + turn_id,
        "object": "response",
        "created_at": created_at,
        "model": model_id(str(ours.get("agent"))),
        "status": status,
        "output": output,
        "instructions": ours.get("instructions"),
        "previous_response_id": ours.get("previous_response_id"),
        "metadata": ours.get("metadata") or {},
        "conversation": _conversation_out(ours.get("conversation")),
        "background": bool(ours.get("background")),
        "store": ours.get("store", True),
        "error": None if error is None else {"code": "server_error", "message": error},
        "usage": _usage(usage or {}),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [_tool(t) for t in ours.get("tools") or ()],
    }
    return Response.model_validate(body).model_dump(mode="json", exclude_unset=True)


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A request's function tool as the response echoes it."""
    return {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict"),
    }


async def _response(
    gateway: Gateway, info: TurnInfo, answered: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The turn as a Response: a finished one's items from its session's history, a
    waiting one's calls. ``answered``: the calls this request answered, after which the
    response is what happened (the client has the rest)."""
    ours: dict[str, Any] = info.metadata.get(_KEY, {})
    client = ours.get("client_tools") or ()
    status = _STATUS.get(info.status, "in_progress")
    text = info.final.text if info.final is not None else info.final_text
    output: list[dict[str, Any]] = []
    if info.status is TurnStatus.AWAITING_APPROVAL:
        waiting = [p.model_dump() | {"tool": p.tool} for p in info.pending_approvals]
        output = waiting_items(waiting, client)
    elif info.status.is_final and status != "cancelled":
        history = await gateway.producer.history(info.session_id)
        said = text if status != "failed" else None
        output = _after(history_items(info.turn_id, history, said, client), answered)
    error = (text or info.status.value) if status == "failed" else None
    created = info.submitted_at or time.time()
    return _body(info.turn_id, ours, status, output, created, info.usage, error)


def _after(items: list[dict[str, Any]], answered: frozenset[str]) -> list[dict[str, Any]]:
    """``items`` from the first one of an ``answered`` call on, without the client's own
    calls among them (it has them, and their outputs)."""
    if not answered:
        return items

    def call_of(item: dict[str, Any]) -> str | None:
        if item["type"] == "mcp_call":
            return str(item["id"]).removeprefix("mcp_")
        return item.get("call_id")

    first = next((i for i, item in enumerate(items) if call_of(item) in answered), 0)
    return [
        item
        for item in items[first:]
        if not (item["type"].startswith("function_call") and call_of(item) in answered)
    ]


async def _wait(gateway: Gateway, turn_id: str, decided: frozenset[str] = frozenset()) -> TurnInfo:
    """Poll the turn until it ends or waits for a person (on calls other than the
    ``decided`` ones: a turn just decided waits on them until a worker resumes it)."""
    deadline = time.monotonic() + _WAIT_S
    while True:
        info = await gateway.producer.turn_info(turn_id)
        if info is not None and (info.final is not None or info.status.is_final):
            return info
        if info is not None and info.status is TurnStatus.AWAITING_APPROVAL:
            waiting = {p.call_id for p in info.pending_approvals}
            if waiting and not decided & waiting:
                return info
        if time.monotonic() > deadline and info is not None:
            return info
        await asyncio.sleep(_POLL_S)


def _sse(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


_ENDED = {"completed": "response.completed", "failed": "response.failed"}


async def _streamed(
    turn_id: str,
    ours: dict[str, Any],
    events: AsyncIterator[Event],
    known: frozenset[str] = frozenset(),
) -> AsyncIterator[bytes]:
    """The turn's events as the Responses API's streaming events, from
    ``response.created`` to ``response.completed`` (``.failed``, ``.incomplete``: a turn
    that did not answer). A turn that waits for calls ends the stream with them.
    ``known``: calls the client has (its own, it just answered), left out."""
    stream = StreamTranslator(turn_id, ours.get("client_tools") or (), known)
    created = time.time()
    snapshot = _body(turn_id, ours, "in_progress", [], created)
    yield _sse(stream.event("response.created", response=snapshot))
    yield _sse(stream.event("response.in_progress", response=snapshot))
    final: FinalEvent | None = None
    parked = False
    async for event in events:
        for out in stream.feed(event):
            yield _sse(out)
        if isinstance(event, FinalEvent):
            final = event
            break
        if isinstance(event, ApprovalRequestedEvent):
            parked = True
            break
    if final is None and not parked:
        yield _sse(stream.event("error", message="the turn's events ended before its final"))
        return
    if final is None:
        status, usage, error = "completed", None, None
        tail = stream.close()
    else:
        status = _STATUS.get(final.status, "failed")
        usage = final.usage
        error = (final.text or final.status.value) if status == "failed" else None
        tail = stream.answer(final.text) if status != "failed" else stream.close()
    for out in tail:
        yield _sse(out)
    body = _body(turn_id, ours, status, stream.items, created, usage, error)
    yield _sse(stream.event(_ENDED.get(status, "response.incomplete"), response=body))


def _stream_response(chunks: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        chunks, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


_CREATE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": Response,
        "description": "The response; with ``stream``, the Responses API's streaming "
        "events (text/event-stream), each with its ``sequence_number``",
        "content": {"text/event-stream": {}},
    }
}


@router.post(
    "/responses",
    dependencies=[listing()],
    responses=_CREATE_RESPONSES,
    response_class=JSONResponse,
    summary="Create a response (run a turn)",
)
async def create_response(
    body: ResponseCreate, gateway: GatewayDep, scope: ScopeDep, caller: CallerDep
) -> Any:
    """Run one turn of the agent ``model`` names; its answer as a Response (streamed
    with ``stream``). ``mcp_approval_response`` and ``function_call_output`` input items
    answer the calls the ``previous_response_id`` response waits for, and it goes on."""
    agent = await agent_of_model(gateway, body.model, scope)
    given = input_of(body.input)
    client = client_tools_of(body.tools)
    previous = None
    if body.previous_response_id is not None:
        previous = await _lookup(gateway, body.previous_response_id, scope)
    if given.answers:
        if previous is None:
            raise _bad(
                "mcp_approval_response and function_call_output items answer the calls of a "
                "response: send its id as previous_response_id",
                "previous_response_id",
            )
        return await _resume(gateway, body, previous, given, caller or "gateway")
    conversation = _conversation(body, scope)
    if previous is not None:
        session_id = previous.session_id
    elif conversation is not None:
        session_id = conversation
        if not await session_visible(gateway, scope, session_id):
            raise GatewayError(
                f"No conversation found with id {body.conversation!r}",
                status=404,
                error_code="conversation_not_found",
                field="body.conversation",
            )
    else:
        prefix = scope.prefix if scope is not None else None
        session_id = f"{prefix or ''}resp-{uuid.uuid4()}"
    ours = {
        "agent": agent,
        "instructions": body.instructions,
        "previous_response_id": body.previous_response_id,
        "conversation": session_id if conversation is not None else None,
        "metadata": body.metadata,
        "background": bool(body.background),
        "store": body.store is not False,
        "client_tools": [t["name"] for t in client],
        "tools": body.tools or [],
    }
    try:
        handle = await gateway.producer.submit(
            session_id,
            given.text,
            agent=agent,
            metadata={**(body.metadata or {}), _KEY: ours},
            tenant=scope,
            client_tools=client,
        )
    except InvalidTurnError as exc:
        where = str(exc.details.get("field") or "")
        if not where.startswith("client_tools"):
            raise
        raise _bad(exc.message, where.replace("client_tools", "tools")) from None
    if body.stream:
        return _stream_response(_streamed(handle.turn_id, ours, handle.events()))
    if body.background:
        queued = await gateway.producer.turn_info(handle.turn_id)
        if queued is None:
            raise _not_found(_ID_PREFIX + handle.turn_id)
        return await _response(gateway, queued)
    return await _response(gateway, await _wait(gateway, handle.turn_id))


async def _resume(
    gateway: Gateway, body: ResponseCreate, previous: TurnInfo, given: RequestInput, by: str
) -> Any:
    """Answer the calls ``previous`` waits for; the same response as it goes on."""
    answered = frozenset(given.decisions) | frozenset(given.results)
    await _answer(gateway, previous, given, by)
    ours = previous.metadata.get(_KEY, {})
    if body.stream:
        events = events_after_decisions(
            gateway.producer, previous.session_id, previous.turn_id, answered
        )
        # The client has its own calls and their results: not streamed to it again.
        known = frozenset(given.results)
        return _stream_response(_streamed(previous.turn_id, ours, events, known))
    if body.background:
        now = await gateway.producer.turn_info(previous.turn_id) or previous
    else:
        now = await _wait(gateway, previous.turn_id, answered)
    return await _response(gateway, now, answered)


async def _answer(gateway: Gateway, info: TurnInfo, given: RequestInput, by: str) -> None:
    """Record the request's decisions and results on the waiting turn; a 404 for a
    call it does not wait for, a 409 for one answered already or a turn that waits for
    nothing."""
    producer = gateway.producer
    client = set(info.metadata.get(_KEY, {}).get("client_tools") or ())
    for call in info.pending_approvals:
        if call.call_id in given.results and call.tool not in client:
            # The agent's own tool: a person decides it, a client never gives its result.
            raise GatewayError(
                f"call {call.call_id!r} is of the agent's tool {call.tool!r}: answer it with "
                "an mcp_approval_response",
                status=409,
                error_code="not_a_client_call",
                field="body.input",
            )
    error: ApprovalError
    try:
        if given.decisions:
            await producer.decide(info.turn_id, given.decisions, by=by)
        for call_id, output in given.results.items():
            await producer.complete_tool(info.turn_id, call_id, output, by=by)
    except ApprovalNotFoundError as exc:
        status, error = 404, exc
    except (ApprovalClosedError, DecisionConflictError) as exc:
        status, error = 409, exc
    else:
        return
    raise GatewayError(error.message, status=status, error_code=error.code, field="body.input")


@router.get(
    "/responses/{response_id}",
    dependencies=[listing(inner=("response_id",))],
    summary="Retrieve a response",
)
async def retrieve_response(
    response_id: str, gateway: GatewayDep, scope: ScopeDep
) -> dict[str, Any]:
    """The response's turn as it stands (poll a background one until it ends)."""
    return await _response(gateway, await _lookup(gateway, response_id, scope))


@router.post(
    "/responses/{response_id}/cancel",
    dependencies=[listing(inner=("response_id",))],
    summary="Cancel a response",
)
async def cancel_response(response_id: str, gateway: GatewayDep, scope: ScopeDep) -> dict[str, Any]:
    """Cancel the response's turn (a queued one at once, a running one at its next step)."""
    info = await _lookup(gateway, response_id, scope)
    await gateway.producer.cancel(info.turn_id)
    return await _response(gateway, await _wait_cancel(gateway, info.turn_id))


async def _wait_cancel(gateway: Gateway, turn_id: str) -> TurnInfo:
    deadline = time.monotonic() + 10.0
    while True:
        info = await gateway.producer.turn_info(turn_id)
        if info is not None and (info.status.is_final or time.monotonic() > deadline):
            return info
        await asyncio.sleep(_POLL_S)
