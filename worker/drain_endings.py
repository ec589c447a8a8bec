"""Turns the drain ends itself, and finals found out already.

A turn the drain cannot run ends with a failure final (``_fail``); a malformed payload
is rejected; a turn whose earlier holder committed it, or published its final, ends
with what is there; a final whose call failed on its way back is settled once Redis
answers; and once a final is out, its delegations and its webhook follow (``_ended``).
``TurnEndings`` is a base of ``Drainer``; it uses the drain's attributes named on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import time

from reactq.shared.audit import backfill
from reactq.shared.bus import EventBus, TurnEmitter
from reactq.shared.events import FinalEvent
from reactq.shared.protocol import endings
from reactq.shared.protocol.children import Children
from reactq.shared.protocol.endings import Failure
from reactq.shared.protocol.outcomes import ClaimedTurn
from reactq.shared.protocol.queue import SessionQueue
from reactq.shared.redis_client import REDIS_OUTAGE
from reactq.shared.settings import Settings
from reactq.shared.state import StateStore, StepStore
from reactq.shared.turns import TURN_ID_RE, TurnStatus
from reactq.shared.webhooks import Send, Webhooks
from reactq.worker.drain_emitter import FencedEmitter

__all__ = ["TurnEndings"]

log = logging.getLogger("reactq.worker")


class TurnEndings:
    """How the drain ends turns (a base of ``Drainer``, which sets these attributes)."""

    queue: SessionQueue
    bus: EventBus
    store: StateStore
    steps: StepStore
    settings: Settings
    children: Children
    webhooks: Webhooks | None
    send_webhook: Send | None
    _settling: set[asyncio.Future[None]]

    def _settle_later(self, sid: str, turn_id: str, emitter: FencedEmitter) -> None:
        task = asyncio.get_running_loop().create_task(
            self._settle(sid, turn_id, emitter), context=contextvars.Context()
        )
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settle(self, sid: str, turn_id: str, emitter: FencedEmitter) -> None:
        """A final whose call failed on its way back: once Redis answers, if the stream
        holds the final, record what the audit log lacks and run what follows a final
        (its webhook, its delegations: each acts once). Without it, the call never ran:
        the turn is still in its running slot, and its next attempt ends it."""
        delay, deadline = 0.1, time.monotonic() + self.settings.store_outage_seconds
        while True:
            try:
                events = await self.bus.read(sid, after="0")
                break
            except REDIS_OUTAGE:
                if time.monotonic() > deadline:
                    log.error("session %s: turn %s: could not settle its final", sid, turn_id)
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        final = next(
            (e for e in events if isinstance(e, FinalEvent) and e.turn_id == turn_id), None
        )
        if final is None:
            return
        await self._backfill_audit(sid, turn_id)
        try:
            await emitter.published(final)
        except Exception:
            log.exception("session %s: turn %s: what follows its final failed", sid, turn_id)

    async def _backfill_audit(self, sid: str, turn_id: str) -> None:
        """Record what the turn's earlier attempts published and the audit log lacks
        (their holder may have died before writing it). Never fails the turn."""
        try:
            if added := await backfill(self.bus, sid, turn_id):
                log.info("session %s: audit log: recorded %d events of %s", sid, added, turn_id)
        except Exception:
            log.exception("session %s: audit log: could not backfill turn %s", sid, turn_id)

    async def _already_committed(self, sid: str, turn_id: str, emitter: TurnEmitter) -> bool:
        """A re-issued turn whose previous holder died after committing it is done; so
        is one whose final is out already (its holder could not finish it after)."""
        record = await self.store.get_turn(turn_id)
        if record is None:
            final = next(
                (
                    e
                    for e in await self.bus.read(sid, after="0")
                    if isinstance(e, FinalEvent) and e.turn_id == turn_id
                ),
                None,
            )
            if final is None:
                return False
            await self._ended(final)
            await self.queue.finish(sid, turn_id, final.status)
            return True
        if await endings.committed(emitter, record) is None:
            # The dead holder published the final; it may have died before it
            # enqueued the webhook (a delivery enqueued already is not sent again).
            for event in await self.bus.read(sid, after="0"):
                if isinstance(event, FinalEvent) and event.turn_id == turn_id:
                    await self._ended(event)
                    break
        await self.queue.finish(sid, turn_id, record.status)
        return True

    async def _ended(self, final: FinalEvent, settle: bool = True, webhook: bool = True) -> None:
        """A turn's final is out: settle its delegations (``settle``: it is a child, or
        may have children), enqueue its webhook, if it has one (``webhook``: it may).
        Never fails the turn (the delivery is lost, and logged, when Redis or the
        broker is away)."""
        if settle:
            await self.children.ended(final)
        if not webhook or self.webhooks is None or self.send_webhook is None:
            return
        try:
            await self.webhooks.ended(final, self.send_webhook)
        except Exception:
            log.exception("turn %s: could not enqueue its webhook", final.turn_id)

    async def _fail(
        self, emitter: TurnEmitter, failure: Failure, message: str, commit_fence: int | None = None
    ) -> FinalEvent:
        log.error("turn %s failed: %s: %s", emitter.turn_id, failure, message)
        with contextlib.suppress(Exception):  # steps of a turn that ended never commit
            await self.steps.discard_checkpoint(emitter.session_id, emitter.turn_id)
        store = self.store if commit_fence is not None else None
        return await endings.failed(emitter, failure, message, store=store, fence=commit_fence)

    async def _reject_malformed(self, sid: str, claimed: ClaimedTurn, exc: Exception) -> None:
        """A payload that cannot be a turn: log it, end its turn if it names a valid
        turn id, take it out of the running slot and go on."""
        log.error("session %s: malformed turn payload (%s): %.200r", sid, exc, claimed.payload)
        turn_id = claimed.turn_id or _guess_turn_id(claimed.payload)
        if turn_id:
            emitter = TurnEmitter(self.bus, sid, turn_id, claimed.attempt)
            text = f"the turn payload is malformed: {exc}"
            await self._ended(await self._fail(emitter, Failure.INVALID_TURN, text))
        await self.queue.finish(sid, claimed.turn_id, TurnStatus.ERROR)


def _guess_turn_id(payload: str) -> str:
    """The payload's turn id if it is a valid one (an event may carry it), else ''."""
    with contextlib.suppress(Exception):
        value = json.loads(payload).get("turn_id")
        if isinstance(value, str) and TURN_ID_RE.fullmatch(value):
            return value
    return ""
