"""The drain: run a session's pending turns one at a time under its lease.

The worker's side of docs/architecture.md, "Session protocol", steps 2-8, built
on the operations of ``reactq.shared.protocol``. ``drain`` takes the session
lease with its first turn in one call (or returns: the holder drains), moves the
next turns one by one into the running slot, runs each while renewing the lease,
commits it fenced by the lease's token, and finally releases the lease and looks at
pending once more so that a turn pushed during release is never stranded. A turn
found in the running slot was left by a dead holder and runs again as attempt n+1,
until ``max_attempts`` runs were lost. Every final the drain publishes goes
through ``FencedEmitter``.

``Drainer``'s parts beside this module: its emitter (``drain_emitter.py``), its lease
work (``drain_lease.py``), turns parked and resumed (``drain_parking.py``), and the
turns it ends itself (``drain_endings.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from reactq.shared.bus import EventBus, ScriptGuard, TurnEmitter, publish_all
from reactq.shared.errors import (
    EvictedError,
    LeaseLostError,
    StaleLeaseError,
    StoreUnavailableError,
    TurnCommittedError,
)
from reactq.shared.events import BaseEvent, StartedEvent
from reactq.shared.logs import log_context
from reactq.shared.protocol.approvals import Approvals
from reactq.shared.protocol.children import Children
from reactq.shared.protocol.control import CancelMode
from reactq.shared.protocol.deadlines import Deadlines
from reactq.shared.protocol.endings import Failure
from reactq.shared.protocol.lease import SessionLease
from reactq.shared.protocol.outcomes import ClaimedTurn, LeaseEnd
from reactq.shared.protocol.queue import SessionQueue
from reactq.shared.protocol.workers import WorkerRegistry
from reactq.shared.redis_client import REDIS_OUTAGE
from reactq.shared.settings import Settings
from reactq.shared.state import StateStore, StepStore
from reactq.shared.turns import TurnRequest, TurnStatus, validate_session_id
from reactq.shared.webhooks import Send, Webhooks
from reactq.worker.agent.delegation import CURRENT as CURRENT_DELEGATOR
from reactq.worker.agent.runner import AgentRunner
from reactq.worker.agent.suspend import AwaitingApproval, AwaitingChildren
from reactq.worker.child_turns import ForwardingBus, PoolDelegator
from reactq.worker.drain_emitter import FencedEmitter, Finished
from reactq.worker.drain_endings import TurnEndings
from reactq.worker.drain_lease import LeaseHolding, Running
from reactq.worker.drain_parking import ParkedTurns

log = logging.getLogger("reactq.worker")

Dispatch = Callable[[str, str], Awaitable[None]]


class Drainer(LeaseHolding, ParkedTurns, TurnEndings):
    """Runs the session protocol for the sessions this worker process drains."""

    def __init__(
        self,
        *,
        queue: SessionQueue,
        lease: SessionLease,
        deadlines: Deadlines,
        bus: EventBus,
        store: StateStore,
        runners: dict[str, AgentRunner],
        settings: Settings,
        worker_name: str,
        redispatch: Dispatch | None = None,
        steps: StepStore | None = None,
        webhooks: Webhooks | None = None,
    ) -> None:
        """``steps``: where the runners checkpoint turns' steps (the store by default;
        the pool passes its ``TurnSteps``); ``webhooks``: the turns' webhook records (a
        delivery is enqueued through ``send_webhook`` once a turn's final is out)."""
        self.queue = queue
        self.steps: StepStore = steps if steps is not None else store
        self.approvals = Approvals(queue.redis, queue.keys, queue.meta_ttl)
        self.lease = lease
        self.deadlines = deadlines
        self.bus = bus
        self.store = store
        self.runners = runners
        self.settings = settings
        self.worker_name = worker_name
        self.redispatch = redispatch
        self.webhooks = webhooks
        self.send_webhook: Send | None = None
        self.stopping = False
        self.running: dict[str, Running] = {}
        self._background: set[asyncio.Future[int]] = set()
        self._settling: set[asyncio.Future[None]] = set()
        self._fenced: dict[str, int] = {}
        self._current: dict[str, str] = {}  # session -> the turn it runs here
        self.children = Children(
            queue.redis,
            queue.keys,
            queue,
            bus,
            self.dispatch,
            meta_ttl_seconds=queue.meta_ttl,
            dispatch_grace_seconds=settings.lease_ttl_seconds,
        )
        self.workers = WorkerRegistry(queue.redis, queue.keys)

    @property
    def in_flight(self) -> int:
        """Turns running in this process now."""
        return len(self.running)

    def request_cancel(self, turn_id: str, mode: CancelMode = CancelMode.CANCEL) -> bool:
        """Stop a turn running here (from a control notice); False if not here."""
        entry = self.running.get(turn_id)
        if entry is None:
            return False
        entry.mode = mode
        entry.cancel.set()
        return True

    def evict_all(self) -> int:
        """Shutdown grace is over: stop every turn and give it back, uncharged."""
        for entry in self.running.values():
            entry.evicted = True
            if entry.task is not None:
                entry.task.cancel()
        return len(self.running)

    async def dispatch(self, session_id: str) -> None:
        """Ask a worker (through the broker when there is one) to drain a session."""
        agent = await self.queue.session_agent(session_id)
        if agent is None:
            return
        if self.redispatch is not None:
            await self.redispatch(session_id, agent)
        else:
            # In a context of its own: the caller's (a parent turn's, the reaper's)
            # would label the drain's log lines with another session and turn.
            loop = asyncio.get_running_loop()
            task = loop.create_task(self._drain_here(session_id), context=contextvars.Context())
            self._background.add(task)
            task.add_done_callback(functools.partial(self._drained, session_id))

    async def _drain_here(self, session_id: str) -> int:
        with log_context(session_id=session_id):
            return await self.drain(session_id)

    def _drained(self, session_id: str, task: asyncio.Future[int]) -> None:
        """A drain this process started itself ended: its failure is logged here, since
        nobody awaits it (it was "never retrieved")."""
        self._background.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error(
                "session %s: a drain failed: %r",
                session_id,
                exc,
                exc_info=exc,
                extra={"session_id": session_id},
            )

    async def drain(self, session_id: object) -> int:
        """Run the session's pending turns if no other worker holds it; return how many."""
        try:
            sid = validate_session_id(session_id)
        except Exception:
            log.error("drain: ignoring a task with an invalid session id %r", session_id)
            return 0
        ran, reseeded = 0, False
        while not self.stopping:
            # The lease and the first turn in one call (``take``); with nothing to
            # claim, the lease was given straight back.
            taken = await self.queue.take(sid, self.lease)
            if taken is None:
                return ran
            token, first = taken
            if not isinstance(first, ClaimedTurn):
                return ran
            log.debug("session %s: lease taken (token %d)", sid, token)
            interrupted = False
            failure: Exception | None = None
            end: LeaseEnd | None = None
            try:
                held, end = await self._holding_lease(
                    sid, token, self._drain_held(sid, token, first)
                )
                ran += held
            except (StaleLeaseError, LeaseLostError) as exc:
                if not reseeded and await self._reseed(sid, token, exc):
                    reseeded = True  # once a drain: the next take runs the turn again
                    continue
                log.warning("session %s: lease lost (%s); leaving it to the new holder", sid, exc)
                interrupted = True
            except EvictedError:
                interrupted = True
            except Exception as exc:
                failure = exc
            finally:
                self._fenced.pop(sid, None)
                if end is None:  # not given up by the last step (advance) already
                    with contextlib.suppress(RedisError):
                        await self.lease.release(sid, token)
            if end is LeaseEnd.RELEASED:
                # Released in the call that found nothing to claim: a turn pushed
                # after it finds the lease free and dispatches its own drain.
                return ran
            if end is LeaseEnd.LOST:
                log.warning("session %s: lease lost; leaving it to the new holder", sid)
                interrupted = True
            if failure is not None:
                # The release dropped the session's deadline: put it back (due after
                # a lease TTL) so the reaper retries a session that still has turns.
                with contextlib.suppress(RedisError):
                    if await self.queue.has_work(sid):
                        await self.deadlines.watch(sid, self.settings.lease_ttl_seconds)
                raise failure
            # Release-then-recheck: a turn pushed while we released would
            # otherwise wait for a drain that already returned "busy".
            if not await self.queue.has_work(sid):
                return ran
            if interrupted:
                # Whoever holds the session now keeps its deadline fresh; if
                # nobody does, the reaper finds it due and re-dispatches it.
                await self.deadlines.watch(sid)
                if not self.stopping:
                    return ran
        if await self.queue.has_work(sid):
            await self.deadlines.watch(sid)
            await self.dispatch(sid)  # shutting down: hand the session over
        return ran

    async def _drain_held(
        self, sid: str, token: int, first: ClaimedTurn
    ) -> tuple[int, LeaseEnd | None]:
        """Run the session's turns one by one, from ``first`` (claimed with the lease:
        it runs even if a shutdown began meanwhile, as if it had begun a moment
        later); return how many ran, and how the hold ended (None: stopped for a
        shutdown, the lease still held)."""
        ran = 0
        step: ClaimedTurn | LeaseEnd = first
        while isinstance(step, ClaimedTurn):
            claimed, finished = step, None
            if claimed.already_ran:
                # A turn id runs once: the claim took this copy off pending and left
                # the turn (and its one final) as they are.
                log.error(
                    "session %s: turn %s was pending again after it ran (status %s); "
                    "dropped the copy",
                    sid,
                    claimed.turn_id,
                    claimed.already_ran,
                )
            else:
                finished = await self._run_claimed(sid, claimed, token)
                ran += 1
            if self.stopping:
                if finished is not None:
                    if finished.emitter is not None:
                        await finished.emitter.publish_held()
                    await self.queue.finish(sid, finished.turn_id, finished.status)
                return ran, None
            # Publish its final, finish this turn and claim the next, or give the
            # lease up, in one call.
            step = await self._advance(sid, token, finished)
        return ran, step

    async def _advance(
        self, sid: str, token: int, finished: Finished | None
    ) -> ClaimedTurn | LeaseEnd:
        """The drain's step (``SessionQueue.advance``), with the final ``finished``
        holds in the same call; ``ended`` is called once it is out. LOST when the
        lease moved on (then the final is not out, as a fenced publish would not be)."""
        if finished is None:
            return await self.queue.advance(sid, token)
        done = (finished.turn_id, finished.status)
        emitter = finished.emitter
        events = emitter.held if emitter is not None else None
        if emitter is None or not events:
            return await self.queue.advance(sid, token, done)
        emitter.held = None
        out: list[BaseEvent] = []

        async def publish(guard: ScriptGuard) -> bool:
            published = await publish_all(emitter.bus, events, guard)
            out.extend(published or ())
            return published is not None

        try:
            step = await self.queue.advance(sid, token, done, publish=publish)
        except REDIS_OUTAGE:
            # The server may have run the call and its reply been lost: then the final
            # is out and the turn finished, so no later attempt records its audit rows
            # or runs what follows a final. Look again once Redis answers.
            self._settle_later(sid, finished.turn_id, emitter)
            raise
        if out:
            await emitter.published(out[-1])
        return step

    async def _run_claimed(self, sid: str, claimed: ClaimedTurn, token: int) -> Finished | None:
        """Run a claimed turn; return what the caller finishes it with (in its next
        step, publishing its final if it is held), or None when it was finished here
        or waits for people."""
        try:
            turn = claimed.parse()
        except Exception as exc:
            await self._reject_malformed(sid, claimed, exc)
            return None
        link = await self._link_of(sid, turn)
        bus = self.bus if link is None else ForwardingBus(self.bus, link)
        emitter = FencedEmitter(bus, sid, turn.turn_id, claimed.attempt)
        emitter.token, emitter.status_ttl = token, self.queue.meta_ttl
        runner = self.runners.get(turn.agent)
        delegates = link is not None or (runner is not None and bool(runner.loop.config.subagents))
        # Only a child, or a turn that may have children, has delegations to settle;
        # only a turn submitted with a webhook (or by an older producer) has one.
        emitter.ended = functools.partial(
            self._ended, settle=delegates, webhook=turn.webhook is not False
        )
        emitter.link = link
        try:
            status = await self._run_turn(sid, claimed, turn, emitter, token)
        except (StaleLeaseError, LeaseLostError, EvictedError):
            raise
        except StoreUnavailableError as exc:
            raise await self._give_back_unanswered(sid, turn.turn_id, token, exc) from exc
        except Exception as exc:
            # Any final from here on is published as it is emitted.
            emitter.hold_final, emitter.held = False, None
            # Infrastructure failed around the kernel (the store, the bus). If the
            # lease is gone (a paused process waking up), the turn belongs to its
            # new holder and must get no second final from us.
            if not await self._still_holds(sid, token):
                raise LeaseLostError(f"lost the lease of {sid} ({exc!r})", session_id=sid) from exc
            if isinstance(exc, TurnCommittedError) and await self._already_committed(
                sid, turn.turn_id, emitter
            ):
                # The store had the turn already: it ended with what was committed.
                log.warning("session %s: turn %s was committed already", sid, turn.turn_id)
                return None
            if isinstance(exc, REDIS_OUTAGE):
                # Not the turn's end: it stays in the running slot, and the next holder
                # (the reaper dispatches it) runs it again from its checkpoint.
                log.warning("session %s: turn %s met a Redis outage (%r)", sid, turn.turn_id, exc)
                raise
            # Otherwise end the turn visibly rather than leave it stuck in running. It
            # leaves the slot only once its final is out: if the final cannot go out,
            # the turn stays there for the next holder.
            log.exception("session %s: turn %s failed in the worker", sid, turn.turn_id)
            message = f"the worker failed: {exc!r}"[:500]
            await self._fail(emitter, Failure.WORKER_ERROR, message)
            await self.queue.finish(sid, turn.turn_id, TurnStatus.ERROR)
            return None
        if status is None:
            return None
        return Finished(turn.turn_id, status, emitter if emitter.held else None)

    async def _run_turn(
        self, sid: str, claimed: ClaimedTurn, turn: TurnRequest, emitter: TurnEmitter, token: int
    ) -> TurnStatus | None:
        """Run the turn; return the status its final had, for the caller to finish it
        with, or None when it was finished here (a failure, already committed) or
        parked."""
        if turn.session_id != sid:
            await self._fail(emitter, Failure.INVALID_TURN, "the turn names another session")
            await self.queue.finish(sid, turn.turn_id, TurnStatus.ERROR)
            return None
        if claimed.attempt > 1:
            # Fence, then look. Once the store holds this lease's token, the previous
            # holder's commit has either landed (and is seen below) or will be
            # refused as stale; looked at first, it could land in between and the
            # turn would run and be stored again.
            await self._fence(sid, turn.agent, token)
            await self._backfill_audit(sid, turn.turn_id)
            if await self._already_committed(sid, turn.turn_id, emitter):
                return None
        if claimed.lost >= self.settings.max_attempts:
            text = f"the turn was lost with its worker {claimed.lost} times; giving up"
            await self.store.ensure_session(sid, turn.agent)
            await self._fail(emitter, Failure.MAX_ATTEMPTS, text, commit_fence=token)
            await self.queue.finish(sid, turn.turn_id, TurnStatus.ERROR)
            return None
        runner = self.runners.get(turn.agent)
        if runner is None:
            text = f"this worker does not host {turn.agent!r}"
            await self._fail(emitter, Failure.UNKNOWN_AGENT, text)
            await self.queue.finish(sid, turn.turn_id, TurnStatus.ERROR)
            return None
        # A first attempt's token is recorded by the runner's first store call
        # (``begin_turn``), in the same step as its history read.
        entry = Running(sid)
        if claimed.cancel is not None:  # the claim read the turn's cancel flag
            entry.mode = claimed.cancel
            entry.cancel.set()
        # A turn run before (a lost worker) goes on from its last checkpointed step.
        checkpoint = (
            await self.steps.get_checkpoint(sid, turn.turn_id) if claimed.attempt > 1 else None
        )
        await emitter.emit(
            StartedEvent,
            worker=self.worker_name,
            resumed_from_step=checkpoint.step if checkpoint is not None else None,
            config_version=runner.loop.version,
        )
        decisions = await self._decisions(sid, turn.turn_id, claimed, emitter)
        fields = {"turn_id": turn.turn_id, "attempt": claimed.attempt, "agent": turn.agent}
        # One INFO line a turn, when it ends (its `started` event is in the stream and
        # the audit log): a second line cost as much CPU as a Redis round trip.
        log.debug(
            "turn %s started: session %s attempt %d",
            turn.turn_id,
            sid,
            claimed.attempt,
            extra=fields,
        )
        started = time.monotonic()
        self.running[turn.turn_id] = entry
        self._current[sid] = turn.turn_id
        delegating = None
        config = runner.loop.config
        if config.subagents and isinstance(emitter, FencedEmitter):
            delegator = PoolDelegator(
                self.children,
                self.workers,
                config,
                emitter,
                turn.agent,
                emitter.link,
                expired=claimed.parked == "expired",
            )
            delegating = CURRENT_DELEGATOR.set(delegator)
            emitter.fold = functools.partial(self._fold, sid, turn.turn_id)
        if isinstance(emitter, FencedEmitter):
            # The kernel's final goes out with the drain's next step (one call).
            emitter.hold_final = True
        try:
            work = runner.run_turn(
                session_id=sid,
                message=turn.message,
                parts=turn.parts,
                turn_id=turn.turn_id,
                emitter=emitter,
                fence=token,
                cancel=entry.cancel,
                keep_partial=lambda: entry.mode is CancelMode.INTERRUPT,
                checkpoint=checkpoint,
                decisions=decisions,
                context=turn.context,
                metadata=turn.metadata,
                overrides=turn.overrides,
                tenant=turn.tenant,
                client_tools=turn.client_tools,
            )
            final = await self._run_evictable(sid, turn.turn_id, work, entry)
        except AwaitingChildren as waiting:
            await self._park_children(sid, turn.turn_id, waiting)
            return None
        except AwaitingApproval as waiting:
            await self._park(sid, turn.turn_id, emitter, waiting)
            return None
        finally:
            if delegating is not None:
                CURRENT_DELEGATOR.reset(delegating)
            self.running.pop(turn.turn_id, None)
            self._current.pop(sid, None)
        duration = time.monotonic() - started
        log.info(
            "turn %s finished: %s in %.3fs (session %s, attempt %d)",
            turn.turn_id,
            final.status,
            duration,
            sid,
            claimed.attempt,
            extra={**fields, "status": str(final.status), "duration_s": round(duration, 3)},
        )
        return final.status
