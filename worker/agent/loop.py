"""AgentLoop: the ReAct loop (model -> tools -> model ... -> answer).

The loop talks to the model through an ``LLMClient``, runs tools from a
``Registry``, and reports every step as a typed event through a ``TurnEmitter``.
It never prints, never commits state and never emits ``final`` (the runner
does, after the commit). Nothing escapes ``run`` but ``asyncio.CancelledError``:
provider faults, parser failures, spent budgets and the cancel handle all end
in a ``RunResult`` with a status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reactq.shared.bus import TurnEmitter
from reactq.shared.errors import ReactqError
from reactq.shared.messages import ChatMessage
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.cancel import CancelHandle, CancelSignal
from reactq.worker.agent.executor import ToolExecutor
from reactq.worker.agent.interventions import Hooks, Interventions, ToolGate
from reactq.worker.agent.llm.base import LLMClient, RequestOptions
from reactq.worker.agent.modes import ModeSettings, ToolMode, build_system_prompt, resolve_mode
from reactq.worker.agent.parsers import Parser
from reactq.worker.agent.results import format_tool_result
from reactq.worker.agent.run import Run
from reactq.worker.agent.tools import Registry, ToolContext
from reactq.worker.agent.usage import ModelPrice, check_budget_config

__all__ = [
    "DEFAULT_BUDGET_MESSAGE",
    "DEFAULT_CANCELLED_MESSAGE",
    "DEFAULT_ERROR_FALLBACK_MESSAGE",
    "DEFAULT_FALLBACK_MESSAGE",
    "AgentLoop",
    "RunResult",
    "ToolMode",
    "check_loop_config",
    "format_tool_result",
]

DEFAULT_FALLBACK_MESSAGE = (
    "I could not finish this within the allowed number of steps. "
    "Please try again, perhaps with a narrower request."
)
DEFAULT_ERROR_FALLBACK_MESSAGE = (
    "Sorry, something went wrong while answering. Please try again in a moment."
)
DEFAULT_BUDGET_MESSAGE = (
    "I stopped because this request used up its token or cost budget before I could finish."
)
DEFAULT_CANCELLED_MESSAGE = "The request was cancelled."


@dataclass
class RunResult:
    """What one run of the loop produced."""

    status: TurnStatus
    """COMPLETED, MAX_ITERATIONS, ERROR, BUDGET_EXCEEDED or CANCELLED."""
    text: str
    """The final answer, or the fallback message."""
    messages: list[ChatMessage] = field(default_factory=list)
    """The new messages of this run (not the input), ending with the assistant's answer."""
    usage: dict[str, int] = field(default_factory=dict)
    """Token usage summed over every model call."""
    error: ReactqError | None = None
    """Why it ended in ERROR or BUDGET_EXCEEDED."""
    cost: float | None = None
    """What the run cost, when the loop has a price for its model."""


def check_loop_config(
    *, model: str, max_iterations: int, tool_timeout: float | None, tool_mode: ToolMode | str
) -> ToolMode:
    """Raise ValueError naming the bad knob; return the tool mode as a ToolMode."""
    if not isinstance(model, str) or not model.strip():
        raise ValueError("model must be a non-empty model name (or set REACTQ_MODEL)")
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int):
        raise ValueError(f"max_iterations must be an int >= 1, got {max_iterations!r}")
    if max_iterations < 1:
        raise ValueError(f"max_iterations must be >= 1, got {max_iterations}")
    if tool_timeout is not None and not tool_timeout > 0:
        raise ValueError(f"tool_timeout must be > 0 seconds or None, got {tool_timeout!r}")
    return resolve_mode(tool_mode).mode


def _positive_or_none(name: str, value: float | None) -> None:
    if value is not None and (isinstance(value, bool) or not value > 0):
        raise ValueError(f"{name} must be > 0 or None, got {value!r}")


