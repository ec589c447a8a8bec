"""AgentRunner: one turn, end to end — load history, run the loop, commit, final.

Every turn ends with exactly one ``final`` event, emitted after the commit, so a
subscriber that sees ``final`` can read the committed history. The exceptions are
a lost lease (``StaleLeaseError`` at commit): the new lease holder owns the turn
now, a Redis outage (``REDIS_OUTAGE``: the pool runs the turn again, from its
checkpoint), and a turn committed already (``TurnCommittedError``: the store keeps a
turn's first commit only): its final is the committed one. Each time this worker
re-raises and emits nothing more. An error final's apology
(``error_fallback_message``) is never committed as a message of the conversation.

A cancelled turn (``cancel=`` fired) commits nothing: its ``final`` has status
``cancelled`` and the session's history is as it was before the turn.

Every completed step is checkpointed as it completes (``StepStore.checkpoint_step``:
the state store's, or the pool's ``TurnSteps`` in Redis; fenced like the commit,
kept apart from the conversation), and its events go out with it
(``TurnEmitter.checkpoint``: in the same Redis call in the pool); a turn given its
``checkpoint`` back (attempt n+1 after a lost worker) goes on from there. The end
of the turn drops the checkpoint (the store's commit, or the pool's ``finish``); a
cancelled turn discards it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reactq.shared.bus import TurnEmitter
from reactq.shared.client_tools import ClientTool
from reactq.shared.content import ContentPart
from reactq.shared.errors import (
    AgentMismatchError,
    ReactqError,
    StaleLeaseError,
    StoreUnavailableError,
    TurnCommittedError,
)
from reactq.shared.events import ErrorEvent, FileChangeEvent, FinalEvent
from reactq.shared.file_undo import describe_changes, discard_turn_files
from reactq.shared.messages import ChatMessage
from reactq.shared.protocol.approvals import Decision
from reactq.shared.redis_client import REDIS_OUTAGE
from reactq.shared.state.base import StateStore, StepStore, TurnCheckpoint, TurnRecord
from reactq.shared.tenancy import TenantIdentity
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.cancel import CancelHandle, CancelSignal
from reactq.worker.agent.context_policy import model_view
from reactq.worker.agent.history import repair
from reactq.worker.agent.loop import AgentLoop
from reactq.worker.agent.run_state import OnStep, RunResult, answered_prefix
from reactq.worker.agent.suspend import Suspended
from reactq.worker.agent.tools import ToolContext
from reactq.worker.agent.turn_setup import loop_for_turn, session_budget_refusal

__all__ = ["INTERRUPTED_MESSAGE", "AgentRunner"]

INTERRUPTED_MESSAGE = "[interrupted: the user sent a newer message before this answer was done]"


class AgentRunner:
    """Runs turns of one agent against a state store."""

    def __init__(
        self,
        loop: AgentLoop,
        store: StateStore,
        agent_name: str,
        steps: StepStore | None = None,
        *,
        workspace_root: str | None = None,
    ) -> None:
        """``steps``: where the turn's completed steps are checkpointed (the store by
        default; the worker pool keeps them in Redis, ``TurnSteps``). ``workspace_root``:
        the file tools' workspaces, as this process mounts them; a turn cancelled or
        rolled back has its file changes reverted there (``shared/file_undo.py``)."""
        self.loop = loop
        self.store = store
        self.agent_name = agent_name
        self.steps: StepStore = steps if steps is not None else store
        # Steps kept elsewhere: the store holds no checkpoint of the turn for its
        # commit to drop (a statement fewer per turn on SQL).
        self._drop_checkpoint = self.steps is store
        self.workspace_root = workspace_root

    async def run_turn(
        self,
        *,
        session_id: str,
        message: str,
        turn_id: str,
        emitter: TurnEmitter,
        parts: Sequence[ContentPart] | None = None,
        fence: int | None = None,
        cancel: CancelHandle | None = None,
        keep_partial: Callable[[], bool] | None = None,
        checkpoint: TurnCheckpoint | None = None,
        decisions: Mapping[str, Decision] | None = None,
        context: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
        tenant: TenantIdentity | None = None,
        client_tools: Sequence[ClientTool] = (),
    ) -> FinalEvent:
        """Run one turn and return its (already emitted) final event.

        ``cancel`` (an ``asyncio.Event`` or a zero-argument callable returning
        True) stops the turn between steps or mid-model-call; the final then has
        status ``cancelled`` and nothing is committed. Raises StaleLeaseError if
        the commit is refused because a newer lease exists, TurnCommittedError if
        the turn was committed already (no final is emitted then),
        StoreUnavailableError when a fenced turn's store stayed away past its outage
        budget (no final: the caller gives the turn back), and re-raises
        CancelledError (the caller decides whether a
        cancelled task is final or re-run).

        ``keep_partial``, asked when the turn is cancelled, turns the cancel into
        an interrupt: the user message and the completed steps are committed,
        closed by an assistant message that marks the turn as interrupted, so the
        next turn runs on top of them.

        ``checkpoint``: the turn's steps stored by an earlier attempt; the run goes
        on after them, on the branch they were run on.

        ``decisions`` (the worker pool passes them, empty for a turn not parked
        before) lets the turn wait for people: a tool call that needs approval ends
        the run with ``AwaitingApproval`` (no final; the step is checkpointed) for the
        caller to park the turn. Without it such calls are denied.

        ``context`` reaches the tools (``ToolContext.context``), hooks, interventions,
        approval policies and a system prompt that is a function of the turn;
        ``metadata`` is kept on the turn's record; ``overrides`` change the knobs the
        agent allows for this turn only. A session over its ``session_max_tokens`` /
        ``session_max_cost`` ends the turn with status budget_exceeded before any
        model call. Every final carries the agent's ``config_version``.

        ``parts``: the message as content parts (text and images), stored with it and
        sent to the model in its place; ``message`` is their text. ``tenant``: who the
        turn acts for (``ToolContext.tenant``). ``client_tools``: tools the caller runs;
        a call to one waits like a call for approval, for the caller's result.
        """
        version = self.loop.version
        emitter.final_follows = True  # every path below ends with a final
        signal = CancelSignal(cancel) if cancel is not None else None
        try:
            user = ChatMessage(
                role="user", content=message, parts=list(parts) if parts else None, turn_id=turn_id
            )
            unspent = _RecordFields(metadata, version, {}, None)
            turn = _Turn(session_id, turn_id, user, emitter, fence, unspent)
            if signal is not None and signal.is_set():
                if keep_partial is not None and keep_partial():
                    # Stopped before it read any branch: the active one is its branch,
                    # unless an earlier attempt's checkpoint says which (its steps kept).
                    kept = answered_prefix(checkpoint.messages) if checkpoint else []
                    branch_id = checkpoint.branch_id if checkpoint else None
                    return await self._interrupted(turn, kept, branch_id, None)
                return await self._cancelled_unstarted(turn, checkpoint)
            # One step: the session (made if new), the lease's token recorded, and the
            # history of the branch the turn runs on: the one active when it starts
            # (even if another is switched to while it runs), or its checkpoint's.
            start = await self.store.begin_turn(
                session_id,
                self.agent_name,
                fence=fence,
                branch_id=checkpoint.branch_id if checkpoint is not None else None,
            )
            if start.info.agent != self.agent_name:
                return await self._rejected(turn, start.info.agent)
            loop = loop_for_turn(self.loop, overrides or {}, self.agent_name, client_tools)
            refusal = await session_budget_refusal(self.store, session_id, loop)
            if refusal is not None:
                return await self._over_session_budget(turn, refusal)
            branch = start.branch_id
            tool_context = ToolContext(
                session_id=session_id,
                turn_id=turn_id,
                attempt=emitter.attempt,
                context=dict(context or {}),
                metadata=dict(metadata or {}),
                agent=self.agent_name,
                store=self.store,
                emitter=emitter,
                fence=fence,
                tenant=tenant,
            )
            result = await loop.run(
                # The model reads from the latest summary on; the store keeps every message.
                [*repair(model_view(start.messages)), user],
                emitter,
                context=tool_context,
                cancel=cancel,
                resume=checkpoint.messages if checkpoint is not None else [],
                on_step=self._checkpointer(turn, branch),
                decisions=decisions,
            )
            if result.status is TurnStatus.CANCELLED:
                if keep_partial is not None and keep_partial():
                    # To the branch the turn read, like the normal commit: the head may
                    # have moved (a fork, a switch) while the turn ran.
                    steps = result.messages[:-1]  # the last one is the cancel notice
                    return await self._interrupted(turn, steps, branch, result)
                return await self._cancelled(turn, result)
            await self._commit(turn, result, branch)
        except (StaleLeaseError, TurnCommittedError, Suspended, asyncio.CancelledError):
            raise
        except REDIS_OUTAGE:
            raise  # not the turn's end: the pool leaves it in its slot and runs it again
        except Exception as exc:
            if isinstance(exc, StoreUnavailableError) and fence is not None:
                raise  # a pool turn: the drain gives it back to its queue, no final
            # Raised from the handler, a failure to publish reaches the caller.
            return await self._failed(emitter, exc, version)
        # Outside the try: if the bus cannot take the final, retrying here could
        # publish it twice; the caller sees the exception instead.
        return await self._completed(emitter, result, version)

    # -- the ways a turn ends: each builds and publishes its final ------------------

    async def _completed(
        self, emitter: TurnEmitter, result: RunResult, version: str | None
    ) -> FinalEvent:
        """The run ended and its outcome is committed (or, cancelled, dropped): its
        status (completed, max_iterations, error, budget_exceeded, invalid_output,
        blocked, cancelled), text, usage and error code are the final's."""
        return await emitter.emit(
            FinalEvent,
            text=result.text,
            status=result.status,
            usage=result.usage,
            cost=result.cost,
            code=result.error.code if result.error is not None else None,
            config_version=version,
            output=result.output,
        )

    async def _failed(
        self, emitter: TurnEmitter, exc: Exception, version: str | None
    ) -> FinalEvent:
        """The turn failed around the run (the store, the bus, a bug): an error event,
        then the agent's apology; nothing is committed."""
        error = (
            exc
            if isinstance(exc, ReactqError)
            else ReactqError(f"the turn failed: {type(exc).__name__}: {exc}")
        )
        await self._emit_error(emitter, error)
        return await emitter.emit(
            FinalEvent,
            text=self.loop.config.error_text(error),
            status=TurnStatus.ERROR,
            usage={},
            cost=None,
            code=error.code,
            config_version=version,
            output=None,
        )

    async def _cancelled_unstarted(
        self, turn: _Turn, checkpoint: TurnCheckpoint | None
    ) -> FinalEvent:
        """Cancelled before it began: an earlier attempt's steps and files are dropped."""
        emitter = turn.emitter
        if checkpoint is not None:
            await self.steps.discard_checkpoint(turn.session_id, turn.turn_id)
            await self._discard_files(emitter)  # an earlier attempt's changes
        return await emitter.emit(
            FinalEvent,
            text=self.loop.config.cancelled_message,
            status=TurnStatus.CANCELLED,
            usage={},
            config_version=turn.record.config_version,
        )

    async def _cancelled(self, turn: _Turn, result: RunResult) -> FinalEvent:
        """Cancelled while it ran: nothing is kept, its steps and files are dropped."""
        emitter = turn.emitter
        await self.steps.discard_checkpoint(turn.session_id, turn.turn_id)
        await self._discard_files(emitter)
        return await self._completed(emitter, result, turn.record.config_version)

    async def _interrupted(
        self,
        turn: _Turn,
        steps: list[ChatMessage],
        branch: str | None,
        result: RunResult | None,
    ) -> FinalEvent:
        """Cancelled with ``keep_partial``: the user message and ``steps`` are committed,
        closed by the interrupted marker (``result``: the run's, None if none ran)."""
        spent: dict[str, Any] = {}
        record = turn.record
        if result is not None:
            spent = {"usage": result.usage, "cost": result.cost}
            record = dataclasses.replace(record, usage=result.usage, cost=result.cost)
        await self._commit_interrupted(
            turn.session_id, turn.user, steps, turn.emitter, turn.fence, branch, record
        )
        return await turn.emitter.emit(
            FinalEvent,
            text=INTERRUPTED_MESSAGE,
            status=TurnStatus.CANCELLED,
            **spent,
            config_version=record.config_version,
        )

    async def _rejected(self, turn: _Turn, session_agent: str) -> FinalEvent:
        """The session belongs to another agent: refused, nothing run or kept."""
        mismatch = AgentMismatchError(
            f"session {turn.session_id!r} belongs to agent {session_agent!r}, not "
            f"{self.agent_name!r}; use a new session id to talk to {self.agent_name!r}",
            session_agent=session_agent,
            agent=self.agent_name,
        )
        await self._emit_error(turn.emitter, mismatch)
        return await turn.emitter.emit(
            FinalEvent,
            text=mismatch.message,
            status=TurnStatus.REJECTED,
            usage={},
            config_version=turn.record.config_version,
        )

    async def _over_session_budget(self, turn: _Turn, refusal: ReactqError) -> FinalEvent:
        """The session spent its budget: refused, nothing reaches the model or the
        conversation."""
        await self._emit_error(turn.emitter, refusal)
        return await turn.emitter.emit(
            FinalEvent,
            text=refusal.message,
            status=TurnStatus.BUDGET_EXCEEDED,
            usage={},
            code=refusal.code,
            config_version=turn.record.config_version,
        )

    # -- what a turn keeps ----------------------------------------------------------

    def _checkpointer(self, turn: _Turn, branch: str | None) -> OnStep:
        """The run's ``on_step``: each completed step checkpointed, fenced, with the
        events it queued (its actions, its results): one call when the steps are in
        Redis beside the stream."""
        emitter = turn.emitter

        async def on_step(step: int, steps: list[ChatMessage]) -> None:
            saved = TurnCheckpoint(
                session_id=turn.session_id,
                turn_id=turn.turn_id,
                step=step,
                messages=steps,
                branch_id=branch,
                attempt=emitter.attempt,
            )
            await emitter.checkpoint(self.steps, saved, turn.fence)

        return on_step

    async def _commit(self, turn: _Turn, result: RunResult, branch: str | None) -> None:
        """Commit a run that was not cancelled: its record, and the messages a later
        turn may replay to the model."""
        turn_id = turn.turn_id
        produced = [
            m if m.turn_id == turn_id else m.model_copy(update={"turn_id": turn_id})
            for m in result.messages
        ]
        record = TurnRecord(
            turn_id=turn_id,
            session_id=turn.session_id,
            status=result.status,
            attempt=turn.emitter.attempt,
            final_text=result.text,
            error=result.error.code if result.error is not None else None,
            created_at=time.time(),
            **dataclasses.replace(turn.record, usage=result.usage, cost=result.cost).fields(),
        )
        summary = [result.summary] if result.summary is not None else []
        if result.status in _APOLOGIES and produced and produced[-1].content == result.text:
            # An error final is never stored as a conversation message: a later
            # turn would replay the apology to the model as the agent's answer.
            produced = produced[:-1]
        kept = [*summary, turn.user, *produced]
        if result.status is TurnStatus.BLOCKED and not result.messages:
            # An input guardrail refused it: the record says so, the conversation
            # stays as it was (a later turn must not replay it to the model).
            kept = []
        await self.store.commit_turn(
            turn.session_id,
            kept,
            record,
            fence=turn.fence,
            branch_id=branch,
            drop_checkpoint=self._drop_checkpoint,
        )

    async def _commit_interrupted(
        self,
        session_id: str,
        user: ChatMessage,
        steps: list[ChatMessage],
        emitter: TurnEmitter,
        fence: int | None,
        branch: str | None,
        kept: _RecordFields | None = None,
    ) -> None:
        turn_id = emitter.turn_id
        marker = ChatMessage(role="assistant", content=INTERRUPTED_MESSAGE, turn_id=turn_id)
        record = TurnRecord(
            turn_id=turn_id,
            session_id=session_id,
            status=TurnStatus.CANCELLED,
            attempt=emitter.attempt,
            final_text=INTERRUPTED_MESSAGE,
            error="interrupted",
            created_at=time.time(),
            **(kept or _RecordFields(None, self.loop.version, {}, None)).fields(),
        )
        produced = [m.model_copy(update={"turn_id": turn_id}) for m in steps]
        await self.store.commit_turn(
            session_id,
            [user, *produced, marker],
            record,
            fence=fence,
            branch_id=branch,
            drop_checkpoint=self._drop_checkpoint,
        )

    async def _discard_files(self, emitter: TurnEmitter) -> None:
        """Revert the turn's file changes (it keeps nothing), each reverted file told
        by a ``file_change`` event."""
        if self.workspace_root is None:
            return
        changes = await discard_turn_files(self.store, self.workspace_root, emitter.turn_id)
        for fields in describe_changes(changes):
            await emitter.emit(FileChangeEvent, **fields)

    async def _emit_error(self, emitter: TurnEmitter, error: ReactqError) -> None:
        try:
            await emitter.emit(
                ErrorEvent,
                code=error.code,
                message=error.message or str(error),
                context={"agent": self.agent_name, **error.details},
            )
        except asyncio.CancelledError:
            raise
        except Exception:  # the bus itself failed; the final will try once more
            pass


_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")

_APOLOGIES = frozenset({TurnStatus.ERROR, TurnStatus.INVALID_OUTPUT})
"""The statuses whose final text is the agent's ``error_fallback_message``."""


@dataclass(frozen=True)
class _Turn:
    """What every ending of a turn needs: who it is, and what its record keeps."""

    session_id: str
    turn_id: str
    user: ChatMessage
    emitter: TurnEmitter
    fence: int | None
    record: _RecordFields
    """The record's fields of a turn that spent nothing (a run replaces the spend)."""


@dataclass(frozen=True)
class _RecordFields:
    """What a turn's record keeps beside its outcome."""

    metadata: Mapping[str, Any] | None
    config_version: str | None
    usage: Mapping[str, int]
    cost: float | None

    def fields(self) -> dict[str, Any]:
        # The record keeps the three counts every store has a column for.
        return {
            "metadata": dict(self.metadata or {}),
            "config_version": self.config_version,
            "usage": {k: self.usage[k] for k in _USAGE_KEYS if k in self.usage},
            "cost": self.cost,
        }
