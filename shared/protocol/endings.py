"""Turn endings: every ``final`` event the session protocol publishes itself.

A turn ends with exactly one ``final`` event. For a turn that ran, the runner
publishes it after its commit (``worker/agent/runner.py``). Every other ending
is one of these: a turn refused by the ``reject`` strategy or cancelled while
queued (the producer's), a turn the worker could not run or finish, and a
re-issued turn its dead holder had already committed (the drain's). The drain
publishes through its fenced emitter, so a worker that lost the session's lease
ends nothing (docs/architecture.md, "Session protocol").
"""

from __future__ import annotations

from enum import StrEnum

from reactq.shared.bus import EventBus, TurnEmitter
from reactq.shared.events import ErrorEvent, FinalEvent, QueuedEvent
from reactq.shared.state.base import StateStore, TurnRecord
from reactq.shared.turns import TurnRequest, TurnStatus

REJECTED_TEXT = "rejected: the session already has a turn in progress"


class Failure(StrEnum):
    """Why the worker ended a turn with an error instead of running it to its end;
    the ``code`` of the turn's error event."""

    WORKER_ERROR = "worker_error"
    """The infrastructure around the kernel failed (the state store, the bus)."""
    INVALID_TURN = "invalid_turn"
    """The turn's payload is malformed or names another session."""
    UNKNOWN_AGENT = "unknown_agent"
    """This worker does not host the turn's agent."""
    MAX_ATTEMPTS = "max_attempts"
    """The turn was lost with its worker ``max_attempts`` times."""


async def rejected(bus: EventBus, turn: TurnRequest) -> FinalEvent:
    """End a turn the ``reject`` strategy refused: its ``queued``, then its ``final``,
    so that a follower of the session sees the turn begin and end."""
    sid, tid = turn.session_id, turn.turn_id
    await bus.publish(
        QueuedEvent(session_id=sid, turn_id=tid, agent=turn.agent, message=turn.message)
    )
    return await bus.publish(
        FinalEvent(
            session_id=sid, turn_id=tid, seq=1, text=REJECTED_TEXT, status=TurnStatus.REJECTED
        )
    )


async def cancelled(bus: EventBus, session_id: str, turn_id: str, why: str) -> FinalEvent:
    """End a turn cancelled before any worker took it (attempt 0: it never ran)."""
    return await bus.publish(
        FinalEvent(
            session_id=session_id,
            turn_id=turn_id,
            attempt=0,
            seq=1,
            text=f"cancelled: {why}",
            status=TurnStatus.CANCELLED,
        )
    )


async def failed(
    emitter: TurnEmitter,
    failure: Failure,
    message: str,
    *,
    store: StateStore | None = None,
    fence: int | None = None,
) -> FinalEvent:
    """End a turn with an error event, then a ``final`` with status ``error``.

    With ``store``, the failure is first committed as the turn's record (fenced by
    ``fence``), so that a later attempt finds the turn done rather than run it.
    """
    await emitter.emit(ErrorEvent, code=str(failure), message=message)
    if store is not None:
        record = TurnRecord(
            turn_id=emitter.turn_id,
            session_id=emitter.session_id,
            status=TurnStatus.ERROR,
            attempt=emitter.attempt,
            final_text=message,
            error=str(failure),
        )
        await store.commit_turn(emitter.session_id, [], record, fence=fence)
    return await emitter.emit(FinalEvent, text=message, status=TurnStatus.ERROR, code=str(failure))


async def committed(emitter: TurnEmitter, record: TurnRecord) -> FinalEvent | None:
    """End a re-issued turn that its previous holder committed before it died.

    Its ``final`` says what was committed; it is published only if the stream
    lacks one (the holder may have died after publishing it). Returns the final
    published, or None.
    """
    events = await emitter.bus.read(emitter.session_id, after="0")
    if any(e.type == "final" and e.turn_id == emitter.turn_id for e in events):
        return None
    return await emitter.emit(
        FinalEvent, text=record.final_text or "", status=record.status, code=record.error
    )
