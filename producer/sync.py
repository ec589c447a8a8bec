"""SyncProducer: the blocking twin of ``Producer`` for code that is not async.

It runs a ``Producer`` on a private event loop in a daemon thread and waits on
each call, so a Django view, a Flask handler or a script can submit turns and
iterate their events without touching asyncio::

    with SyncProducer() as producer:
        handle = producer.submit("s1", "What's the weather in Paris?", agent="weather")
        for event in handle.events():
            print(event.type)
        print(handle.result(timeout=60).text)

One SyncProducer may be shared by threads: calls are handed to its loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, overload

from pydantic import BaseModel

from reactq.producer.client import Producer
from reactq.producer.documents import SyncLongTermStore
from reactq.producer.handles import TurnHandle, typed_output
from reactq.producer.sessions import SessionDeleted, SessionDetail
from reactq.producer.turn_lookup import TurnInfo
from reactq.shared.catalogue import AgentInfo, AgentTools
from reactq.shared.client_tools import ClientTool
from reactq.shared.content import ContentPart
from reactq.shared.events import Event, FinalEvent
from reactq.shared.file_undo import UndoReport
from reactq.shared.messages import ChatMessage
from reactq.shared.protocol.approvals import DecideOutcome, PendingApproval
from reactq.shared.protocol.outcomes import CancelResult
from reactq.shared.schedules import Schedule
from reactq.shared.settings import Settings
from reactq.shared.state import BranchInfo, SessionPage, SessionUsage
from reactq.shared.state.todo_store import TodoItem
from reactq.shared.tenancy import TenantIdentity
from reactq.shared.turns import MultitaskStrategy, TurnStatus

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


async def _wait(awaitable: Awaitable[T]) -> T:
    return await awaitable


class _Loop:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="reactq-sync-producer", daemon=True
        )
        self._thread.start()

    def run(self, awaitable: Awaitable[T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(_wait(awaitable), self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class _SyncIterator(Iterator[Event]):
    """Iterates an async iterator living on the private loop."""

    def __init__(self, loop: _Loop, source: AsyncIterator[Event]) -> None:
        self._loop = loop
        self._source = source

    def __next__(self) -> Event:
        try:
            return self._loop.run(self._source.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        """Stop iterating and release what the iterator holds."""
        aclose = getattr(self._source, "aclose", None)
        if aclose is not None:
            self._loop.run(aclose())


class SyncTurnHandle:
    """A submitted turn, blocking: ``turn_id``, ``events()`` and ``result()``."""

    def __init__(self, loop: _Loop, handle: TurnHandle) -> None:
        self._loop = loop
        self._handle = handle
        self.turn_id = handle.turn_id
        """The turn's id."""
        self.session_id = handle.session_id
        """Its session."""

    def events(self) -> Iterator[Event]:
        """This turn's events, from ``queued`` to ``final`` (replayed if late)."""
        iterator = _SyncIterator(self._loop, self._handle.events())
        try:
            yield from iterator
        finally:
            iterator.close()

    def result(self, timeout: float | None = None) -> FinalEvent:
        """Wait for the turn's FinalEvent; TimeoutError after ``timeout`` s."""
        return self._loop.run(self._handle.result(timeout))

    @overload
    def output(self, output_type: None = None, timeout: float | None = None) -> dict[str, Any]: ...
    @overload
    def output(self, output_type: type[M], timeout: float | None = None) -> M: ...
    def output(
        self, output_type: type[M] | None = None, timeout: float | None = None
    ) -> M | dict[str, Any]:
        """Wait for the turn's structured answer, as ``output_type`` or the JSON object
        (``TurnHandle.output``); InvalidOutputError when it ended without one."""
        return typed_output(self.result(timeout), output_type)


