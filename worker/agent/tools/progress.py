"""A running tool's progress: ``ToolContext.progress`` publishes ``tool_progress``.

The executor marks the call a tool runs for (``running``, a context variable: calls
of one step that run at once each see their own); ``report`` publishes an event for
it at most every ``PROGRESS_INTERVAL`` seconds. A report that comes sooner replaces
the one waiting, which goes out when the interval is up, or when the call ends (before
its result). Outside a call (a tool called directly, a test) a report does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from reactq.shared.bus import TurnEmitter
from reactq.shared.events import ToolProgressEvent

__all__ = ["MAX_MESSAGE_CHARS", "PROGRESS_INTERVAL", "Reporter", "report", "reporter", "running"]

Reporter = Callable[[str, float | None, Mapping[str, Any] | None], Awaitable[None]]
"""``report`` bound to one call: what a callback run in another task (an MCP session's
reader) reports through."""

log = logging.getLogger("reactq.tools")

PROGRESS_INTERVAL = 0.25
"""Least seconds between two ``tool_progress`` events of one call."""
MAX_MESSAGE_CHARS = 500
"""A longer message is cut (from its start: the newest words are at its end)."""


class _Call:
    """One running call's reports: when the last went out, and the one waiting."""

    __slots__ = ("call_id", "emitter", "last", "pending", "sending", "timer", "tool")

    def __init__(self, emitter: TurnEmitter, call_id: str, tool: str) -> None:
        self.emitter = emitter
        self.call_id = call_id
        self.tool = tool
        self.last = 0.0
        self.pending: dict[str, Any] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.sending: asyncio.Future[None] | None = None
        """The report the timer sent (a reference, so the loop does not drop it)."""

    async def send(self, fields: dict[str, Any]) -> None:
        self.last = time.monotonic()
        try:
            await self.emitter.emit_alone(
                ToolProgressEvent, tool=self.tool, call_id=self.call_id, **fields
            )
        except Exception:
            # Progress is a courtesy: a bus that failed must not fail the tool.
            log.warning("tool %s: a progress event was not published", self.tool, exc_info=True)

    def later(self) -> None:
        fields, self.pending, self.timer = self.pending, None, None
        if fields is not None:
            self.sending = asyncio.ensure_future(self.send(fields))

    async def close(self) -> None:
        """The call ended: the report still waiting goes out now."""
        if self.timer is not None:
            self.timer.cancel()
        fields, self.pending, self.timer = self.pending, None, None
        if self.sending is not None and not self.sending.done():
            await self.sending
        if fields is not None:
            await self.send(fields)


_CURRENT: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "reactq_tool_call", default=None
)


@contextlib.asynccontextmanager
async def running(emitter: TurnEmitter, call_id: str, tool: str) -> AsyncIterator[None]:
    """Mark the call the block runs a tool for, its reports published by ``emitter``."""
    call = _Call(emitter, call_id, tool)
    token = _CURRENT.set(call)
    try:
        yield
    finally:
        _CURRENT.reset(token)
        await call.close()


async def report(
    message: str = "", fraction: float | None = None, data: Mapping[str, Any] | None = None
) -> None:
    """Publish the running call's progress (see the module's docstring)."""
    call = _CURRENT.get()
    if call is not None:
        await _report(call, message, fraction, data)


def reporter() -> Reporter | None:
    """``report`` for the call running now, usable from any task; None outside a call."""
    call = _CURRENT.get()
    return None if call is None else functools.partial(_report, call)


async def _report(
    call: _Call, message: str, fraction: float | None, data: Mapping[str, Any] | None
) -> None:
    if fraction is not None:
        fraction = min(max(float(fraction), 0.0), 1.0)
    if len(message) > MAX_MESSAGE_CHARS:
        message = "…" + message[-(MAX_MESSAGE_CHARS - 1) :]
    fields = {"message": message, "fraction": fraction, "data": dict(data) if data else None}
    wait = call.last + PROGRESS_INTERVAL - time.monotonic()
    if wait <= 0 and call.pending is None:
        await call.send(fields)
        return
    call.pending = fields  # the newest replaces the one waiting
    if call.timer is None:
        call.timer = asyncio.get_running_loop().call_later(max(wait, 0.0), call.later)
