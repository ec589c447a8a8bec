"""What one run of the loop holds, and how it ends (``RunResult``).

``RunState`` is the base of ``Run`` (``worker/agent/run.py``, its steps) through
``ModelCalls`` (``worker/agent/run_model.py``, its model calls): the run's messages,
its meter and its model chain, the checks before every call, the checkpoint of a
step, and the result a run ends with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reactq.shared.bus import TurnEmitter
from reactq.shared.errors import BudgetExceededError, ReactqError
from reactq.shared.events import ErrorEvent
from reactq.shared.messages import ChatMessage
from reactq.shared.protocol.approvals import Decision
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.cancel import CancelSignal, RunCancelled
from reactq.worker.agent.fallback import ModelChain
from reactq.worker.agent.guardrails import GuardrailBlockedError
from reactq.worker.agent.llm.base import LLMResponse
from reactq.worker.agent.tools import ToolContext
from reactq.worker.agent.usage import UsageMeter
from reactq.worker.agent.visible import VisibleText

if TYPE_CHECKING:
    from reactq.worker.agent.loop import AgentLoop

__all__ = ["OnStep", "OverBudget", "RunResult", "RunState", "answered_prefix", "provider_fields"]

OnStep = Callable[[int, list[ChatMessage]], Awaitable[None]]
"""``on_step(completed_steps, new_messages)``: stores a run's checkpoint."""


@dataclass
class RunResult:
    """What one run of the loop produced."""

    status: TurnStatus
    """COMPLETED, MAX_ITERATIONS, ERROR, BUDGET_EXCEEDED, INVALID_OUTPUT, BLOCKED or
    CANCELLED."""
    text: str
    """The final answer, or the fallback message."""
    messages: list[ChatMessage] = field(default_factory=list)
    """The new messages of this run (not the input), ending with the assistant's answer."""
    usage: dict[str, int] = field(default_factory=dict)
    """Token usage summed over every model call."""
    error: ReactqError | None = None
    """Why it ended in ERROR, BUDGET_EXCEEDED or BLOCKED (a GuardrailBlockedError whose
    ``details["stage"]`` says whether the input or the answer was refused)."""
    cost: float | None = None
    """What the run cost, when the loop has a price for its model."""
    output: dict[str, Any] | None = None
    """The validated structured answer, when the agent has an ``output_type``."""
    summary: ChatMessage | None = None
    """The summary the context policy wrote before the run's first call (committed with
    the turn, before its user message), if it compacted."""


class RunState:
    """The state of one ``AgentLoop.run`` call."""

    def __init__(
        self,
        loop: AgentLoop,
        emitter: TurnEmitter,
        context: ToolContext | None,
        cancel: CancelSignal | None,
        on_step: OnStep | None = None,
        decisions: Mapping[str, Decision] | None = None,
    ) -> None:
        self.loop = loop
        self.on_step = on_step
        self.decisions = decisions
        self.completed = 0
        self.emitter = emitter
        self.turn_id = emitter.turn_id
        self.context = context or ToolContext(
            session_id=emitter.session_id,
            turn_id=emitter.turn_id,
            attempt=emitter.attempt,
            emitter=emitter,
        )
        self.cancel = cancel
        self.meter = UsageMeter(loop.prices, loop.config.max_total_tokens, loop.config.max_cost)
        # A fallback holds for the rest of the turn.
        self.models = ModelChain(loop.models, loop.limiters)
        self.new: list[ChatMessage] = []
        self.wire: list[dict[str, Any]] = []
        self.seen: dict[tuple[str, str], int] = {}
        self.iteration = 0
        self.step_size = 1
        self.visible: VisibleText | None = None  # the last streamed text-mode call's
        self.reminded = 0  # reminders sent for require_tool_before_final
        self.current = 0  # index in ``wire`` of the turn's own message: never cut
        self.sent = (0, 0)  # the last request's characters and estimated tokens
        self.summary: ChatMessage | None = None
        self.output_retried = False  # the one retry of an answer that missed output_type
        # Parallel input guardrails: their verdict, raced against the first model call.
        self.input_check: asyncio.Future[GuardrailBlockedError | None] | None = None
        # What tools add to the system prompt of every call (a todo list), read afresh.
        self.sections = loop.registry.prompt_sections()

    def _add(self, message: ChatMessage) -> None:
        self.new.append(message)
        self.wire.append(message.to_openai(reasoning=self.loop.config.replay_reasoning))

    async def _checkpoint(self) -> None:
        """Store the step (``on_step``) with the events queued for it: the runner's
        ``on_step`` publishes them in the same call (``TurnEmitter.checkpoint``); what
        is left (no ``on_step``, or one that publishes nothing) goes out now."""
        if self.on_step is not None:
            await self.on_step(self.completed, list(self.new))
        await self.emitter.flush()

    def _tool_still_required(self) -> bool:
        """True when the agent must call a tool first and this turn has called none."""
        return self.loop.config.require_tool_before_final and self.completed == 0

    def _check_stop(self) -> None:
        """Raise before a model or tool call the run may no longer make."""
        if self.cancel is not None and self.cancel.is_set():
            raise RunCancelled
        which = self.meter.exceeded()
        if which is not None:
            raise OverBudget(which)

    # -- endings --------------------------------------------------------------------

    async def _over_budget(self, which: str) -> RunResult:
        error = BudgetExceededError(
            f"the run went over its {which} budget; it was stopped before any further call",
            budget=which,
            usage=dict(self.meter.totals),
            cost=self.meter.cost,
        )
        await self._report(error)
        return self._end(TurnStatus.BUDGET_EXCEEDED, self.loop.config.budget_message, error)

    async def fail(self, error: ReactqError) -> RunResult:
        """End in ERROR: report it (if the bus still works) and return the fallback."""
        await self._report(error)
        return self._end(TurnStatus.ERROR, self.loop.config.error_text(error), error)

    async def _report(self, error: ReactqError) -> None:
        context = {"iteration": self.iteration, "model": self.models.model, **error.details}
        try:
            await self.emitter.emit(
                ErrorEvent, code=error.code, message=error.message or str(error), context=context
            )
        except Exception:  # the bus is what failed; the result still says why
            pass

    def _end(
        self,
        status: TurnStatus,
        text: str,
        error: ReactqError | None = None,
        keep: bool = False,
        response: LLMResponse | None = None,
    ) -> RunResult:
        """``response``: the model's answer the text comes from (its reasoning is kept)."""
        if not keep:
            # Keep the history valid for the next turn: every tool call answered.
            self.new = answered_prefix(self.new)
        fields = provider_fields(response) if response is not None else {}
        self.new.append(ChatMessage(role="assistant", content=text, turn_id=self.turn_id, **fields))
        return RunResult(
            status, text, self.new, self.meter.totals, error, self.meter.cost, summary=self.summary
        )


def provider_fields(response: LLMResponse) -> dict[str, Any]:
    """What an assistant message keeps of the provider's answer beyond text and calls."""
    return {"reasoning": response.reasoning, "extra": response.extra or None}


class OverBudget(Exception):
    """Internal: a budget is spent; ``which`` names it."""

    def __init__(self, which: str) -> None:
        super().__init__(which)
        self.which = which


def answered_prefix(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The longest prefix in which every assistant tool call has its tool result."""
    valid = 0
    pending: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            pending = {c.id for c in message.tool_calls}
        elif message.role == "tool":
            pending.discard(message.tool_call_id or "")
        if not pending:
            valid = index + 1
    return messages[:valid]
