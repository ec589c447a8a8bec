"""LoopConfig: every knob of the ReAct loop, declared once.

``Agent`` holds one (its keyword arguments build it) and ``AgentLoop`` takes
one, so a knob added here can be set from an ``Agent`` with no other change.
Everything is checked at construction: a bad value raises ValueError naming
the knob, and a knob that belongs to another tool mode names the conflict and
the fix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reactq.shared.client_tools import ClientTool
from reactq.shared.errors import ReactqError
from reactq.shared.turn_inputs import OVERRIDABLE
from reactq.worker.agent.context_policy import ContextPolicy
from reactq.worker.agent.delegation import DEFAULT_MAX_DELEGATION_DEPTH, Subagent, as_subagents
from reactq.worker.agent.guardrails import Guardrail, GuardrailCheck, as_guardrails
from reactq.worker.agent.interventions import Hooks, Interventions, ToolGate
from reactq.worker.agent.llm.base import RequestOptions
from reactq.worker.agent.llm.endpoint import Model, as_model
from reactq.worker.agent.modes import ModeSettings, ToolMode, resolve_mode
from reactq.worker.agent.output import OutputSpec, OutputType
from reactq.worker.agent.parsers import Parser
from reactq.worker.agent.usage import ModelPrice, check_budget_config

if TYPE_CHECKING:
    from reactq.worker.agent.tools import ToolContext

ApprovalPolicy = Callable[[str, dict[str, Any], "ToolContext"], bool]
"""``approval(tool_name, arguments, context) -> bool``: True when the call must wait
for a person's decision."""

PromptFunction = Callable[["ToolContext"], "str | Awaitable[str]"]
"""``system_prompt(turn) -> str`` (sync or async): the system prompt of one turn, from
its ``ToolContext`` (``turn.context``, ``turn.metadata``, ``turn.session_id``)."""

__all__ = [
    "DEFAULT_BUDGET_MESSAGE",
    "DEFAULT_CANCELLED_MESSAGE",
    "DEFAULT_ERROR_FALLBACK_MESSAGE",
    "DEFAULT_ERROR_PERMANENT_MESSAGE",
    "DEFAULT_FALLBACK_MESSAGE",
    "DEFAULT_MODEL",
    "ApprovalPolicy",
    "LoopConfig",
    "PromptFunction",
]

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_FALLBACK_MESSAGE = (
    "I could not finish this within the allowed number of steps. "
    "Please try again, perhaps with a narrower request."
)
DEFAULT_ERROR_FALLBACK_MESSAGE = (
    "Sorry, something went wrong while answering. Please try again in a moment."
)
DEFAULT_ERROR_PERMANENT_MESSAGE = (
    "Sorry, something went wrong while answering, and trying again will not help until it is fixed."
)
DEFAULT_BUDGET_MESSAGE = (
    "I stopped because this request used up its token or cost budget before I could finish."
)
DEFAULT_CANCELLED_MESSAGE = "The request was cancelled."
DEFAULT_CONTEXT_POLICY = ContextPolicy()


