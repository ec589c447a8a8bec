"""Changing a run on purpose (interventions, the approval gate) and watching it (hooks).

Interventions may alter a tool call: ``before_tool`` can deny it or replace its
arguments, ``after_tool`` can append a note to its result. The approval gate
(``tool_gate``) decides every call; anything but a clear "yes" is a denial.
Hooks only observe: whatever they do or raise, the run goes on.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeAlias

from reactq.shared.messages import ToolCall

__all__ = [
    "AfterToolHook",
    "BeforeToolFallback",
    "BeforeToolHook",
    "DenyToolCall",
    "Hooks",
    "Interventions",
    "ReplaceToolArgs",
    "ToolCallInfo",
    "ToolDecision",
    "ToolGate",
    "maybe_await",
]

log = logging.getLogger("reactq.agent")


async def maybe_await(value: Any) -> Any:
    """``value``, awaited if it is awaitable (so hooks may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


@dataclass(frozen=True)
class ToolCallInfo:
    """One tool call as hooks, interventions and the gate see it (a deep copy)."""

    tool: str
    """The tool's name as the model spelled it."""
    args: dict[str, Any]
    """The decoded arguments (a copy: changing it changes nothing)."""
    call_id: str
    """The call's id."""
    session_id: str = ""
    """The session of the run."""
    turn_id: str = ""
    """The turn of the run."""
    iteration: int = 0
    """The model call that asked for it (1-based)."""
    context: Mapping[str, Any] = field(default_factory=dict)
    """The turn's context, as the producer passed it (``submit(..., context=...)``)."""

    @classmethod
    def of(
        cls,
        call: ToolCall,
        args: dict[str, Any],
        session_id: str,
        turn_id: str,
        iteration: int,
        context: Mapping[str, Any] | None = None,
    ) -> ToolCallInfo:
        """A ToolCallInfo with a deep copy of ``args``."""
        return cls(
            call.name, copy.deepcopy(args), call.id, session_id, turn_id, iteration, context or {}
        )


@dataclass(frozen=True)
class DenyToolCall:
    """``before_tool``'s answer: do not run the call; the model reads ``reason``."""

    reason: str = "the call was denied by policy"
    """Why, in words the model can act on."""


@dataclass(frozen=True)
class ReplaceToolArgs:
    """``before_tool``'s answer: run the call with these arguments instead (validated)."""

    args: dict[str, Any] = field(default_factory=dict)
    """The arguments to use."""


class BeforeToolFallback(StrEnum):
    """What happens to a call when ``before_tool`` itself raises."""

    DENY = "deny"
    """Fail closed: the call is denied (the default)."""
    ALLOW = "allow"
    """Fail open: the call runs with the model's arguments."""


BeforeToolHook: TypeAlias = Callable[
    [ToolCallInfo], "DenyToolCall | ReplaceToolArgs | Awaitable[Any] | None"
]
AfterToolHook: TypeAlias = Callable[[ToolCallInfo, str], "str | Awaitable[str | None] | None"]


@dataclass(frozen=True)
class Interventions:
    """Hooks that may change tool calls; sync or async callables."""

    before_tool: BeforeToolHook | None = None
    """Called before each call: return None, ``DenyToolCall`` or ``ReplaceToolArgs``."""
    after_tool: AfterToolHook | None = None
    """Called with each result text: return a note to append to it, or None."""
    before_tool_fallback: BeforeToolFallback = BeforeToolFallback.DENY
    """When ``before_tool`` raises or answers something else: DENY (default) or ALLOW."""

    def __post_init__(self) -> None:
        for name in ("before_tool", "after_tool"):
            hook = getattr(self, name)
            if hook is not None and not callable(hook):
                raise ValueError(f"Interventions.{name} must be callable or None, got {hook!r}")
        object.__setattr__(
            self, "before_tool_fallback", BeforeToolFallback(self.before_tool_fallback)
        )


@dataclass(frozen=True)
class ToolDecision:
    """The approval gate's answer about one call."""

    allow: bool
    """True to run the call."""
    reason: str = ""
    """Why (the model reads it when the call is denied)."""


ToolGate: TypeAlias = Callable[[ToolCallInfo], "ToolDecision | bool | Awaitable[Any]"]
"""An approver: every call passes it; True / ToolDecision(allow=True) runs the call."""


class Hooks:
    """Observe-only callbacks; subclass and override what you need (sync or async).

    A hook that raises is logged and ignored: it never changes or ends the run.
    """

    def on_llm_start(self, *, iteration: int, messages: list[dict[str, Any]]) -> Any:
        """Before each model call (``messages`` is what will be sent)."""

    def on_llm_end(self, *, iteration: int, response: Any, error: BaseException | None) -> Any:
        """After each model call: the ``LLMResponse``, or the error it raised."""

    def on_tool_start(self, call: ToolCallInfo) -> Any:
        """Before a tool runs."""

    def on_tool_end(self, call: ToolCallInfo, *, output: str, ok: bool) -> Any:
        """After a tool ran (or failed): the text the model will read."""


async def call_hook(hooks: Hooks | None, name: str, *args: Any, **kwargs: Any) -> None:
    """Run one observe-only hook, isolating its failures."""
    if hooks is None:
        return
    try:
        await maybe_await(getattr(hooks, name)(*args, **kwargs))
    except Exception:
        log.warning("hook %s of %s raised; ignored", name, type(hooks).__name__, exc_info=True)
