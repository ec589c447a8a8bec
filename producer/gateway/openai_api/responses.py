"""``POST /v1/responses``: one turn of a hosted agent, as OpenAI's Responses API::

POST /v1/responses                   run a turn (``background``: queued, answer at once)
GET  /v1/responses/{id}              the turn as a Response (poll a background one)
POST /v1/responses/{id}/cancel       cancel a queued or running one

A response is a turn: its id is ``resp_<turn id>``, and ``previous_response_id``
continues that turn's session (a new response without it starts a new session, the
tenant's for a key with a prefix). Bodies are built with the ``openai`` SDK's own
``Response`` model. Not served yet: streaming, approvals as ``mcp_approval_request``
items, ``conversation`` (docs/guide/openai-clients.md).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Literal

from fastapi import APIRouter
from openai.types.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from reactq.producer.gateway.deps import GatewayDep, ScopeDep
from reactq.producer.gateway.errors import GatewayError
from reactq.producer.gateway.openai_api.common import agent_of_model, model_id
from reactq.producer.gateway.scopes import listing
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
from reactq.producer.turn_lookup import TurnInfo
from reactq.shared.turns import TurnStatus

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
    TurnStatus.AWAITING_APPROVAL: "incomplete",
    TurnStatus.AWAITING_CHILDREN: "in_progress",
    TurnStatus.COMPLETED: "completed",
    TurnStatus.MAX_ITERATIONS: "incomplete",
    TurnStatus.ERROR: "failed",
    TurnStatus.CANCELLED: "cancelled",
    TurnStatus.REJECTED: "failed",
    TurnStatus.BUDGET_EXCEEDED: "incomplete",
    TurnStatus.INVALID_OUTPUT: "failed",
}


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
    store: bool | None = True
    background: bool | None = False
    """True: answer at once with the queued response; poll it with ``GET``."""
    stream: bool | None = False
    metadata: dict[str, str] | None = None


def _bad(message: str, field: str) -> GatewayError:
    return GatewayError(message, status=422, error_code="invalid_request", field=f"body.{field}")


def _text_of(value: str | list[dict[str, Any]]) -> str:
    """The turn's message: the text, or the user ``message`` items' text joined."""
    if isinstance(value, str):
        if not value.strip():
            raise _bad("input is empty", "input")
        return value
    parts: list[str] = []
    for item in value:
        if item.get("type", "message") != "message":
            raise _bad(f"input items of type {item.get('type')!r} are not supported", "input")
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(c.get("text", "")) for c in content if isinstance(c, dict))
        else:
            raise _bad("a message item wants content", "input")
    text = "\n".join(p for p in parts if p)
    if not text.strip():
        raise _bad("input has no text", "input")
    return text


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


def _response(info: TurnInfo) -> Response:
    """The turn as the SDK's ``Response``."""
    ours: dict[str, Any] = info.metadata.get(_KEY, {})
    status = _STATUS.get(info.status, "in_progress")
    output: list[dict[str, Any]] = []
    text = info.final.text if info.final is not None else info.final_text
    if info.final is not None and status in ("completed", "incomplete") and text:
        output.append(
            {
                "type": "message",
                "id": f"msg_{info.turn_id}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    error = None
    if status == "failed":
        code = "server_error"
        error = {"code": code, "message": text or info.status.value}
    usage = None
    if info.usage:
        prompt = int(info.usage.get("prompt_tokens", info.usage.get("input_tokens", 0)))
        completion = int(info.usage.get("completion_tokens", info.usage.get("output_tokens", 0)))
        usage = {
            "input_tokens": prompt,
            "output_tokens": completion,
            "total_tokens": prompt + completion,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
    return Response.model_validate(
        {
            "id": _ID_PREFIX + info.turn_id,
            "object": "response",
            "created_at": info.submitted_at or time.time(),
            "model": model_id(str(ours.get("agent"))),
            "status": status,
            "output": output,
            "instructions": ours.get("instructions"),
            "previous_response_id": ours.get("previous_response_id"),
            "metadata": ours.get("metadata") or {},
            "background": bool(ours.get("background")),
            "store": ours.get("store", True),
            "error": error,
            "usage": usage,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
    )


async def _wait(gateway: Gateway, turn_id: str) -> TurnInfo:
    """Poll the turn until it ends or waits for a person."""
    deadline = time.monotonic() + _WAIT_S
    while True:
        info = await gateway.producer.turn_info(turn_id)
        if info is not None and (info.final is not None or info.status.is_final):
            return info
        if info is not None and info.status is TurnStatus.AWAITING_APPROVAL:
            return info
        if time.monotonic() > deadline and info is not None:
            return info
        await asyncio.sleep(_POLL_S)


@router.post("/responses", dependencies=[listing()], summary="Create a response (run a turn)")
async def create_response(body: ResponseCreate, gateway: GatewayDep, scope: ScopeDep) -> Response:
    """Run one turn of the agent ``model`` names; its answer as a Response."""
    if body.stream:
        raise GatewayError(
            "stream is not supported by this server yet",
            status=422,
            error_code="not_supported",
            field="body.stream",
        )
    agent = await agent_of_model(gateway, body.model, scope)
    message = _text_of(body.input)
    if body.previous_response_id is not None:
        previous = await _lookup(gateway, body.previous_response_id, scope)
        session_id = previous.session_id
    else:
        prefix = scope.prefix if scope is not None else None
        session_id = f"{prefix or ''}resp-{uuid.uuid4()}"
    ours = {
        "agent": agent,
        "instructions": body.instructions,
        "previous_response_id": body.previous_response_id,
        "metadata": body.metadata,
        "background": bool(body.background),
        "store": body.store is not False,
    }
    handle = await gateway.producer.submit(
        session_id,
        message,
        agent=agent,
        metadata={**(body.metadata or {}), _KEY: ours},
        tenant=scope,
    )
    if body.background:
        info = await gateway.producer.turn_info(handle.turn_id)
    else:
        info = await _wait(gateway, handle.turn_id)
    if info is None:
        raise _not_found(_ID_PREFIX + handle.turn_id)
    return _response(info)


@router.get(
    "/responses/{response_id}",
    dependencies=[listing(inner=("response_id",))],
    summary="Retrieve a response",
)
async def retrieve_response(response_id: str, gateway: GatewayDep, scope: ScopeDep) -> Response:
    """The response's turn as it stands (poll a background one until it ends)."""
    return _response(await _lookup(gateway, response_id, scope))


@router.post(
    "/responses/{response_id}/cancel",
    dependencies=[listing(inner=("response_id",))],
    summary="Cancel a response",
)
async def cancel_response(response_id: str, gateway: GatewayDep, scope: ScopeDep) -> Response:
    """Cancel the response's turn (a queued one at once, a running one at its next step)."""
    info = await _lookup(gateway, response_id, scope)
    await gateway.producer.cancel(info.turn_id)
    return _response(await _wait_cancel(gateway, info.turn_id))


async def _wait_cancel(gateway: Gateway, turn_id: str) -> TurnInfo:
    deadline = time.monotonic() + 10.0
    while True:
        info = await gateway.producer.turn_info(turn_id)
        if info is not None and (info.status.is_final or time.monotonic() > deadline):
            return info
        await asyncio.sleep(_POLL_S)