@dataclass(frozen=True, kw_only=True)
class LoopConfig:
    """The ReAct loop's knobs, validated at construction (ValueError names the knob)."""

    model: str | None = None
    """Model name; None: the settings' model (REACTQ_MODEL) for an Agent, else gpt-4o-mini."""
    fallback_models: Sequence[Model | str] = ()
    """Models a turn moves to, in order, when the current one fails (names or ``Model``s)."""
    system_prompt: str | PromptFunction = ""
    """Instructions sent first in every request, or a function of the turn returning them."""
    tool_mode: ToolMode | str = ToolMode.NATIVE
    """How the model calls tools (a ToolMode or its value; stored as a ToolMode)."""
    parser: Parser | None = None
    """Text-mode answer parser; None: the mode's own (refused under NATIVE)."""
    output_format: str | None = None
    """Answer format a text mode teaches in the system prompt; None: the mode's own."""
    tool_message_role: str | None = None
    """The role tool results go back in (``"user"`` fits JSON/PROSE); None: the mode's own."""
    retry_reminder: str | None = None
    """Message before the one retry of an empty or unparseable answer (``{error}`` is filled)."""
    output_type: OutputType | None = None
    """The final answer's schema (a pydantic model class or a JSON Schema dict); None: text."""
    max_iterations: int = 10
    """Model calls per turn before it ends with ``fallback_message``."""
    tool_timeout: float | None = 60.0
    """Seconds a tool may run unless the tool sets its own timeout; None for no limit."""
    max_parallel_tools: int = 8
    """Read-only calls of one step that may run at once (the rest wait for a slot)."""
    require_tool_before_final: bool = False
    """Refuse a final answer until the turn called a tool (the model is reminded twice)."""
    fallback_message: str = DEFAULT_FALLBACK_MESSAGE
    """The answer when the iteration cap is hit."""
    error_fallback_message: str = DEFAULT_ERROR_FALLBACK_MESSAGE
    """The answer when the turn fails (left as it is: a fitting one, ``error_text``)."""
    budget_message: str = DEFAULT_BUDGET_MESSAGE
    """The answer when the token or cost budget is spent."""
    cancelled_message: str = DEFAULT_CANCELLED_MESSAGE
    """The answer when the turn is cancelled."""
    stream: bool = False
    """Stream the model's output as ``delta`` events (the answer is assembled before use)."""
    delta_interval: float = 0.05
    """Seconds streamed text is gathered into one ``delta`` event (0: one per piece)."""
    temperature: float | None = 0.0
    """Sampling temperature in [0, 2]; None leaves it out of the request."""
    max_tokens: int | None = None
    """Output token cap per model call (max_completion_tokens for gpt-5.x / o-series)."""
    reasoning_effort: str | None = None
    """Provider reasoning level ("low", "medium", "high"); None leaves it out."""
    stop_sequences: Sequence[str] | None = None
    """Text ending a model call (at most 4); None: the mode's own (JSON/PROSE), () for none."""
    seed: int | None = None
    """Sampling seed sent with every call, for providers that honour it; None leaves it out."""
    replay_reasoning: bool = True
    """Send the model's reasoning back with its tool calls; False for providers refusing it."""
    repeat_call_limit: int | None = 3
    """Identical calls allowed before the result carries a nudge; None disables."""
    wrap_up: bool = False
    """At the iteration cap, let the model summarise in one tool-less call."""
    context_budget: int | None = None
    """Characters of context to keep under by shrinking old tool results; None: no limit."""
    context_window: int | None = None
    """Tokens the model reads at most; None: the built-in table's for the model (128k unknown)."""
    context_policy: ContextPolicy | None = DEFAULT_CONTEXT_POLICY
    """Shrinks, summarises and checks each request against the window; None turns it off."""
    max_total_tokens: int | None = None
    """Token budget of one turn (status budget_exceeded when spent)."""
    max_cost: float | None = None
    """Cost budget of one turn (needs ``prices`` for the model)."""
    session_max_tokens: int | None = None
    """Token budget of a session's committed turns; once spent, turns are refused."""
    session_max_cost: float | None = None
    """Cost budget of a session's committed turns (needs ``prices`` for the model)."""
    overridable: Collection[str] = frozenset()
    """Knobs a turn may override (``submit(..., overrides=...)``), from ``OVERRIDABLE``."""
    prices: Mapping[str, ModelPrice] | None = None
    """Price per model, for cost in usage events and ``max_cost``."""
    interventions: Interventions | None = None
    """before_tool / after_tool hooks that may change tool calls."""
    hooks: Hooks | None = None
    """Observe-only callbacks."""
    tool_gate: ToolGate | None = None
    """Approver every tool call passes; no decision is a denial."""
    tool_gate_timeout: float | None = 300.0
    """Seconds the tool gate may take to decide (then the call is denied); None: no limit."""
    approval: ApprovalPolicy | None = None
    """``approval(tool, arguments, context) -> bool``: True makes the call wait for a person."""
    input_guardrails: Sequence[Guardrail | GuardrailCheck] = ()
    """Checks on the user message; a block ends the turn (status blocked) unanswered."""
    output_guardrails: Sequence[Guardrail | GuardrailCheck] = ()
    """Checks on the final answer; a block replaces it with the guardrail's refusal."""
    guardrails_parallel: bool = False
    """Run the input guardrails beside the first model call (a block cancels it)."""
    subagents: Sequence[str | Subagent] = ()
    """Agents it may hand tasks to (``delegate``, ``delegate_parallel``) as child turns."""
    max_parallel: int = 4
    """Tasks one ``delegate_parallel`` call may hand out at once."""
    max_delegation_depth: int = DEFAULT_MAX_DELEGATION_DEPTH
    """How deep a chain of delegations may go below the turn a person submitted."""
    client_tools: Sequence[ClientTool] = ()
    """Tools the turn's caller runs (per turn): a call to one waits for their result."""

    def __post_init__(self) -> None:
        model = self.model
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise ValueError(
                f"model must be a non-empty model name, or None for REACTQ_MODEL, got {model!r}"
            )
        if isinstance(self.fallback_models, str) or not isinstance(self.fallback_models, Sequence):
            raise ValueError(
                f"fallback_models must be a list of model names or Models, "
                f"got {self.fallback_models!r}"
            )
        object.__setattr__(
            self, "fallback_models", tuple(as_model(m) for m in self.fallback_models)
        )
        if not isinstance(self.system_prompt, str) and not callable(self.system_prompt):
            raise ValueError(
                f"system_prompt must be a string or a function of the turn, "
                f"got {self.system_prompt!r}"
            )
        object.__setattr__(self, "overridable", check_overridable(self.overridable))
        iterations = self.max_iterations
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ValueError(f"max_iterations must be an int >= 1, got {iterations!r}")
        _positive_or_none("tool_timeout", self.tool_timeout, "seconds")
        parallel = self.max_parallel_tools
        if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
            raise ValueError(f"max_parallel_tools must be an int >= 1, got {parallel!r}")
        # The mode's knobs are checked together: each one's meaning depends on the mode.
        object.__setattr__(self, "tool_mode", self.mode_settings().mode)
        self.request_options()  # resolves output_type too
        # With no model yet, its price is checked when the loop is built for one.
        for name in (model, *(m.name for m in self.fallbacks)):
            check_budget_config(self.max_total_tokens, self.max_cost, self.prices, name)
            check_budget_config(
                self.session_max_tokens,
                self.session_max_cost,
                self.prices,
                name,
                ("session_max_tokens", "session_max_cost"),
            )
        object.__setattr__(self, "subagents", as_subagents(self.subagents))
        for knob in ("max_parallel", "max_delegation_depth"):
            value = getattr(self, knob)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{knob} must be an int >= 1, got {value!r}")
        for knob in ("input_guardrails", "output_guardrails"):
            object.__setattr__(self, knob, as_guardrails(knob, getattr(self, knob)))
        if self.guardrails_parallel is True and not self.input_guardrails:
            raise ValueError(
                "guardrails_parallel=True runs input guardrails beside the first model call, "
                "and there are none: give input_guardrails, or drop guardrails_parallel"
            )
        for name in (
            "stream",
            "wrap_up",
            "require_tool_before_final",
            "replay_reasoning",
            "guardrails_parallel",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        interval = self.delta_interval
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval < 0:
            raise ValueError(f"delta_interval must be >= 0 seconds, got {interval!r}")
        limit = self.repeat_call_limit
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ValueError(f"repeat_call_limit must be an int >= 1 or None, got {limit!r}")
        _positive_or_none("context_budget", self.context_budget, "characters")
        window = self.context_window
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window < 256
        ):
            raise ValueError(f"context_window must be an int >= 256 tokens or None, got {window!r}")
        if self.context_policy is not None and not isinstance(self.context_policy, ContextPolicy):
            raise ValueError(
                f"context_policy must be a ContextPolicy or None, got {self.context_policy!r}"
            )
        _positive_or_none("tool_gate_timeout", self.tool_gate_timeout, "seconds")
        if self.interventions is not None and not isinstance(self.interventions, Interventions):
            raise ValueError(f"interventions must be an Interventions, got {self.interventions!r}")
        if self.hooks is not None and not isinstance(self.hooks, Hooks):
            raise ValueError(f"hooks must be a Hooks (subclass) instance, got {self.hooks!r}")
        if self.approval is not None and not callable(self.approval):
            raise ValueError(f"approval must be callable or None, got {self.approval!r}")
        if self.tool_gate is not None and not callable(self.tool_gate):
            raise ValueError(f"tool_gate must be callable or None, got {self.tool_gate!r}")
        for name in (
            "fallback_message",
            "error_fallback_message",
            "budget_message",
            "cancelled_message",
        ):
            text = getattr(self, name)
            if not isinstance(text, str) or not text:
                raise ValueError(f"{name} must be a non-empty string, got {text!r}")

    def error_text(self, error: ReactqError) -> str:
        """The final's text for a turn that failed with ``error``: the agent's
        ``error_fallback_message``, or, left at its default, one that does not invite a
        retry when the error's code says a retry fails the same way."""
        if self.error_fallback_message == DEFAULT_ERROR_FALLBACK_MESSAGE and not error.retryable:
            return DEFAULT_ERROR_PERMANENT_MESSAGE
        return self.error_fallback_message

    @property
    def fallbacks(self) -> tuple[Model, ...]:
        """``fallback_models`` as Models, in order."""
        return tuple(as_model(m) for m in self.fallback_models)

    def mode_settings(self) -> ModeSettings:
        """The tool mode with its parser, output format, role and reminder resolved."""
        return resolve_mode(
            self.tool_mode,
            parser=self.parser,
            output_format=self.output_format,
            tool_message_role=self.tool_message_role,
            retry_reminder=self.retry_reminder,
        )

    def output_spec(self) -> OutputSpec | None:
        """``output_type`` resolved (None without one); ValueError when it is not a model
        class or an object schema."""
        return OutputSpec.of(self.output_type) if self.output_type is not None else None

    def request_options(self) -> RequestOptions:
        """The request parameters every model call carries (under NATIVE, the
        ``response_format`` of the ``output_type``)."""
        spec = self.output_spec()
        native = self.tool_mode == ToolMode.NATIVE
        stop = self.stop_sequences
        if isinstance(stop, str) or not (stop is None or isinstance(stop, Sequence)):
            raise ValueError(
                f"stop_sequences must be a list of strings, or None for the mode's own, "
                f"got {stop!r}"
            )
        return RequestOptions(
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            reasoning_effort=self.reasoning_effort,
            response_format=spec.response_format() if spec is not None and native else None,
            stop=tuple(stop) if stop is not None else self.mode_settings().stop,
            seed=self.seed,
        )


def check_overridable(names: object) -> frozenset[str]:
    """``overridable`` as a frozenset, or ValueError naming a knob no turn may change."""
    if isinstance(names, str) or not isinstance(names, Collection):
        raise ValueError(f"overridable must be a set of knob names, got {names!r}")
    unknown = sorted(str(n) for n in names if n not in OVERRIDABLE)
    if unknown:
        raise ValueError(
            f"overridable: {unknown[0]!r} cannot be overridden per turn; choose from "
            f"{', '.join(sorted(OVERRIDABLE))}"
        )
    return frozenset(names)


def _positive_or_none(name: str, value: Any, unit: str) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
    ):
        raise ValueError(f"{name} must be > 0 {unit} or None, got {value!r}")
