"""``TurnHandle``: what ``Producer.submit`` returns, a submitted turn's events and outcome.

``typed_output`` reads a turn's structured answer as a pydantic model (the sync producer's
handle uses it too).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel, ValidationError

from reactq.producer.service_errors import translates_service_errors
from reactq.shared.errors import InvalidOutputError
from reactq.shared.events import Event, FinalEvent, QueuedEvent
from reactq.shared.turns import TurnRequest

if TYPE_CHECKING:
    from reactq.producer.client import Producer

__all__ = ["REPLAY_BEFORE_QUEUED_MS", "TurnHandle", "typed_output"]

M = TypeVar("M", bound=BaseModel)


REPLAY_BEFORE_QUEUED_MS = 5000
"""How far before its ``queued`` event a handle reads the stream for its turn's events."""


def _before(stream_id: str | None) -> str:
    """A stream id ``REPLAY_BEFORE_QUEUED_MS`` before ``stream_id`` ("0" without one)."""
    if not stream_id:
        return "0"
    ms = int(stream_id.partition("-")[0])
    return f"{max(ms - REPLAY_BEFORE_QUEUED_MS, 0)}-0"


@translates_service_errors
class TurnHandle:
    """A submitted turn: its id, its events and its outcome."""

    def __init__(self, producer: Producer, turn: TurnRequest, queued: QueuedEvent) -> None:
        self.producer = producer
        self.turn_id = turn.turn_id
        self.session_id = turn.session_id
        self.queued = queued
        self._final: FinalEvent | None = None

    async def events(self) -> AsyncIterator[Event]:
        """This turn's events, from its ``queued`` event to its ``final``.

        Replays from the stream, so it never misses an event however late it is
        called.
        """
        yield self.queued
        # From a little before `queued`: a worker may take the turn between its push and
        # the producer's `queued` (one round trip), and publish its `started` first.
        async for event in self.producer.subscribe(self.session_id, after=_before(self.queued.id)):
            if event.turn_id != self.turn_id or event.id == self.queued.id:
                continue
            yield event
            if isinstance(event, FinalEvent):
                self._final = event
                return

    async def result(self, timeout: float | None = None) -> FinalEvent:
        """Wait for the turn's FinalEvent (``.text``, ``.status``)."""
        if self._final is not None:
            return self._final

        async def wait() -> FinalEvent:
            async for event in self.events():
                if isinstance(event, FinalEvent):
                    return event
            raise RuntimeError("the event stream ended before the turn's final event")

        self._final = await asyncio.wait_for(wait(), timeout)
        return self._final

    @overload
    async def output(
        self, output_type: None = None, timeout: float | None = None
    ) -> dict[str, Any]: ...
    @overload
    async def output(self, output_type: type[M], timeout: float | None = None) -> M: ...
    async def output(
        self, output_type: type[M] | None = None, timeout: float | None = None
    ) -> M | dict[str, Any]:
        """Wait for the turn's structured answer (an agent with ``output_type``): as
        ``output_type`` (a pydantic model class), else as the JSON object.
        InvalidOutputError when the turn ended without one (its status and code say
        why) or the object does not fit ``output_type``."""
        return typed_output(await self.result(timeout), output_type)


def typed_output(final: FinalEvent, output_type: type[M] | None) -> M | dict[str, Any]:
    """``final.output`` as ``output_type`` (or the object itself when None);
    InvalidOutputError when the turn ended without one, or it does not fit."""
    if final.output is None:
        raise InvalidOutputError(
            f"turn {final.turn_id} ended with status {final.status} and no structured "
            f"output (code {final.code or 'none'}): {final.text[:200]}",
            status=str(final.status),
            turn_code=final.code,
        )
    if output_type is None:
        return final.output
    try:
        return output_type.model_validate(final.output)
    except ValidationError as exc:
        raise InvalidOutputError(
            f"turn {final.turn_id}'s output does not fit {output_type.__name__}: {exc}"
        ) from None
