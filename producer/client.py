"""Producer: submit turns, follow their events, read a session's history.

The producer reaches workers only through the broker and Redis: it never
imports ``worker``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ValidationError
from redis.asyncio import Redis

from reactq.producer import schedules, sessions
from reactq.producer.documents import LongTermStore
from reactq.producer.sessions import SessionDeleted, SessionDetail
from reactq.producer.turn_lookup import TurnInfo, find_turn
from reactq.shared.audit import AuditedBus, AuditSink, DeferredAuditSink, audit_sink_for
from reactq.shared.audit_spill import AuditSpill
from reactq.shared.bus_redis import RedisEventBus
from reactq.shared.catalogue import AgentInfo, AgentTools
from reactq.shared.content import ContentPart, ImagePart
from reactq.shared.errors import (
    AgentMismatchError,
    ApprovalNotFoundError,
    ConfigError,
    InvalidMessageError,
    InvalidOutputError,
    InvalidTurnError,
    TurnRejectedError,
    UnknownAgentError,
)
from reactq.shared.events import (
    ApprovalDecidedEvent,
    Event,
    FileChangeEvent,
    FinalEvent,
    QueuedEvent,
)
from reactq.shared.file_undo import (
    UndoError,
    UndoReport,
    describe_changes,
    discard_turn_files,
    revert_turn,
)
from reactq.shared.keys import Keys
from reactq.shared.messages import MAX_SEQUENCE, ChatMessage
from reactq.shared.netcheck import AllowList
from reactq.shared.protocol import endings
from reactq.shared.protocol.approvals import Approvals, DecideOutcome, PendingApproval
from reactq.shared.protocol.children import Children
from reactq.shared.protocol.control import CancelMode, notify_cancel
from reactq.shared.protocol.dispatch import BROKER_ERRORS, Dispatcher
from reactq.shared.protocol.outcomes import CancelOutcome, CancelResult, SubmitStatus
from reactq.shared.protocol.queue import SessionQueue
from reactq.shared.protocol.workers import WorkerRegistry
from reactq.shared.redis_client import connect
from reactq.shared.schedules import Schedule
from reactq.shared.settings import Settings
from reactq.shared.state import BranchInfo, SessionPage, SessionUsage, StateStore, open_store
from reactq.shared.state.todo_store import TodoItem
from reactq.shared.tenancy import TenantIdentity
from reactq.shared.turn_inputs import check_context, check_metadata, check_overrides, check_text
from reactq.shared.turns import (
    MultitaskStrategy,
    TurnRequest,
    TurnStatus,
    check_message,
    validate_session_id,
)
from reactq.shared.webhooks import Webhooks, check_url
from reactq.shared.workspace import FileChange

log = logging.getLogger("reactq.producer")

# A turn in these states may still change files: undo waits for its end.
_UNFINISHED = frozenset(
    {
        TurnStatus.QUEUED,
        TurnStatus.RUNNING,
        TurnStatus.AWAITING_APPROVAL,
        TurnStatus.AWAITING_CHILDREN,
    }
)

__all__ = [
    "CancelResult",
    "DecideOutcome",
    "PendingApproval",
    "Producer",
    "SessionDeleted",
    "SessionDetail",
    "SessionUsage",
    "TurnHandle",
    "TurnInfo",
]


def _decisions(
    decisions: Mapping[str, bool | str], notes: Mapping[str, str] | None = None
) -> dict[str, tuple[bool, str | None]]:
    """``{call_id: True | False | "reason"}`` as ``{call_id: (approved, reason)}`` (an
    approval's reason is its note, if any)."""
    if not isinstance(decisions, Mapping) or not decisions:
        raise ApprovalNotFoundError("give at least one decision: {call_id: True | False | reason}")
    out: dict[str, tuple[bool, str | None]] = {}
    for call_id, value in decisions.items():
        if not isinstance(call_id, str) or not call_id:
            raise ApprovalNotFoundError(f"a call id must be a non-empty string, got {call_id!r}")
        if isinstance(value, bool):
            out[call_id] = (value, (notes or {}).get(call_id) if value else None)
        elif isinstance(value, str):
            out[call_id] = (False, value)  # a reason is a denial
        else:
            raise ApprovalNotFoundError(
                f"the decision on {call_id!r} must be True, False or a reason, got {value!r:.60}",
                call_id=call_id,
            )
    return out


def _check_text(message: str) -> None:
    """Refuse a message UTF-8 cannot carry: the turn's payload could not be written."""
    try:
        message.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(
            f"the message holds a lone surrogate at character {exc.start}: send valid Unicode text"
        ) from None


M = TypeVar("M", bound=BaseModel)


REPLAY_BEFORE_QUEUED_MS = 5000
"""How far before its ``queued`` event a handle reads the stream for its turn's events."""


def _before(stream_id: str | None) -> str:
    """A stream id ``REPLAY_BEFORE_QUEUED_MS`` before ``stream_id`` ("0" without one)."""
    if not stream_id:
        return "0"
    ms = int(stream_id.partition("-")[0])
    return f"{max(ms - REPLAY_BEFORE_QUEUED_MS, 0)}-0"


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


class Producer:
    """Puts turns on the pool's queues and reads their events and history."""

    def __init__(self, settings: Settings | None = None, *, redis: Redis | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.keys = Keys.for_settings(self.settings)
        self._owns_redis = redis is None
        # Each live subscriber blocks on a connection: wait for one rather than fail.
        self.redis = redis or connect(self.settings.redis_url, 512, blocking=True)
        # What the audit log cannot take while the database is away waits in Redis
        # for a worker to write it (``shared/audit_spill.py``).
        self._spill = AuditSpill(self.redis, self.keys, self.settings.audit_spill_max_rows)
        self.bus = RedisEventBus(
            self.redis,
            self.keys,
            maxlen=self.settings.event_maxlen,
            ttl_seconds=self.settings.event_ttl_seconds,
        )
        self.publisher = AuditedBus(
            self.bus, DeferredAuditSink(self._recording_sink, self._spill), close_sink=False
        )
        """What the producer publishes (``queued``, the finals of turns that never ran,
        decisions) goes to the stream and, like the workers' events, to the audit log."""
        self.queue = SessionQueue(
            self.redis,
            self.keys,
            self.settings.session_meta_ttl_seconds,
            dispatch_grace_seconds=self.settings.lease_ttl_seconds,
        )
        self.approvals = Approvals(self.redis, self.keys, self.settings.session_meta_ttl_seconds)
        self.registry = WorkerRegistry(self.redis, self.keys)
        self.dispatcher = Dispatcher(self.settings)
        self.webhooks = Webhooks(self.redis, self.keys, self.settings)
        self.children = Children(
            self.redis,
            self.keys,
            self.queue,
            self.publisher,
            self._dispatch_if_work,
            meta_ttl_seconds=self.settings.session_meta_ttl_seconds,
            dispatch_grace_seconds=self.settings.lease_ttl_seconds,
        )
        self._store: StateStore | None = None
        self.store = LongTermStore(self.state_store)
        """The long-term store (``put``, ``get``, ``delete``, ``search`` of namespaced JSON
        documents); ``await producer.state_store()`` is the state store itself."""
        self._store_lock = asyncio.Lock()
        self._audit: AuditSink | None = None

    @classmethod
    def from_env(cls, **overrides: Any) -> Producer:
        """A producer configured from ``REACTQ_*`` variables (keyword overrides win)."""
        return cls(Settings.from_env(**overrides))

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Release connections."""
        if self._audit is not None:
            await self._audit.close()  # the store it shares stays open until here
        if self._store is not None:
            await self._store.close()
        if self._owns_redis:
            await self.redis.aclose()
        await self.dispatcher.close()

    async def submit(
        self,
        session_id: str,
        message: str | Sequence[str | ContentPart | Mapping[str, Any]],
        *,
        agent: str,
        strategy: MultitaskStrategy | str = MultitaskStrategy.ENQUEUE,
        metadata: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        overrides: dict[str, Any] | None = None,
        webhook: str | None = None,
        tenant: TenantIdentity | None = None,
    ) -> TurnHandle:
        """Validate and enqueue a turn; returns its handle.

        ``message`` is text, or a list of content parts: strings, ``TextPart``,
        ``ImagePart`` (``from_url``, ``from_bytes``, ``from_path``) or dicts in the
        OpenAI shape; inline images are at most REACTQ_MAX_IMAGE_BYTES each and the
        whole at most REACTQ_MAX_CONTENT_BYTES. The parts are stored with the
        conversation and replayed to the model in later turns.
        ``metadata`` is kept on the turn's record, in its status and in the audit log;
        ``context`` (a JSON object up to REACTQ_MAX_CONTEXT_BYTES) reaches the tools
        (``ToolContext.context``), hooks, policies and a system prompt that is a
        function of the turn, and is never published; ``overrides`` change the loop
        knobs the agent allows (``Agent(overridable=...)``) for this turn only.
        ``webhook`` (else the agent's ``Agent(webhook=...)``) is POSTed, signed with
        REACTQ_WEBHOOK_SECRET, once the turn ends, however it ends (README, "Webhooks").
        ``tenant`` is who the turn acts for (``TenantIdentity``): its tools see it
        (``ToolContext.tenant``) and the store tools keep to its namespaces. The gateway
        passes its caller's key; this side is trusted, so nothing checks it against the
        session id. With the Celery broker unreachable the turn is still queued (a
        warning is logged): a worker's reaper dispatches it once the broker is back.

        Raises an InvalidTurnError subclass (nothing enqueued) for an invalid
        session id, an empty, oversized or unencodable message (or image, or a part that
        is neither text nor a usable image), metadata or context that
        does not travel as JSON (or a context over the limit), an override the agent
        does not allow or a value its knob cannot take, an unknown agent or a session
        that belongs to another agent; TurnRejectedError when ``strategy="reject"``
        finds the session busy; WebhookRefusedError for a webhook that is not http(s) or
        reaches an address that is not public (REACTQ_WEBHOOK_ALLOW_HOSTS), and
        ConfigError for a webhook without REACTQ_WEBHOOK_SECRET.
        """
        validate_session_id(session_id)
        limits = self.settings
        message, parts = check_message(
            message, limits.max_message_bytes, limits.max_image_bytes, limits.max_content_bytes
        )
        _check_text(message)
        metadata = check_metadata(metadata)
        context = check_context(context, self.settings.max_context_bytes)
        if tenant is not None and not isinstance(tenant, TenantIdentity):
            raise InvalidTurnError(
                f"tenant must be a TenantIdentity (or None), not {type(tenant).__name__}"
            )
        if not isinstance(agent, str):
            # Before Redis is asked about it (redis-py refuses None with a DataError).
            raise UnknownAgentError(
                f"agent must be an agent's name (a string), not {agent!r:.60}", agent=repr(agent)
            )
        try:
            strategy = MultitaskStrategy(strategy)
        except ValueError:
            choices = ", ".join(m.value for m in MultitaskStrategy)
            raise InvalidTurnError(
                f"unknown strategy {strategy!r}: use one of {choices}", strategy=str(strategy)
            ) from None
        profile = await self.registry.agent_profile(agent)
        if profile is None:
            raise UnknownAgentError(
                f"no worker hosts agent {agent!r}: start one with "
                f"`reactq worker --agents MODULE:ATTR` (namespace {self.settings.namespace!r})",
                agent=agent,
            )
        overrides = check_overrides(overrides, profile.overridable, agent)
        hook = webhook if webhook is not None else profile.webhook
        if hook is not None:
            await self._check_webhook(hook)
        turn = TurnRequest(
            session_id=session_id,
            agent=agent,
            message=message,
            parts=parts,
            strategy=strategy,
            metadata=metadata,
            context=context,
            overrides=overrides,
            webhook=hook is not None,
            tenant=tenant,
        )
        if hook is not None:
            # Before the push: whoever ends the turn, however soon, finds it.
            await self.webhooks.register(session_id, turn.turn_id, hook, agent)
        outcome = await self.queue.submit(turn)
        if outcome.status is SubmitStatus.AGENT_MISMATCH:
            raise AgentMismatchError(
                f"session {session_id!r} belongs to agent {outcome.session_agent!r}, not {agent!r}",
                session_id=session_id,
                agent=outcome.session_agent,
            )
        if outcome.status is SubmitStatus.REJECTED:
            await self._ended(await endings.rejected(self.publisher, turn))
            raise TurnRejectedError(
                f"session {session_id!r} is busy and the strategy is 'reject'",
                turn_id=turn.turn_id,
            )
        # The turn is claimable from the push on: its `queued` goes to the stream first,
        # before the cancel notice and the dropped turns' endings (each an audit write),
        # so a worker that takes it at once still publishes its `started` after it.
        queued = await self.publisher.publish(
            QueuedEvent(
                session_id=session_id,
                turn_id=turn.turn_id,
                agent=agent,
                message=message,
                images=[p.label() for p in parts or () if isinstance(p, ImagePart)],
                metadata=metadata,
                overrides=overrides,
            )
        )
        if outcome.stopped_running is not None:
            mode = CancelMode(strategy.value)  # interrupt or rollback
            await notify_cancel(self.redis, self.keys, outcome.stopped_running, mode)
        for dropped in outcome.dropped_pending:
            why = f"superseded by {turn.turn_id}"
            await self._ended(await endings.cancelled(self.publisher, session_id, dropped, why))
        if outcome.needs_dispatch:
            await self._dispatch(session_id, agent)
        return TurnHandle(self, turn, queued)

    async def cancel(self, turn_id: str) -> CancelResult:
        """Cancel a turn: a queued one, or one waiting for approval, at once (its steps
        are dropped and the turns behind it go on); a running one at its next step.

        Cancelling a finished or unknown turn is a no-op that says so; it never
        raises for those.
        """
        session_id = await self.queue.session_of(turn_id)
        if session_id is None:
            return CancelResult(turn_id, CancelOutcome.UNKNOWN)
        parked = any(p.turn_id == turn_id for p in await self.approvals.waiting(session_id))
        for_children = not parked and await self.children.waiting(session_id, turn_id)
        result = await self.queue.cancel(session_id, turn_id)
        if result.outcome is CancelOutcome.CANCELLED and (parked or for_children):
            # It waited for decisions (or its child turns, which its ending cancels): the
            # cancel dropped its steps; the turns behind it go on.
            what = "its child turns" if for_children else "approval"
            why = f"cancelled while it waited for {what}"
            # Nothing of it is kept: its file changes too (no worker holds it to do this).
            reverted = await discard_turn_files(
                await self.state_store(), self.settings.workspace_root, turn_id
            )
            await self._publish_reverts(session_id, turn_id, reverted)
            await self._ended(await endings.cancelled(self.publisher, session_id, turn_id, why))
            await self._dispatch_if_work(session_id)
        elif result.outcome is CancelOutcome.CANCELLED:
            why = "cancelled before it started"
            await self._ended(await endings.cancelled(self.publisher, session_id, turn_id, why))
        elif result.outcome is CancelOutcome.CANCELLING:
            await notify_cancel(self.redis, self.keys, turn_id, CancelMode.CANCEL)
        return result

    async def _check_webhook(self, url: str) -> None:
        """Refuse a webhook now, before anything is enqueued (the worker checks it again
        when it delivers: DNS may change)."""
        if self.settings.webhook_secret is None:
            raise ConfigError(
                "a turn with a webhook needs REACTQ_WEBHOOK_SECRET (its POSTs are signed with "
                "it): set it on the producer and the workers"
            )
        await check_url(url, AllowList(self.settings.webhook_allow_hosts))

    async def _ended(self, final: FinalEvent) -> None:
        """A turn ended here (it never ran, or waited parked): settle its delegations,
        enqueue its webhook, if it has one."""
        await self.children.ended(final)
        try:
            await self.webhooks.ended(final, self.dispatcher.webhook)
        except Exception:
            # The turn has ended, whatever: its caller learns of a lost delivery from
            # the turn's status (no attempts), and the log says why.
            log.exception("turn %s: could not enqueue its webhook", final.turn_id)

    async def approve(
        self, turn_id: str, call_id: str, note: str | None = None, *, by: str | None = None
    ) -> DecideOutcome:
        """Approve a waiting tool call: it runs when the turn resumes. See ``decide``."""
        return await self._decide(turn_id, {call_id: (True, note)}, by)

    async def deny(
        self, turn_id: str, call_id: str, reason: str | None = None, *, by: str | None = None
    ) -> DecideOutcome:
        """Deny a waiting tool call: the model reads a tool error carrying ``reason``."""
        return await self._decide(turn_id, {call_id: (False, reason)}, by)

    async def decide(
        self,
        turn_id: str,
        decisions: Mapping[str, bool | str],
        *,
        notes: Mapping[str, str] | None = None,
        by: str | None = None,
    ) -> DecideOutcome:
        """Decide several waiting calls at once, all or none: ``{call_id: True}``
        approves, ``False`` denies, a string denies with that reason; ``notes`` adds a
        note to an approval.

        Each decision is published as an ``approval_decided`` event naming ``by``
        (``producer`` by default). When every waiting call of the turn has one, the
        turn resumes on a free worker. Raises ApprovalNotFoundError (unknown turn or
        call), ApprovalClosedError (the turn waits for nothing: finished, running,
        queued) or DecisionConflictError (a call was decided already; of two racing
        deciders exactly one wins), InvalidTextError (a reason, note or ``by`` UTF-8
        cannot carry).
        """
        check_text({"decisions": decisions, "notes": notes, "by": by}, "")
        return await self._decide(turn_id, _decisions(decisions, notes), by)

    async def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        """The tool calls waiting for a decision, of one session or of every session."""
        if session_id is not None:
            validate_session_id(session_id)
        return await self.approvals.pending(session_id)

    async def agents(self) -> list[AgentInfo]:
        """The agents workers announced, by name (``live``: a worker hosting it beat
        within ``REACTQ_HEARTBEAT_SECONDS``); one for each definition (config version)
        live workers host, so a name live with two definitions is listed twice."""
        return await self.registry.agents(live_within=self.settings.heartbeat_seconds)

    async def agent_tools(self, agent: str) -> AgentTools:
        """The tools ``agent``'s model sees, with their category, source and JSON schema,
        as its workers published them. UnknownAgentError when none did."""
        catalogue = await self.registry.catalogue(agent)
        if catalogue is None:
            raise UnknownAgentError(
                f"no worker hosts an agent named {agent!r} (or none published its tools); "
                f"start one: reactq worker --agents module:attr",
                agent=agent,
            )
        return catalogue

    async def _decide(
        self, turn_id: str, decisions: dict[str, tuple[bool, str | None]], by: str | None
    ) -> DecideOutcome:
        session_id = await self.queue.session_of(turn_id)
        if session_id is None:
            raise ApprovalNotFoundError(f"turn {turn_id} is unknown", turn_id=turn_id)
        decider = by or "producer"
        outcome = await self.approvals.decide(session_id, turn_id, decisions, decider)
        for decision in outcome.decided:
            await self.publisher.publish(
                ApprovalDecidedEvent(
                    session_id=session_id,
                    turn_id=turn_id,
                    attempt=0,
                    call_id=decision.call_id,
                    approved=decision.approved,
                    reason=decision.reason,
                    by=decision.by,
                )
            )
        if outcome.ready:
            await self._dispatch_if_work(session_id)
        return outcome

    async def _dispatch_if_work(self, session_id: str) -> None:
        agent = await self.queue.session_agent(session_id)
        if agent is not None and await self.queue.has_work(session_id):
            await self._dispatch(session_id, agent)

    async def _dispatch(self, session_id: str, agent: str) -> None:
        """Send the session's drain; with the broker unreachable, only warn."""
        try:
            await self.dispatcher.drain(session_id, agent)
        except BROKER_ERRORS as exc:
            # The turns are safe in Redis and the session has a dispatch deadline (the
            # lease TTL): a worker's reaper dispatches it once the broker answers.
            # Raising would tell the caller the turn failed while it will still run.
            log.warning(
                "session %s: its turn is queued, but the Celery broker is unreachable (%s); "
                "a worker's reaper dispatches it once the broker is back",
                session_id,
                exc,
            )

    def subscribe(self, session_id: str, after: str | None = None) -> AsyncIterator[Event]:
        """A session's events: ``after=None`` live only, ``"0"`` from the start, or an id."""
        validate_session_id(session_id)
        return self.bus.subscribe(session_id, after=after)

    async def state_store(self) -> StateStore:
        """The shared state store (opened on first use): conversations, turns, sessions.
        ``producer.store`` is the long-term store of documents, not this."""
        async with self._store_lock:
            if self._store is None:
                self._store = await open_store(
                    self.settings.database_url, namespace=self.settings.namespace
                )
        return self._store

    async def history(self, session_id: str, branch: str | None = None) -> list[ChatMessage]:
        """Every message of the session's conversation (its active branch, or
        ``branch``), oldest first; each carries its 1-based ``sequence``."""
        validate_session_id(session_id)
        return await (await self.state_store()).get_messages(session_id, branch)

    async def fork(
        self,
        session_id: str,
        from_sequence: int,
        *,
        branch: str | None = None,
        new_branch: str | None = None,
        activate: bool = True,
    ) -> str:
        """Start a branch keeping messages 1..``from_sequence`` of ``branch`` (the active
        one by default); it becomes the active branch, so the next turn submitted runs
        on it ("edit a turn" is fork, then submit). Returns the new branch's id."""
        validate_session_id(session_id)
        return await (await self.state_store()).fork(
            session_id,
            from_sequence,
            branch_id=branch,
            new_branch_id=new_branch,
            activate=activate,
        )

    async def branches(self, session_id: str) -> list[BranchInfo]:
        """The session's branches, oldest first (which one is active, their lengths)."""
        validate_session_id(session_id)
        return await (await self.state_store()).list_branches(session_id)

    async def switch_branch(self, session_id: str, branch_id: str) -> None:
        """Make ``branch_id`` the session's active branch (for the turns that start next)."""
        validate_session_id(session_id)
        await (await self.state_store()).switch_branch(session_id, branch_id)

    async def truncate(
        self, session_id: str, after_sequence: int, *, branch: str | None = None
    ) -> None:
        """Hard-delete the messages after ``after_sequence`` of ``branch`` (the active one
        by default). Inherited messages stay, and a branch forked inside the cut keeps its
        history; a no-op on an unknown session or branch (see ``StateStore.truncate_after``)."""
        validate_session_id(session_id)
        # No message sits past MAX_SEQUENCE: a cut there is one at the end, which a SQL
        # column could not even compare with.
        after_sequence = min(after_sequence, MAX_SEQUENCE)
        await (await self.state_store()).truncate_after(session_id, after_sequence, branch)

    async def list_sessions(
        self,
        *,
        agent: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        updated_since: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """Stored sessions, newest first, a page at a time: those of ``agent``, whose
        metadata holds every key of ``metadata`` with that value, written since
        ``updated_since`` (Unix time). Pass a page's ``next_cursor`` as ``cursor``."""
        return await (await self.state_store()).list_sessions(
            agent=agent,
            metadata=metadata,
            updated_since=updated_since,
            limit=limit,
            cursor=cursor,
        )

    async def get_session(self, session_id: str) -> SessionDetail | None:
        """A session's agent, active branch, message count, turns, last turn, token
        usage and metadata; None when the state store does not have it."""
        return await sessions.session_detail(self, session_id)

    async def update_session_metadata(
        self, session_id: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Merge ``patch`` into the session's metadata (a key set to None is removed);
        returns the result. SessionNotFoundError for a session the store lacks;
        InvalidMetadataError for a patch that is not a JSON object UTF-8 can carry
        (nothing is stored)."""
        validate_session_id(session_id)
        check_metadata(patch)
        return await (await self.state_store()).update_metadata(session_id, patch)

    async def usage(self, session_id: str) -> SessionUsage:
        """The session's token and cost totals over its committed turns, as the state
        store keeps them (what ``session_max_tokens`` / ``session_max_cost`` check);
        zeros for a session the store does not have."""
        validate_session_id(session_id)
        return await (await self.state_store()).session_usage(session_id)

    async def todos(self, session_id: str) -> list[TodoItem]:
        """The session's todo list (``reactq.bundles.todos``), in order, as the agent
        last wrote it; [] when it has none."""
        validate_session_id(session_id)
        return await (await self.state_store()).get_todos(session_id)

    async def session_turns(self, session_id: str) -> list[TurnInfo]:
        """The session's turns, oldest first: status, attempt, final, usage and times."""
        return await sessions.session_turns(self, session_id)

    async def delete_session(
        self, session_id: str, *, force: bool = False, timeout: float | None = None
    ) -> SessionDeleted:
        """Delete a session: its state, Redis keys, queued turns (each cancelled first)
        and workspace. SessionBusyError while a turn runs, unless ``force``, which
        cancels it and waits for it to stop; SessionNotFoundError when nothing of it
        exists. The audit log keeps its events."""
        return await sessions.delete_session(self, session_id, force=force, timeout=timeout)

    async def add_schedule(
        self,
        session_id: str,
        message: str,
        *,
        agent: str,
        cron: str | None = None,
        every: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        tenant: TenantIdentity | None = None,
    ) -> Schedule:
        """Schedule a turn: ``message`` to ``agent`` in ``session_id`` at each tick of
        ``cron`` (five fields, UTC: ``"0 9 * * 1-5"``) or every ``every`` seconds, fired
        by ``reactq beat``. Each turn carries ``metadata`` plus ``schedule_id`` and
        ``scheduled_for`` (the tick). Raises InvalidScheduleError (a cron expression that
        is not valid or never fires, not exactly one of cron and every) and its
        ScheduleTooFrequentError (ticks closer than REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS),
        TooManySchedulesError (the namespace has REACTQ_MAX_SCHEDULES_PER_TENANT),
        InvalidSessionIdError, an empty or oversized message's error, UnknownAgentError
        and AgentMismatchError, as ``submit`` does; nothing is stored then. ``tenant``:
        who its turns act for, as ``submit`` takes it (the gateway passes its caller's
        key), kept on the schedule."""
        return await schedules.add_schedule(
            self,
            session_id,
            message,
            agent=agent,
            cron=cron,
            every=every,
            metadata=metadata,
            tenant=tenant,
        )

    async def list_schedules(self, session_id: str | None = None) -> list[Schedule]:
        """Every schedule (of ``session_id`` only, when given), oldest first."""
        if session_id is not None:
            validate_session_id(session_id)
        return await (await schedules.schedule_store(self)).find(session_id)

    async def get_schedule(self, schedule_id: str) -> Schedule | None:
        """A schedule (its timing, when it last fired, its last turn or error), or None."""
        return await (await schedules.schedule_store(self)).get(schedule_id)

    async def pause_schedule(self, schedule_id: str) -> Schedule:
        """Stop a schedule firing until ``resume_schedule`` (ScheduleNotFoundError)."""
        return await schedules.set_paused(self, schedule_id, True)

    async def resume_schedule(self, schedule_id: str) -> Schedule:
        """Let a paused schedule fire again, from its next tick on (the ticks it missed
        are not made up; ScheduleNotFoundError)."""
        return await schedules.set_paused(self, schedule_id, False)

    async def delete_schedule(self, schedule_id: str) -> None:
        """Remove a schedule (ScheduleNotFoundError when there is none); the turns it
        submitted stay."""
        if not await (await schedules.schedule_store(self)).delete(schedule_id):
            raise schedules.not_found(schedule_id)

    async def audit_log(self) -> AuditSink | None:
        """The audit log beside the state store (None when the store is not SQL)."""
        store = await self.state_store()
        async with self._store_lock:
            if self._audit is None:
                # Unbatched: a producer may exit right after a submit returns.
                self._audit = audit_sink_for(store, batch=False, spill=self._spill)
        return self._audit

    async def _recording_sink(self) -> AuditSink | None:
        return await self.audit_log() if self.settings.audit else None

    async def turn_events(self, turn_id: str) -> list[Event]:
        """Every event of a turn (all attempts, whoever published it) from the audit log,
        in stream order, long after its Redis stream expired. Needs a SQL state store
        (the audit log lives beside it)."""
        sink = await self.audit_log()
        if sink is None:
            raise ConfigError(
                "the audit log lives in a SQL database: set REACTQ_DATABASE_URL to "
                "sqlite+aiosqlite://... or postgresql+asyncpg://..."
            )
        return await sink.turn_events(turn_id)

    async def undo(self, turn_id: str) -> UndoReport:
        """Revert the file changes a finished turn made in its session's workspace,
        newest first, all or nothing; the report says which files were put back.

        Runs here, in this process: the workspace root (``REACTQ_WORKSPACE_ROOT``) must
        be mounted where the producer runs, as it is on the workers. UndoConflictError
        names a file changed since the turn changed it (nothing is reverted then),
        AlreadyUndoneError a second undo, NothingToUndoError a turn that changed no
        file; UndoError a turn that has not finished.
        """
        status = await self.turn_status(turn_id)
        if status in _UNFINISHED:
            raise UndoError(
                f"turn {turn_id} has not finished ({status}): undo it once it has ended "
                "(or cancel it: a cancelled turn's file changes are reverted)",
                turn_id=turn_id,
            )
        report, changes = await revert_turn(
            await self.state_store(), self.settings.workspace_root, turn_id
        )
        await self._publish_reverts(report.session_id, turn_id, changes)
        return report

    async def _publish_reverts(
        self, session_id: str, turn_id: str, changes: Sequence[FileChange]
    ) -> None:
        """A ``file_change`` event for each file a revert put back, as a worker's revert
        publishes them: through the publisher, so the audit log has them too. Attempt 0,
        as the producer's other events of a turn: no run of the turn made them."""
        for fields in describe_changes(changes):
            await self.publisher.publish(
                FileChangeEvent(session_id=session_id, turn_id=turn_id, attempt=0, **fields)
            )

    async def turn_status(self, turn_id: str) -> TurnStatus | None:
        """A turn's status: from Redis while it remembers the turn, then from the state
        store (its committed record, or its audit log); None if neither knows it."""
        found = await self.queue.turn_status(turn_id)
        if found is not None:
            return found[1]
        info = await find_turn(self, turn_id)
        return None if info is None else info.status

    async def turn_info(self, turn_id: str) -> TurnInfo | None:
        """A turn's status, latest attempt, final (text and usage), times and the tool
        calls it waits on: from its Redis stream while that lives, then from the state
        store (its committed record and its audit log); None if neither knows it."""
        return await find_turn(self, turn_id)