class AgentLoop:
    """Runs the ReAct loop for one agent configuration (reusable, concurrency-safe).

    Every knob is checked here; a knob that belongs to another tool mode raises
    ValueError naming the conflict and the fix.
    """

    def __init__(
        self,
        llm: LLMClient,
        registry: Registry | None = None,
        *,
        model: str,
        system_prompt: str = "",
        max_iterations: int = 10,
        fallback_message: str = DEFAULT_FALLBACK_MESSAGE,
        error_fallback_message: str = DEFAULT_ERROR_FALLBACK_MESSAGE,
        budget_message: str = DEFAULT_BUDGET_MESSAGE,
        cancelled_message: str = DEFAULT_CANCELLED_MESSAGE,
        tool_timeout: float | None = 60.0,
        tool_mode: ToolMode | str = ToolMode.NATIVE,
        parser: Parser | None = None,
        output_format: str | None = None,
        tool_message_role: str | None = None,
        retry_reminder: str | None = None,
        stream: bool = False,
        delta_interval: float = 0.05,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        reasoning_effort: str | None = None,
        repeat_call_limit: int | None = 3,
        wrap_up: bool = False,
        context_budget: int | None = None,
        max_total_tokens: int | None = None,
        max_cost: float | None = None,
        prices: Mapping[str, ModelPrice] | None = None,
        interventions: Interventions | None = None,
        hooks: Hooks | None = None,
        tool_gate: ToolGate | None = None,
        tool_gate_timeout: float | None = 300.0,
    ) -> None:
        check_loop_config(
            model=model,
            max_iterations=max_iterations,
            tool_timeout=tool_timeout,
            tool_mode="native",
        )
        self.mode: ModeSettings = resolve_mode(
            tool_mode,
            parser=parser,
            output_format=output_format,
            tool_message_role=tool_message_role,
            retry_reminder=retry_reminder,
        )
        self.options = RequestOptions(
            temperature=temperature, max_tokens=max_tokens, reasoning_effort=reasoning_effort
        )
        check_budget_config(max_total_tokens, max_cost, prices, model)
        if not delta_interval >= 0:
            raise ValueError(f"delta_interval must be >= 0 seconds, got {delta_interval!r}")
        limit = repeat_call_limit
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ValueError(f"repeat_call_limit must be an int >= 1 or None, got {limit!r}")
        _positive_or_none("context_budget", context_budget)
        _positive_or_none("tool_gate_timeout", tool_gate_timeout)
        if interventions is not None and not isinstance(interventions, Interventions):
            raise ValueError(f"interventions must be an Interventions, got {interventions!r}")
        if hooks is not None and not isinstance(hooks, Hooks):
            raise ValueError(f"hooks must be a Hooks (subclass) instance, got {hooks!r}")
        if tool_gate is not None and not callable(tool_gate):
            raise ValueError(f"tool_gate must be callable or None, got {tool_gate!r}")
        for name, text in (
            ("fallback_message", fallback_message),
            ("error_fallback_message", error_fallback_message),
            ("budget_message", budget_message),
            ("cancelled_message", cancelled_message),
        ):
            if not isinstance(text, str) or not text:
                raise ValueError(f"{name} must be a non-empty string")
        self.tool_mode = self.mode.mode
        self.llm = llm
        self.registry = registry if registry is not None else Registry()
        self.model = model
        self.system_prompt = system_prompt
        self.max_iterations = max_iterations
        self.fallback_message = fallback_message
        self.error_fallback_message = error_fallback_message
        self.budget_message = budget_message
        self.cancelled_message = cancelled_message
        self.tool_timeout = tool_timeout
        self.stream = stream
        self.delta_interval = delta_interval
        self.wrap_up = wrap_up
        self.context_budget = context_budget
        self.max_total_tokens = max_total_tokens
        self.max_cost = max_cost
        self.price = (prices or {}).get(model)
        self.hooks = hooks
        self.executor = ToolExecutor(
            self.registry,
            tool_timeout=tool_timeout,
            interventions=interventions,
            hooks=hooks,
            tool_gate=tool_gate,
            tool_gate_timeout=tool_gate_timeout,
            repeat_call_limit=repeat_call_limit,
        )
        # Built once: every run sends the same system prompt and tool list.
        prompt = build_system_prompt(system_prompt, self.mode, self.registry)
        self.prefix: tuple[dict[str, Any], ...] = (
            ({"role": "system", "content": prompt},) if prompt else ()
        )
        self.tools: list[dict[str, Any]] | None = (
            (self.registry.openai_tools() or None) if self.mode.native else None
        )

    async def run(
        self,
        messages: list[ChatMessage],
        emitter: TurnEmitter,
        *,
        context: ToolContext | None = None,
        cancel: CancelHandle | None = None,
    ) -> RunResult:
        """Run the loop on ``messages`` (history plus the new user message).

        ``cancel`` (an ``asyncio.Event`` or a zero-argument callable returning
        True) stops the run between steps and mid-call (closing a streaming
        generation); the result's status is then CANCELLED.
        """
        signal = CancelSignal(cancel) if cancel is not None else None
        run = Run(self, emitter, context, signal)
        try:
            return await run.execute(messages)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the bus, a bug: the turn still ends cleanly
            error = (
                exc
                if isinstance(exc, ReactqError)
                else ReactqError(f"the agent loop failed: {type(exc).__name__}: {exc}")
            )
            return await run.fail(error)
