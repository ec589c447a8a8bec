"""One ``tools/call``: a turn of the tool's agent, submitted through the gateway's producer,
its events sent as progress notifications, its final as the call's result.

A turn that did not complete (an error, a budget, a guardrail, a cancellation) is a tool
error (``isError``), as is input the pool refuses: the call reached the tool, which
failed. A turn that parks on a person's approval answers at once, a tool error naming the
turn to decide (``POST /v1/turns/{turn_id}/decisions``), rather than holding the call
open for as long as the person takes. The call being cancelled (``notifications/cancelled``
on a session, the response stream closed on the stateless core) cancels the turn.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp_types import Annotations, CallToolResult, TextContent

from reactq.producer.gateway.mcp_server.tools import CallArguments
from reactq.producer.gateway.scopes import session_visible
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
from reactq.shared.errors import ConfigError, InvalidTurnError, TurnRejectedError
from reactq.shared.events import ApprovalRequestedEvent, FinalEvent
from reactq.shared.turns import MultitaskStrategy, TurnStatus

__all__ = ["MAX_PROGRESS_CHARS", "META_PREFIX", "Progress", "run_call", "tool_error"]

logger = logging.getLogger(__name__)

META_PREFIX = "reactq/"
"""The prefix of the result's ``_meta`` keys: ``reactq/session_id``, ``reactq/turn_id``,
``reactq/status``."""

MAX_PROGRESS_CHARS = 8_000
"""An event's JSON longer than this goes out cut, in its progress message."""

Progress = Callable[[float, str], Awaitable[None]]
"""``progress(n, message)``: one progress notification (a no-op without a token)."""


def tool_error(text: str, meta: dict[str, Any] | None = None) -> CallToolResult:
    """A failed call, as MCP says a tool's failure is answered (``isError``)."""
    return CallToolResult(content=[TextContent(text=text)], is_error=True, _meta=meta)


def _new_session(scope: KeyScope | None) -> str:
    """A session id for a call that names none: within the key's tenant."""
    prefix = scope.prefix if scope is not None and scope.prefix else ""
    return f"{prefix}mcp-{uuid.uuid4().hex}"


def _session_note(session_id: str) -> TextContent:
    """The block telling a model how to continue the conversation."""
    return TextContent(
        text=f"(session_id: {session_id}; pass it to continue this conversation)",
        annotations=Annotations(audience=["assistant"]),
    )


def _progress_text(event_json: str) -> str:
    if len(event_json) <= MAX_PROGRESS_CHARS:
        return event_json
    return event_json[:MAX_PROGRESS_CHARS] + "…"


async def run_call(
    gateway: Gateway,
    scope: KeyScope | None,
    agent: str,
    has_output: bool,
    args: CallArguments,
    progress: Progress,
) -> CallToolResult:
    """Run one turn of ``agent`` for a call and answer its final (``has_output``: the
    agent declares an output schema, so a success carries ``structuredContent``)."""
    if scope is not None and scope.read_only:
        return tool_error(f"the API key {scope.name!r} is read-only: it cannot run turns")
    session_id = args.session_id or _new_session(scope)
    if args.session_id is not None and not await session_visible(gateway, scope, session_id):
        return tool_error(f"no session {session_id!r}")
    try:
        handle = await gateway.producer.submit(
            session_id,
            args.message,
            agent=agent,
            strategy=MultitaskStrategy.ENQUEUE,
            metadata={"via": "mcp"},
            context=args.context,
            tenant=scope,
        )
    except (InvalidTurnError, TurnRejectedError, ConfigError) as exc:
        return tool_error(f"the turn was refused: {exc.message}")
    meta = {f"{META_PREFIX}session_id": session_id, f"{META_PREFIX}turn_id": handle.turn_id}
    final: FinalEvent | None = None
    count = 0
    try:
        async for event in handle.events():
            if isinstance(event, FinalEvent):
                final = event
                break
            count += 1
            await progress(count, _progress_text(event.model_dump_json(exclude_none=True)))
            if isinstance(event, ApprovalRequestedEvent):
                tools = ", ".join(str(c.get("tool")) for c in event.calls)
                return tool_error(
                    f"the turn waits for a person's approval of {tools}: decide with POST "
                    f"/v1/turns/{handle.turn_id}/decisions, then call again with this "
                    f"session_id ({session_id})",
                    {**meta, f"{META_PREFIX}status": TurnStatus.AWAITING_APPROVAL.value},
                )
    except anyio.get_cancelled_exc_class():
        # The client cancelled the call (or closed its stream): the turn goes too. Shielded,
        # since this task is being cancelled.
        with anyio.CancelScope(shield=True):
            await _cancel(gateway, handle.turn_id)
        raise
    if final is None:
        return tool_error("the turn's events ended before its final", meta)
    return _result(final, has_output, {**meta, f"{META_PREFIX}status": final.status.value})


async def _cancel(gateway: Gateway, turn_id: str) -> None:
    try:
        await gateway.producer.cancel(turn_id)
    except Exception as exc:  # the call is gone either way; say why the turn may run on
        logger.warning("MCP call cancelled, but its turn %s was not: %s", turn_id, exc)


def _result(final: FinalEvent, has_output: bool, meta: dict[str, Any]) -> CallToolResult:
    session_id = final.session_id
    if final.status is not TurnStatus.COMPLETED or (has_output and final.output is None):
        why = f" ({final.code})" if final.code else ""
        return tool_error(f"the turn ended {final.status.value}{why}: {final.text}", meta)
    return CallToolResult(
        content=[TextContent(text=final.text), _session_note(session_id)],
        structured_content=final.output if has_output else None,
        _meta=meta,
    )
