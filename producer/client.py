"""Producer: submit turns, follow their events, read a session's history.

``Producer`` holds the turn's path (``submit``, ``subscribe``, ``cancel``, ``undo``) and
the sessions, schedules and turn lookups it delegates to their modules; its parts live
beside it: ``base`` (connections and shared steps), ``approvals`` (decisions on waiting
tool calls), ``history`` (conversations, branches, session metadata) and ``handles``
(``TurnHandle``, what ``submit`` returns).

The producer reaches workers only through the broker and Redis: it never
imports ``worker``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from reactq.producer import schedules, sessions, stateless
from reactq.producer.approvals import ApprovalsMixin
from reactq.producer.handles import TurnHandle
from reactq.producer.history import HistoryMixin
from reactq.producer.service_errors import translates_service_errors
from reactq.producer.sessions import SessionDeleted, SessionDetail
from reactq.producer.turn_lookup import TurnInfo, find_turn
from reactq.shared.catalogue import AgentInfo, AgentTools
from reactq.shared.client_tools import ClientTool, check_client_tools
from reactq.shared.content import ContentPart, ImagePart
from reactq.shared.errors import (
    AgentMismatchError,
    ConfigError,
    InvalidMessageError,
    InvalidTurnError,
    TurnRejectedError,
    UnknownAgentError,
)
from reactq.shared.events import Event, QueuedEvent
from reactq.shared.file_undo import UndoError, UndoReport, discard_turn_files, revert_turn
from reactq.shared.messages import ChatMessage
from reactq.shared.netcheck import AllowList
from reactq.shared.protocol import endings
from reactq.shared.protocol.control import CancelMode, notify_cancel
from reactq.shared.protocol.outcomes import CancelOutcome, CancelResult, SubmitStatus
from reactq.shared.schedules import Schedule
from reactq.shared.settings import Settings
from reactq.shared.tenancy import TenantIdentity
from reactq.shared.turn_inputs import check_context, check_metadata, check_overrides
from reactq.shared.turns import (
    MultitaskStrategy,
    TurnRequest,
    TurnStatus,
    check_message,
    validate_session_id,
)
from reactq.shared.webhooks import check_url

# A turn in these states may still change files: undo waits for its end.
_UNFINISHED = frozenset(
    {
        TurnStatus.QUEUED,
        TurnStatus.RUNNING,
        TurnStatus.AWAITING_APPROVAL,
        TurnStatus.AWAITING_CHILDREN,
    }
)


__all__ = ["Producer"]


def _check_text(message: str) -> None:
    """Refuse a message UTF-8 cannot carry: the turn's payload could not be written."""
    try:
        message.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(
            f"the message holds a lone surrogate at character {exc.start}: send valid Unicode text"
        ) from None


@translates_service_errors
class Producer(ApprovalsMixin, HistoryMixin):
    """Puts turns on the pool's queues and reads their events and history."""

    @classmethod
    def from_env(cls, **overrides: Any) -> Producer:
        """A producer configured from ``REACTQ_*`` variables (keyword overrides win)."""
        return cls(Settings.from_env(**overrides))

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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
        client_tools: Sequence[ClientTool | Mapping[str, Any]] | None = None,
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
        session id. ``client_tools`` (``ClientTool`` or ``{"name", "description",
        "parameters"}``) are tools the caller runs: the model sees them, and a call to one
        parks the turn until ``complete_tool`` gives its result. With the Celery broker
        unreachable the turn is still queued (a warning is logged): a worker's reaper
        dispatches it once the broker is back.

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
        tools = check_client_tools(client_tools)
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
            client_tools=tools,
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

    async def agents(self) -> list[AgentInfo]:
        """The agents workers announced, by name (``live``: a worker hosting it beat
        within ``REACTQ_HEARTBEAT_SECONDS``); one for each definition (config version)
        live workers host, so a name live with two definitions is listed twice."""
        return await self.registry.agents(live_within=self.settings.heartbeat_seconds)

    async def worker_hint(self, agent: str) -> str | None:
        """None while a worker hosting ``agent`` beats (within
        ``REACTQ_HEARTBEAT_SECONDS``); else the sentence saying a turn for it waits in
        the queue until one starts (the CLI prints it, the gateway's 202 carries it)."""
        window = self.settings.heartbeat_seconds
        if await self.registry.live_hosts(agent, window):
            return None
        return (
            f"no worker hosting agent {agent!r} has been seen in the last {window:g} s "
            f"(namespace {self.settings.namespace!r}): the turn waits in the queue until one "
            "starts (`reactq worker --agents MODULE:ATTR`)"
        )

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

    def subscribe(self, session_id: str, after: str | None = None) -> AsyncIterator[Event]:
        """A session's events: ``after=None`` live only, ``"0"`` from the start, or an id."""
        validate_session_id(session_id)
        return self.bus.subscribe(session_id, after=after)

    async def get_session(self, session_id: str) -> SessionDetail | None:
        """A session's agent, active branch, message count, turns, last turn, token
        usage and metadata; None when the state store does not have it."""
        return await sessions.session_detail(self, session_id)

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
        fresh_sessions: bool = False,
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
        key), kept on the schedule. ``fresh_sessions``: each tick's turn in a new
        session, ``{session_id}-{tick}`` (``session_id`` their common prefix)."""
        return await schedules.add_schedule(
            self,
            session_id,
            message,
            agent=agent,
            cron=cron,
            every=every,
            metadata=metadata,
            tenant=tenant,
            fresh_sessions=fresh_sessions,
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

    def stateless(
        self,
        message: str | Sequence[str | ContentPart | Mapping[str, Any]],
        *,
        agent: str,
        history: Sequence[ChatMessage] = (),
        metadata: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        overrides: dict[str, Any] | None = None,
        tenant: TenantIdentity | None = None,
    ) -> contextlib.AbstractAsyncContextManager[TurnHandle]:
        """A stateless run: ``message`` to ``agent`` after ``history`` (the conversation
        the caller holds), with nothing kept once it ends::

            async with producer.stateless("and in Rome?", agent="weather", history=msgs) as h:
                final = await h.result()

        The turn runs in a throwaway session (``stateless.stateless_session_id``), as any
        turn does, which is deleted on exit (the turn cancelled first if it has not
        ended). Raises what ``submit`` raises."""
        return stateless.stateless_turn(
            self,
            message,
            agent=agent,
            history=history,
            metadata=metadata,
            context=context,
            overrides=overrides,
            tenant=tenant,
        )
