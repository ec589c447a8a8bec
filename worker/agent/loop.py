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
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from reactq.shared.bus import TurnEmitter
from reactq.shared.errors import ReactqError, StaleLeaseError, TurnCommittedError
from reactq.shared.messages import ChatMessage
from reactq.shared.protocol.approvals import Decision
from reactq.shared.redis_client import REDIS_OUTAGE
from reactq.worker.agent.cancel import CancelHandle, CancelSignal
from reactq.worker.agent.config import (
    DEFAULT_BUDGET_MESSAGE,
    DEFAULT_CANCELLED_MESSAGE,
    DEFAULT_ERROR_FALLBACK_MESSAGE,
    DEFAULT_FALLBACK_MESSAGE,
    DEFAULT_MODEL,
    LoopConfig,
)
from reactq.worker.agent.executor import ToolExecutor
from reactq.worker.agent.interventions import maybe_await
from reactq.worker.agent.llm.base import LLMClient, RequestOptions
from reactq.worker.agent.llm.ratelimit import RateLimiter
from reactq.worker.agent.modes import ModeSettings, ToolMode, build_system_prompt
from reactq.worker.agent.output import OutputSpec
from reactq.worker.agent.results import format_tool_result
from reactq.worker.agent.run import Run
from reactq.worker.agent.run_state import OnStep, RunResult
from reactq.worker.agent.suspend import Suspended
from reactq.worker.agent.tools import Registry, ToolContext
from reactq.worker.agent.usage import check_budget_config
from reactq.worker.agent.windows import TokenCounter

__all__ = [
    "DEFAULT_BUDGET_MESSAGE",
    "DEFAULT_CANCELLED_MESSAGE",
    "DEFAULT_ERROR_FALLBACK_MESSAGE",
    "DEFAULT_FALLBACK_MESSAGE",
    "DEFAULT_MODEL",
    "AgentLoop",
    "LoopConfig",
    "RunResult",
    "ToolMode",
    "format_tool_result",
]


