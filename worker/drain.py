"""The drain: run a session's pending turns one at a time under its lease.

The worker's side of docs/architecture.md, "Session protocol", steps 2-8, built
on the operations of ``reactq.shared.protocol``. ``drain`` takes the session
lease with its first turn in one call (or returns: the holder drains), moves the
next turns one by one into the running slot, runs each while renewing the lease,
commits it fenced by the lease's token, and finally releases the lease and looks at
pending once more so that a turn pushed during release is never stranded. A turn
found in the running slot was left by a dead holder and runs again as attempt n+1,
until ``max_attempts`` runs were lost. Every final the drain publishes goes
through ``_FencedEmitter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from redis.exceptions import RedisError

from reactq.shared.audit import backfill
from reactq.shared.bus import E, EventBus, PublishGuard, ScriptGuard, TurnEmitter, publish_all
from reactq.shared.errors import (
    EvictedError,
    LeaseLostError,
    ReactqError,
    StaleLeaseError,
    StoreUnavailableError,
    TurnCommittedError,
)
from reactq.shared.events import (
    ApprovalDecidedEvent,
    ApprovalRequestedEvent,
    BaseEvent,
    FinalEvent,
    StartedEvent,
)
from reactq.shared.logs import log_context
from reactq.shared.protocol import endings
from reactq.shared.protocol.approvals import Approvals, Decision, WaitingCall
from reactq.shared.protocol.children import DELEGATION_METADATA, ChildLink, Children
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
from reactq.shared.turns import TURN_ID_RE, TurnRequest, TurnStatus, validate_session_id
from reactq.shared.webhooks import Send, Webhooks
from reactq.worker.agent.cancel import CancelEvent
from reactq.worker.agent.delegation import CURRENT as CURRENT_DELEGATOR
from reactq.worker.agent.delegation import tasks_of
from reactq.worker.agent.runner import AgentRunner
from reactq.worker.agent.suspend import AwaitingApproval, AwaitingChildren
from reactq.worker.child_turns import ForwardingBus, PoolDelegator, fold_children

log = logging.getLogger("reactq.worker")

Dispatch = Callable[[str, str], Awaitable[None]]
T = TypeVar("T")


@dataclass(eq=False)
class _Running:
    """A turn in flight in this process, reachable by the control listener."""

    session_id: str
    cancel: CancelEvent = field(default_factory=CancelEvent)
    mode: CancelMode | None = None
    task: asyncio.Future[FinalEvent] | None = None
    evicted: bool = False


class _FencedEmitter(TurnEmitter):
    """Publishes a turn's final only while this worker still holds the session's
    lease (``token``), recording the turn's status in the same call, so a process
    that wakes up after a pause cannot end a turn that its new holder owns, and a
    reader who saw the final never reads an older status.

    With ``hold_final`` (set around the kernel's run) the final is kept, with the
    events queued before it, instead (``held``): the drain publishes it in the call
    that finishes the turn and takes its next step (``Drainer._advance``), the same
    way fenced, and only then calls ``ended``."""

    token: int = 0
    status_ttl: int = 0
    ended: Callable[[FinalEvent], Awaitable[None]] | None = None
    """Called with the final once it is published (the turn's webhook)."""
    fold: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None
    """Adds the turn's children's usage to its final (an agent with subagents)."""
    link: ChildLink | None = None
    """The turn's parent, when it is a child turn."""
    hold_final: bool = False
    """Keep the final (``held``) rather than publish it."""
    held: list[BaseEvent] | None = None
    """The kept final, last, after the events queued for it; it has no stream ``id``
    until the drain publishes it (nothing reads it before)."""

    async def emit(self, event_cls: type[E], **fields: Any) -> E:
        if event_cls is not FinalEvent:
            return await super().emit(event_cls, **fields)
        if self.fold is not None:  # before the final is built, held or not
            fields = await self.fold(fields)
        event = self._build(event_cls, fields)
        if self.hold_final:
            self.held, self._later = [*self._later, event], []
            return event
        guard = PublishGuard(self.token, self.turn_id, str(fields["status"]), self.status_ttl)
        return await self.published(await self._send(event, guard))

    async def published(self, event: E) -> E:
        """The final is out: call ``ended`` with it (its webhook, its delegations)."""
        if self.ended is not None and isinstance(event, FinalEvent):
            await self.ended(event)
        return event

    async def publish_held(self) -> None:
        """Publish the held final now, alone (a shutdown finishes the turn apart):
        LeaseLostError, with nothing published, when the lease moved on."""
        held, self.held, self.hold_final = self.held or [], None, False
        if held:
            final = held[-1]
            self._later = [*held[:-1], *self._later]
            status = str(getattr(final, "status", ""))
            guard = PublishGuard(self.token, self.turn_id, status, self.status_ttl)
            await self.published(await self._send(final, guard))


@dataclass(frozen=True)
class _Finished:
    """A turn that ran to its end: the status to finish it with, and the emitter
    holding its final for the drain's next step (None: the final is out already)."""

    turn_id: str
    status: TurnStatus
    emitter: _FencedEmitter | None = None


class Drainer:
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
        self.running: dict[str, _Running] = {}
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
        self, sid: str, token: int, finished: _Finished | None
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

    def _settle_later(self, sid: str, turn_id: str, emitter: _FencedEmitter) -> None:
        task = asyncio.get_running_loop().create_task(
            self._settle(sid, turn_id, emitter), context=contextvars.Context()
        )
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settle(self, sid: str, turn_id: str, emitter: _FencedEmitter) -> None:
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

    async def _run_claimed(self, sid: str, claimed: ClaimedTurn, token: int) -> _Finished | None:
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
        emitter = _FencedEmitter(bus, sid, turn.turn_id, claimed.attempt)
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
        return _Finished(turn.turn_id, status, emitter if emitter.held else None)

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
        entry = _Running(sid)
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
        # The pool can wait for people: decisions on the calls a parked turn waited for.
        decisions: dict[str, Decision] = {}
        if claimed.parked:
            decisions = await self.approvals.decisions(sid, turn.turn_id)
            for call_id in claimed.expired_calls:
                expired = decisions.get(call_id)
                if expired is not None:
                    await emitter.emit(
                        ApprovalDecidedEvent,
                        call_id=call_id,
                        approved=False,
                        reason=expired.reason,
                        by=expired.by,
                    )
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
        if config.subagents and isinstance(emitter, _FencedEmitter):
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
        if isinstance(emitter, _FencedEmitter):
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

    async def _park(
        self, sid: str, turn_id: str, emitter: TurnEmitter, waiting: AwaitingApproval
    ) -> None:
        """The turn waits for people: park it (its step is checkpointed), announce the
        waiting calls, and let the drain go on: it finds the session held and releases
        the lease, so no worker holds anything while a person thinks."""
        calls = [WaitingCall(c.id, c.name, _arguments(c.arguments)) for c in waiting.calls]
        expires = await self.approvals.park(
            sid, turn_id, calls, self.settings.approval_timeout_seconds
        )
        if expires is None:  # the slot holds another turn: the lease was lost meanwhile
            raise LeaseLostError(f"turn {turn_id} left the running slot", session_id=sid)
        await emitter.emit(
            ApprovalRequestedEvent, calls=[c.as_dict() for c in calls], expires_at=expires
        )
        log.info(
            "turn %s awaits approval of %s (session %s)",
            turn_id,
            ", ".join(f"{c.tool}/{c.call_id}" for c in calls),
            sid,
            extra={"turn_id": turn_id, "status": str(TurnStatus.AWAITING_APPROVAL)},
        )

    async def _park_children(self, sid: str, turn_id: str, waiting: AwaitingChildren) -> None:
        """The turn waits for its child turns: park it like a turn waiting for people
        (no lease, no slot); the last child's end makes it ready again."""
        calls = [
            {"call_id": c.id, "tool": c.name, "keys": [f"{c.id}#{i}" for i in range(n)]}
            for c in waiting.calls
            for n in [len(tasks_of(c) or ())]
        ]
        state = await self.children.park(
            sid, turn_id, calls, self.settings.delegation_timeout_seconds
        )
        if state is None:
            raise LeaseLostError(f"turn {turn_id} left the running slot", session_id=sid)
        log.info(
            "turn %s awaits its child turns (%s; session %s)",
            turn_id,
            state,
            sid,
            extra={"turn_id": turn_id, "status": str(TurnStatus.AWAITING_CHILDREN)},
        )

    async def _fold(self, sid: str, turn_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        """The final's fields with the turn's children's usage folded in."""
        try:
            _, results = await self.children.state(sid, turn_id)
        except RedisError:
            return fields
        return fold_children(fields, list(results.values()))

    async def _link_of(self, sid: str, turn: TurnRequest) -> ChildLink | None:
        """The turn's parent, if it is a child turn (its metadata says so; Redis says
        which parent, so a producer's metadata cannot make a turn forward elsewhere)."""
        if DELEGATION_METADATA not in turn.metadata:
            return None
        link = await self.children.link_of(turn.turn_id)
        if link is None or link.session_id != sid:
            return None
        return link

    async def _fence(self, sid: str, agent: str, token: int) -> None:
        """Record this lease's token in the store (``claim``), once per lease: the
        token is the same for every turn this drain runs. The fence is kept on the
        session row, so the row must exist first."""
        if self._fenced.get(sid) != token:
            await self.store.ensure_session(sid, agent)
            await self.store.claim(sid, token)
            self._fenced[sid] = token

    async def _holding_lease(self, sid: str, token: int, work: Awaitable[T]) -> T:
        """Run ``work`` (everything done under the lease, store waits included)
        while renewing the lease; stop it if the lease is lost.

        The lease stays alive while this process is alive, even when a call it
        waits on (a database lock held by a paused peer, say) takes longer than
        the lease TTL, so no second holder starts the same turn meanwhile.
        """
        task = asyncio.ensure_future(work)
        ttl = self.settings.lease_ttl_seconds
        renewed = time.monotonic()
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=ttl / 3)
                if done:
                    return task.result()
                try:
                    if not await self.lease.renew(sid, token):
                        if task.done():  # the work gave the lease up itself meanwhile
                            return task.result()
                        raise LeaseLostError(
                            f"another worker holds the lease of {sid}", session_id=sid
                        )
                    renewed = time.monotonic()
                    await self._poll_cancel_flags(sid)
                except RedisError as exc:
                    # Keep trying while the lease may still be ours; past its TTL
                    # another worker may hold it, so nothing more may commit.
                    if time.monotonic() - renewed >= ttl:
                        raise LeaseLostError(
                            f"could not renew the lease of {sid}: {exc}", session_id=sid
                        ) from exc
                    log.warning("session %s: lease renewal failed (%s); retrying", sid, exc)
        finally:
            await _stop(task)

    async def _poll_cancel_flags(self, sid: str) -> None:
        """The fallback for a missed control notice: read the flag of our turn."""
        turn_id = self._current.get(sid)
        entry = self.running.get(turn_id) if turn_id is not None else None
        if entry is not None and not entry.cancel.is_set():
            mode = await self.queue.cancel_mode(sid, turn_id or "")
            if mode is not None:
                entry.mode = mode
                entry.cancel.set()

    async def _run_evictable(
        self, sid: str, turn_id: str, work: Awaitable[FinalEvent], entry: _Running
    ) -> FinalEvent:
        """Run the kernel as its own task, so a shutdown can stop it and give it back."""
        task = entry.task = asyncio.ensure_future(work)
        try:
            await asyncio.wait({task})
        finally:
            await _stop(task)
        if task.cancelled():
            if entry.evicted:
                with contextlib.suppress(RedisError):
                    await self.queue.give_back(sid, turn_id)
                raise EvictedError(f"turn {turn_id} given back on shutdown", turn_id=turn_id)
            raise asyncio.CancelledError
        return task.result()

    async def _reseed(self, sid: str, token: int, exc: Exception) -> bool:
        """The store refused this lease's token for a newer fence (``newest``) while no
        other holder exists: Redis lost its data and its counter started again.
        Re-seed it above the store's fence (``SessionLease.reseed``) so the session
        recovers on its next take, instead of losing turns until the counter catches
        up. False when the refusal was a real newer holder's."""
        newest = exc.details.get("newest") if isinstance(exc, StaleLeaseError) else None
        if not isinstance(newest, int) or newest <= token:
            return False
        try:
            if not await self.lease.reseed(sid, token, newest):
                return False
        except RedisError:
            return False
        log.warning(
            "session %s: the lease counter (token %d) was behind the state store's fence "
            "%d (Redis lost its data?); re-seeded it above the fence",
            sid,
            token,
            newest,
        )
        return True

    async def _give_back_unanswered(
        self, sid: str, turn_id: str, token: int, exc: StoreUnavailableError
    ) -> ReactqError:
        """The state database stayed away past the outage budget: give the turn back,
        uncharged (a database that is slow to return is no fault of the turn's, and a
        charge would end it with max_attempts), for the reaper to re-dispatch (the
        drain sets the session's deadline as it lets go). What to raise: the drain
        reads it as a give-back (or, the lease gone meanwhile, as a lost lease: the
        turn is its new holder's)."""
        if not await self._still_holds(sid, token):
            return LeaseLostError(f"lost the lease of {sid} ({exc.message})", session_id=sid)
        log.warning("session %s: turn %s given back: %s", sid, turn_id, exc.message)
        with contextlib.suppress(RedisError):
            await self.queue.give_back(sid, turn_id)
        return EvictedError(f"turn {turn_id} given back: {exc.message}", turn_id=turn_id)

    async def _still_holds(self, sid: str, token: int) -> bool:
        try:
            return await self.lease.holds(sid, token)
        except RedisError:
            return False

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


async def _stop(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` until it ends; its outcome is retrieved (once the lease is lost
    its error is nobody's). Cancelled again: on Python 3.11 a cancel that lands as
    redis-py sends a command is swallowed (asyncio.wait_for), and a turn whose lease
    was lost ran on, to fail later as "never retrieved"."""
    task.add_done_callback(_retrieve)
    stopped = False  # this task was cancelled too: it ends once ``task`` has
    while not task.done():
        task.cancel()
        try:
            await asyncio.wait({task}, timeout=0.1)
        except asyncio.CancelledError:
            stopped = True
    if stopped:
        raise asyncio.CancelledError


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _arguments(raw: str) -> Any:
    """A call's arguments as JSON data, or the raw text when they are not JSON."""
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError:
        return raw


def _guess_turn_id(payload: str) -> str:
    """The payload's turn id if it is a valid one (an event may carry it), else ''."""
    with contextlib.suppress(Exception):
        value = json.loads(payload).get("turn_id")
        if isinstance(value, str) and TURN_ID_RE.fullmatch(value):
            return value
    return ""