class SyncProducer:
    """Blocking ``Producer``: the same methods, without ``await``."""

    def __init__(self, settings: Settings | None = None) -> None:
        self._loop = _Loop()
        self._closed = False

        async def make() -> Producer:
            # Made on its loop, so connections bind to it.
            return Producer(settings)

        self.producer = self._loop.run(make())
        """The async Producer it drives."""
        self.store = SyncLongTermStore(self.producer.store, self._loop.run)
        """The long-term store, blocking (``put``, ``get``, ``delete``, ``search``)."""

    @classmethod
    def from_env(cls, **overrides: Any) -> SyncProducer:
        """A producer configured from ``REACTQ_*`` variables (keyword overrides win)."""
        return cls(Settings.from_env(**overrides))

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release connections and stop the loop thread."""
        if self._closed:
            return
        self._closed = True
        self._loop.run(self.producer.close())
        self._loop.stop()

    def submit(
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
    ) -> SyncTurnHandle:
        """Validate and enqueue a turn (takes and raises like ``Producer.submit``)."""
        handle = self._loop.run(
            self.producer.submit(
                session_id,
                message,
                agent=agent,
                strategy=strategy,
                metadata=metadata,
                context=context,
                overrides=overrides,
                webhook=webhook,
                tenant=tenant,
                client_tools=client_tools,
            )
        )
        return SyncTurnHandle(self._loop, handle)

    def subscribe(self, session_id: str, after: str | None = None) -> Iterator[Event]:
        """A session's events: ``after=None`` live only, ``"0"`` from the start, or an id."""
        iterator = _SyncIterator(self._loop, self.producer.subscribe(session_id, after=after))
        try:
            yield from iterator
        finally:
            iterator.close()

    def cancel(self, turn_id: str) -> CancelResult:
        """Cancel a turn (see ``Producer.cancel``)."""
        return self._loop.run(self.producer.cancel(turn_id))

    def approve(
        self, turn_id: str, call_id: str, note: str | None = None, *, by: str | None = None
    ) -> DecideOutcome:
        """Approve a waiting tool call (see ``Producer.approve``)."""
        return self._loop.run(self.producer.approve(turn_id, call_id, note, by=by))

    def deny(
        self, turn_id: str, call_id: str, reason: str | None = None, *, by: str | None = None
    ) -> DecideOutcome:
        """Deny a waiting tool call (see ``Producer.deny``)."""
        return self._loop.run(self.producer.deny(turn_id, call_id, reason, by=by))

    def complete_tool(
        self,
        turn_id: str,
        call_id: str,
        result: Any = None,
        *,
        error: str | None = None,
        by: str | None = None,
    ) -> DecideOutcome:
        """Give a waiting call's result (see ``Producer.complete_tool``)."""
        return self._loop.run(
            self.producer.complete_tool(turn_id, call_id, result, error=error, by=by)
        )

    def decide(
        self,
        turn_id: str,
        decisions: Mapping[str, bool | str],
        *,
        notes: Mapping[str, str] | None = None,
        by: str | None = None,
    ) -> DecideOutcome:
        """Decide several waiting calls at once (see ``Producer.decide``)."""
        return self._loop.run(self.producer.decide(turn_id, decisions, notes=notes, by=by))

    def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        """The tool calls waiting for a decision (see ``Producer.pending_approvals``)."""
        return self._loop.run(self.producer.pending_approvals(session_id))

    def agents(self) -> list[AgentInfo]:
        """The agents workers announced (see ``Producer.agents``)."""
        return self._loop.run(self.producer.agents())

    def agent_tools(self, agent: str) -> AgentTools:
        """The agent's tool catalogue (see ``Producer.agent_tools``)."""
        return self._loop.run(self.producer.agent_tools(agent))

    def history(self, session_id: str, branch: str | None = None) -> list[ChatMessage]:
        """Every message of the session's conversation (its active branch, or
        ``branch``), oldest first."""
        return self._loop.run(self.producer.history(session_id, branch))

    def fork(
        self,
        session_id: str,
        from_sequence: int,
        *,
        branch: str | None = None,
        new_branch: str | None = None,
        activate: bool = True,
    ) -> str:
        """Start a branch keeping messages 1..``from_sequence`` (see ``Producer.fork``)."""
        return self._loop.run(
            self.producer.fork(
                session_id, from_sequence, branch=branch, new_branch=new_branch, activate=activate
            )
        )

    def branches(self, session_id: str) -> list[BranchInfo]:
        """The session's branches, oldest first (see ``Producer.branches``)."""
        return self._loop.run(self.producer.branches(session_id))

    def switch_branch(self, session_id: str, branch_id: str) -> None:
        """Make ``branch_id`` the session's active branch."""
        self._loop.run(self.producer.switch_branch(session_id, branch_id))

    def truncate(self, session_id: str, after_sequence: int, *, branch: str | None = None) -> None:
        """Delete a branch's messages after ``after_sequence`` (see ``Producer.truncate``)."""
        self._loop.run(self.producer.truncate(session_id, after_sequence, branch=branch))

    def list_sessions(
        self,
        *,
        agent: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        updated_since: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """Stored sessions, newest first, a page at a time (see ``Producer.list_sessions``)."""
        return self._loop.run(
            self.producer.list_sessions(
                agent=agent,
                metadata=metadata,
                updated_since=updated_since,
                limit=limit,
                cursor=cursor,
            )
        )

    def get_session(self, session_id: str) -> SessionDetail | None:
        """A session's summary, or None (see ``Producer.get_session``)."""
        return self._loop.run(self.producer.get_session(session_id))

    def update_session_metadata(self, session_id: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``patch`` into the session's metadata; returns the result."""
        return self._loop.run(self.producer.update_session_metadata(session_id, patch))

    def usage(self, session_id: str) -> SessionUsage:
        """The session's token and cost totals (see ``Producer.usage``)."""
        return self._loop.run(self.producer.usage(session_id))

    def todos(self, session_id: str) -> list[TodoItem]:
        """The session's todo list (see ``Producer.todos``)."""
        return self._loop.run(self.producer.todos(session_id))

    def session_turns(self, session_id: str) -> list[TurnInfo]:
        """The session's turns, oldest first (see ``Producer.session_turns``)."""
        return self._loop.run(self.producer.session_turns(session_id))

    def delete_session(
        self, session_id: str, *, force: bool = False, timeout: float | None = None
    ) -> SessionDeleted:
        """Delete a session (see ``Producer.delete_session``)."""
        return self._loop.run(
            self.producer.delete_session(session_id, force=force, timeout=timeout)
        )

    def add_schedule(
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
        """Schedule a turn at each tick of ``cron`` or ``every`` seconds (see
        ``Producer.add_schedule``)."""
        return self._loop.run(
            self.producer.add_schedule(
                session_id,
                message,
                agent=agent,
                cron=cron,
                every=every,
                metadata=metadata,
                tenant=tenant,
                fresh_sessions=fresh_sessions,
            )
        )

    def list_schedules(self, session_id: str | None = None) -> list[Schedule]:
        """Every schedule (of ``session_id``), oldest first."""
        return self._loop.run(self.producer.list_schedules(session_id))

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        """A schedule, or None (see ``Producer.get_schedule``)."""
        return self._loop.run(self.producer.get_schedule(schedule_id))

    def pause_schedule(self, schedule_id: str) -> Schedule:
        """Stop a schedule firing (see ``Producer.pause_schedule``)."""
        return self._loop.run(self.producer.pause_schedule(schedule_id))

    def resume_schedule(self, schedule_id: str) -> Schedule:
        """Let a paused schedule fire again (see ``Producer.resume_schedule``)."""
        return self._loop.run(self.producer.resume_schedule(schedule_id))

    def delete_schedule(self, schedule_id: str) -> None:
        """Remove a schedule (see ``Producer.delete_schedule``)."""
        self._loop.run(self.producer.delete_schedule(schedule_id))

    def undo(self, turn_id: str) -> UndoReport:
        """Revert a finished turn's file changes (see ``Producer.undo``; the workspace
        root must be mounted here)."""
        return self._loop.run(self.producer.undo(turn_id))

    def turn_status(self, turn_id: str) -> TurnStatus | None:
        """A turn's status, from Redis or else the state store (see
        ``Producer.turn_status``); None if neither knows it."""
        return self._loop.run(self.producer.turn_status(turn_id))

    def turn_info(self, turn_id: str) -> TurnInfo | None:
        """A turn's status, attempt, final, usage and times (see ``Producer.turn_info``)."""
        return self._loop.run(self.producer.turn_info(turn_id))