class AgentLoop:
    """Runs the ReAct loop for one ``LoopConfig`` (reusable, concurrency-safe).

    ``registry`` holds the tools (none when None); ``config`` every knob
    (``LoopConfig()`` when None). ``model`` is the config's, else gpt-4o-mini. The
    tool list and system prompt are fixed here, once. ``fallback_llms`` holds a
    client per ``config.fallback_models`` entry (None: ``llm`` for each); ``limiters``
    a ``RateLimiter`` (or None) per model, the agent's first (``RateLimiters.for_agent``).
    """

    def __init__(
        self,
        llm: LLMClient,
        registry: Registry | None = None,
        config: LoopConfig | None = None,
        *,
        fallback_llms: Sequence[LLMClient] | None = None,
        version: str | None = None,
        limiters: Sequence[RateLimiter | None] | None = None,
    ) -> None:
        if config is None:
            config = LoopConfig()
        elif not isinstance(config, LoopConfig):
            raise ValueError(f"config must be a LoopConfig, got {config!r}")
        self.config = config
        self.llm = llm
        self.registry = registry if registry is not None else Registry()
        if config.require_tool_before_final and not len(self.registry):
            raise ValueError(
                "require_tool_before_final=True needs a tool to call: give the agent tools, "
                "or drop require_tool_before_final"
            )
        self.model: str = config.model or DEFAULT_MODEL
        fallbacks = [m.name for m in config.fallbacks]
        clients = list(fallback_llms) if fallback_llms is not None else [llm] * len(fallbacks)
        if len(clients) != len(fallbacks):
            raise ValueError(
                f"fallback_llms has {len(clients)} clients for {len(fallbacks)} fallback_models: "
                "give one per fallback model, or None to use llm for each"
            )
        self.models: tuple[tuple[str, LLMClient], ...] = (
            (self.model, llm),
            *zip(fallbacks, clients, strict=True),
        )
        if limiters is not None and len(limiters) != len(self.models):
            raise ValueError(
                f"limiters has {len(limiters)} entries for {len(self.models)} models: give one "
                "per model (the agent's, then each fallback's; None for no limit)"
            )
        self.limiters: tuple[RateLimiter | None, ...] = (
            tuple(limiters) if limiters is not None else (None,) * len(self.models)
        )
        # A config without a model could not check max_cost's price; the loop has them all.
        for name, _ in self.models:
            check_budget_config(config.max_total_tokens, config.max_cost, config.prices, name)
            check_budget_config(
                config.session_max_tokens,
                config.session_max_cost,
                config.prices,
                name,
                ("session_max_tokens", "session_max_cost"),
            )
        self.version = version
        """A hash of the definition this loop runs (``Agent.config_version``), if known."""
        self.mode: ModeSettings = config.mode_settings()
        self.options: RequestOptions = config.request_options()
        self.output: OutputSpec | None = config.output_spec()
        """The final answer's schema (``output_type``), or None for a text answer."""
        if self.output is not None and not self.mode.native:
            # The text modes ask for the schema in their format section.
            self.mode = dataclasses.replace(
                self.mode, output_format=self.output.output_format(self.mode)
            )
        prices = config.prices or {}
        self.prices = {name: prices[name] for name, _ in self.models if name in prices}
        self.price = self.prices.get(self.model)
        self.executor = ToolExecutor(self.registry, config)
        self.counter = TokenCounter()
        """Counts requests before they are sent; calibrated by every call's usage."""
        # Built once: every run sends the same tool list, and the same system prompt
        # unless it is a function of the turn (then ``prefix_for`` builds it per run).
        prompt = config.system_prompt
        self.prefix: tuple[dict[str, Any], ...] = (
            self._prefix(prompt) if isinstance(prompt, str) else ()
        )
        self.tools: list[dict[str, Any]] | None = (
            ([*self.registry.openai_tools(), *(t.openai() for t in config.client_tools)] or None)
            if self.mode.native
            else None
        )
        self.client_tools: frozenset[str] = frozenset(t.name for t in config.client_tools)
        """The names of the turn's client tools: a call to one waits for the caller."""

    def with_config(self, config: LoopConfig) -> AgentLoop:
        """A loop like this one (clients, tools, limiters, version) running ``config``:
        one turn's overrides applied (ValueError names a knob the config refuses)."""
        return AgentLoop(
            self.llm,
            self.registry,
            config,
            fallback_llms=[client for _, client in self.models[1:]],
            version=self.version,
            limiters=self.limiters,
        )

    def _prefix(self, prompt: str) -> tuple[dict[str, Any], ...]:
        text = build_system_prompt(prompt, self.mode, self.registry)
        return ({"role": "system", "content": text},) if text else ()

    async def prefix_for(self, context: ToolContext) -> tuple[dict[str, Any], ...]:
        """The messages sent before the conversation in this turn: the system prompt,
        called with the turn's ``context`` when it is a function."""
        prompt = self.config.system_prompt
        if isinstance(prompt, str):
            return self.prefix
        text = await maybe_await(prompt(context))
        if not isinstance(text, str):
            raise ReactqError(
                f"the system prompt function returned {type(text).__name__}, not a string"
            )
        return self._prefix(text)

    async def run(
        self,
        messages: list[ChatMessage],
        emitter: TurnEmitter,
        *,
        context: ToolContext | None = None,
        cancel: CancelHandle | None = None,
        resume: list[ChatMessage] | None = None,
        on_step: OnStep | None = None,
        decisions: Mapping[str, Decision] | None = None,
    ) -> RunResult:
        """Run the loop on ``messages`` (history plus the new user message).

        ``cancel`` (an ``asyncio.Event`` or a zero-argument callable returning
        True) stops the run between steps and mid-call (closing a streaming
        generation); the result's status is then CANCELLED.

        ``resume`` is the turn's checkpointed steps (from an earlier attempt): the
        run goes on after them, first running the calls of the last model reply
        that have no result. ``on_step(step, messages)`` is awaited with every
        checkpoint: the reply of a step before its tools run, and the step once
        its results are in (``step`` counts the completed steps; ``messages`` are
        all of the run's new messages so far). A StaleLeaseError or
        TurnCommittedError from it ends the run by propagating, and so does a Redis
        outage (``REDIS_OUTAGE``: the turn is not over, it runs again).

        ``decisions`` (call id -> a person's Decision) says the run may wait for
        people: a call that needs approval and has no decision ends the run with
        ``AwaitingApproval`` (its step checkpointed); an approved call runs, a denied
        one is a tool error carrying the reason. Without it (None), such calls are
        denied: this run cannot wait.
        """
        signal = CancelSignal(cancel) if cancel is not None else None
        run = Run(self, emitter, context, signal, on_step, decisions)
        try:
            result = await run.execute(messages, resume or [])
            if not emitter.final_follows:
                await emitter.flush()  # nobody emits after us: publish what waits
            return result
        except (asyncio.CancelledError, StaleLeaseError, TurnCommittedError, Suspended):
            raise
        except REDIS_OUTAGE:
            raise  # the pool runs the turn again from its checkpoint: no error result
        except Exception as exc:  # the bus, a bug: the turn still ends cleanly
            error = (
                exc
                if isinstance(exc, ReactqError)
                else ReactqError(f"the agent loop failed: {type(exc).__name__}: {exc}")
            )
            return await run.fail(error)
