"""The drain: run a session's pending turns one at a time under its lease.

DESIGN.md steps 2-4. ``drain`` takes the session lease (or returns: the holder
drains), moves turns one by one into the running slot, runs each while renewing
the lease, commits it fenced by the lease's token, and finally releases the lease
and looks at pending once more so that a turn pushed during release is never
stranded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable

from shared.bus import EventBus, TurnEmitter
from shared.errors import StaleLeaseError
from shared.events import ErrorEvent, FinalEvent, StartedEvent
from shared.locks import SessionLock
from shared.sessions import ClaimedTurn, SessionQueue
from shared.settings import Settings
from shared.state import StateStore, TurnRecord
from shared.turns import TurnRequest, TurnStatus, validate_session_id
from worker.agent.runner import AgentRunner

log = logging.getLogger("reactq.worker")


class LeaseLostError(Exception):
    """The worker could not renew the session lease; the turn must not commit."""


class Drainer:
    """Runs the session protocol for the sessions this worker process drains."""

    def __init__(
        self,
        *,
        queue: SessionQueue,
        lock: SessionLock,
        bus: EventBus,
        store: StateStore,
        runners: dict[str, AgentRunner],
        settings: Settings,
        worker_name: str,
        redispatch: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> None:
        self.queue = queue
        self.lock = lock
        self.bus = bus
        self.store = store
        self.runners = runners
        self.settings = settings
        self.worker_name = worker_name
        self.redispatch = redispatch
        self.stopping = False
        self.in_flight = 0

    async def drain(self, session_id: object) -> int:
        """Run the session's pending turns if no other worker holds it; return how many."""
        try:
            sid = validate_session_id(session_id)
        except Exception:
            log.error("drain: ignoring a task with an invalid session id %r", session_id)
            return 0
        ran = 0
        while True:
            token = await self.lock.acquire(sid)
            if token is None:
                return ran
            try:
                ran += await self._drain_held(sid, token)
            except (StaleLeaseError, LeaseLostError) as exc:
                log.warning("session %s: lease lost (%s); leaving it to the new holder", sid, exc)
                return ran
            finally:
                await self.lock.release(sid, token)
            # Release-then-recheck: a turn pushed while we released would
            # otherwise wait for a drain that already returned "busy".
            if not await self.queue.has_work(sid):
                return ran
            if self.stopping:
                await self._hand_over(sid)
                return ran

    async def _drain_held(self, sid: str, token: int) -> int:
        ran = 0
        while not self.stopping:
            claimed = await self.queue.claim_next(sid)
            if claimed is None:
                break
            await self._run_claimed(sid, claimed, token)
            ran += 1
        return ran

    async def _hand_over(self, sid: str) -> None:
        """On shutdown, ask another worker to drain what is left."""
        claimed_agent = await self.queue.redis.hget(self.queue.keys.meta(sid), "agent")
        if self.redispatch is not None and claimed_agent is not None:
            agent = claimed_agent.decode() if isinstance(claimed_agent, bytes) else claimed_agent
            await self.redispatch(sid, agent)

    async def _run_claimed(self, sid: str, claimed: ClaimedTurn, token: int) -> None:
        try:
            turn = claimed.parse()
        except Exception as exc:
            await self._reject_malformed(sid, claimed, exc)
            return
        emitter = TurnEmitter(self.bus, sid, turn.turn_id, claimed.attempt)
        try:
            await self._run_turn(sid, claimed, turn, emitter, token)
        except (StaleLeaseError, LeaseLostError):
            raise
        except Exception as exc:
            # Infrastructure failed around the kernel (the store, the bus): end the
            # turn visibly rather than leave it stuck in the running slot.
            log.exception("session %s: turn %s failed in the worker", sid, turn.turn_id)
            with contextlib.suppress(Exception):
                await self._fail(emitter, "worker_error", f"the worker failed: {exc!r}"[:500])
            await self.queue.finish(sid, turn.turn_id, TurnStatus.ERROR)

    async def _run_turn(
        self, sid: str, claimed: ClaimedTurn, turn: TurnRequest, emitter: TurnEmitter, token: int
    ) -> None:
        if turn.session_id != sid:
            await self._fail(emitter, "invalid_turn", "the turn names another session")
            await self.queue.finish(sid, turn.turn_id, TurnStatus.ERROR)
            return
        if claimed.attempt > 1 and await self._already_committed(sid, turn.turn_id, emitter):
            return
        if claimed.attempt > self.settings.max_attempts:
            text = f"the turn was lost {claimed.attempt - 1} times with its worker; giving up"
            await self._fail(emitter, "max_attempts", text, commit_fence=token)
            await self.queue.finish(sid, turn.turn_id, TurnStatus.ERROR)
            return
        runner = self.runners.get(turn.agent)
        if runner is None:
            await self._fail(emitter, "unknown_agent", f"this worker does not host {turn.agent!r}")
            await self.queue.finish(sid, turn.turn_id, TurnStatus.ERROR)
            return
        # The fence is recorded on the session row, so the row must exist first.
        await self.store.ensure_session(sid, turn.agent)
        await self.store.claim(sid, token)
        await emitter.emit(StartedEvent, worker=self.worker_name)
        log.info("turn %s started: session %s attempt %d", turn.turn_id, sid, claimed.attempt)
        self.in_flight += 1
        try:
            final = await self._run_with_lease(
                sid,
                token,
                runner.run_turn(
                    session_id=sid,
                    message=turn.message,
                    turn_id=turn.turn_id,
                    emitter=emitter,
                    fence=token,
                ),
            )
        finally:
            self.in_flight -= 1
        await self.queue.finish(sid, turn.turn_id, final.status)
        log.info("turn %s finished: %s", turn.turn_id, final.status)

    async def _run_with_lease(
        self, sid: str, token: int, work: Awaitable[FinalEvent]
    ) -> FinalEvent:
        """Run ``work`` while renewing the lease; cancel it if the lease is lost."""
        task = asyncio.ensure_future(work)
        period = self.settings.lease_ttl_seconds / 3
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=period)
                if done:
                    return task.result()
                if not await self.lock.renew(sid, token):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                    raise LeaseLostError(f"could not renew the lease of {sid}")
        finally:
            if not task.done():
                task.cancel()

    async def _already_committed(self, sid: str, turn_id: str, emitter: TurnEmitter) -> bool:
        """A re-issued turn whose previous holder died after committing it is done."""
        record = await self.store.get_turn(turn_id)
        if record is None:
            return False
        if not await self._has_final(sid, turn_id):
            await emitter.emit(FinalEvent, text=record.final_text or "", status=record.status)
        await self.queue.finish(sid, turn_id, record.status)
        return True

    async def _has_final(self, sid: str, turn_id: str) -> bool:
        events = await self.bus.read(sid, after="0")
        return any(e.type == "final" and e.turn_id == turn_id for e in events)

    async def _fail(
        self, emitter: TurnEmitter, code: str, message: str, commit_fence: int | None = None
    ) -> None:
        log.error("turn %s failed: %s: %s", emitter.turn_id, code, message)
        await emitter.emit(ErrorEvent, code=code, message=message)
        if commit_fence is not None:
            record = TurnRecord(
                turn_id=emitter.turn_id,
                session_id=emitter.session_id,
                status=TurnStatus.ERROR,
                attempt=emitter.attempt,
                final_text=message,
                error=code,
            )
            await self.store.commit_turn(emitter.session_id, [], record, fence=commit_fence)
        await emitter.emit(FinalEvent, text=message, status=TurnStatus.ERROR)

    async def _reject_malformed(self, sid: str, claimed: ClaimedTurn, exc: Exception) -> None:
        """A payload we cannot parse: report it on its turn if it has an id, go on."""
        log.error("session %s: malformed turn payload (%s): %.200r", sid, exc, claimed.payload)
        turn_id = claimed.turn_id or _guess_turn_id(claimed.payload)
        if turn_id:
            emitter = TurnEmitter(self.bus, sid, turn_id, claimed.attempt)
            await self._fail(emitter, "invalid_turn", f"the turn payload is malformed: {exc}")
        await self.queue.finish(sid, turn_id, TurnStatus.ERROR)


def _guess_turn_id(payload: str) -> str:
    with contextlib.suppress(Exception):
        value = json.loads(payload).get("turn_id")
        if isinstance(value, str):
            return value
    return ""
