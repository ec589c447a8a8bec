"""``Agent``: one agent's whole configuration in one object, and loading agents.

A worker hosts the agents named by ``--agents module[:attr]``; each names a
module attribute holding an ``Agent`` (or a list of them)::

    # examples/weather.py
    agent = Agent(name="weather", system_prompt="...", tools=[get_weather])
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reactq.shared.errors import ConfigError, SkillError
from reactq.worker.agent.interventions import Hooks, Interventions, ToolGate
from reactq.worker.agent.llm.base import LLMClient
from reactq.worker.agent.llm.openai_client import OpenAICompatibleClient
from reactq.worker.agent.llm.scripted import ScriptedLLM
from reactq.worker.agent.loop import (
    DEFAULT_ERROR_FALLBACK_MESSAGE,
    DEFAULT_FALLBACK_MESSAGE,
    AgentLoop,
    ToolMode,
    check_loop_config,
)
from reactq.worker.agent.mcp import MCPClient, MCPProvider, providers_of
from reactq.worker.agent.skills import SkillSet
from reactq.worker.agent.tools import Registry, Tool, tool
from reactq.worker.agent.usage import ModelPrice

__all__ = ["DEFAULT_MODEL", "Agent", "AgentConfigError", "load_agents"]

DEFAULT_MODEL = "gpt-4o-mini"
AGENT_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class AgentConfigError(ConfigError, ValueError):
    """An Agent definition is invalid (a ConfigError that is also a ValueError)."""


@dataclass(frozen=True, eq=False)
class Agent:
    """One agent: its name, model, prompt, tools and the loop's knobs."""

    name: str
    """Unique name producers address (1-64 of [A-Za-z0-9_-]); also its queue's suffix."""
    model: str | None = None
    """Model name; None means REACTQ_MODEL, else gpt-4o-mini (resolved at build)."""
    system_prompt: str = ""
    """Instructions prepended to every request."""
    tools: Sequence[Tool | Callable[..., Any]] = field(default_factory=tuple)
    """Tools it may call (plain functions are wrapped with ``@tool``)."""
    tool_mode: ToolMode = ToolMode.NATIVE
    """How the model calls tools."""
    max_iterations: int = 10
    """Model calls per turn before it ends with ``fallback_message``."""
    tool_timeout: float | None = 60.0
    """Seconds a tool may run unless the tool sets its own timeout; None for no limit."""
    fallback_message: str = DEFAULT_FALLBACK_MESSAGE
    """The answer when the iteration cap is hit."""
    error_fallback_message: str = DEFAULT_ERROR_FALLBACK_MESSAGE
    """The answer when the turn fails."""
    base_url: str | None = None
    """The OpenAI-compatible endpoint; None means OPENAI_BASE_URL (else OpenAI)."""
    api_key: str | None = field(default=None, repr=False)
    """Its key; None means OPENAI_API_KEY. Never shown in repr."""
    stream: bool = False
    """Stream the model's output as ``delta`` events (the answer is assembled before use)."""
    tool_message_role: str | None = None
    """The role tool results go back in (``"user"`` fits JSON/PROSE; None: the mode's own)."""
    temperature: float | None = 0.0
    """Sampling temperature in [0, 2]; None leaves it out of the request."""
    max_tokens: int | None = None
    """Output token cap per model call (max_completion_tokens for gpt-5.x / o-series)."""
    reasoning_effort: str | None = None
    """Provider reasoning level ("low", "medium", "high"); None leaves it out."""
    repeat_call_limit: int | None = 3
    """Identical calls allowed before the result carries a nudge; None disables."""
    wrap_up: bool = False
    """At the iteration cap, let the model summarise in one tool-less call."""
    context_budget: int | None = None
    """Characters of context to keep under by shrinking old tool results; None: no limit."""
    max_total_tokens: int | None = None
    """Token budget of one turn (status budget_exceeded when spent)."""
    max_cost: float | None = None
    """Cost budget of one turn (needs ``prices`` for the model)."""
    prices: Mapping[str, ModelPrice] | None = None
    """Price per model, for cost in usage events and ``max_cost``."""
    interventions: Interventions | None = None
    """before_tool / after_tool hooks that may change tool calls."""
    hooks: Hooks | None = None
    """Observe-only callbacks."""
    tool_gate: ToolGate | None = None
    """Approver every tool call passes; no decision is a denial."""
    mcp_servers: Sequence[MCPProvider | MCPClient] = field(default_factory=tuple)
    """MCP servers whose tools it may call (an MCPProvider sets prefix / allow / block)."""
    skills_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None
    """Directory (or directories) of skills, ``<name>/SKILL.md``, the model may load."""
    skills: SkillSet = field(init=False, repr=False, default_factory=SkillSet)
    """The skills found in ``skills_dir`` (discovered at construction; empty without one)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not AGENT_NAME_RE.match(self.name):
            raise AgentConfigError(
                f"agent name {self.name!r} is invalid: use 1-64 characters from [A-Za-z0-9_-]"
            )
        if isinstance(self.tools, str | bytes) or not isinstance(self.tools, Sequence):
            raise AgentConfigError(f"agent {self.name!r}: tools must be a list of tools")
        try:
            skills = SkillSet.from_paths(self.skills_dir) if self.skills_dir is not None else None
        except SkillError as exc:
            raise AgentConfigError(f"agent {self.name!r}: {exc.message}") from None
        if skills is not None:
            object.__setattr__(self, "skills", skills)
        try:
            if isinstance(self.mcp_servers, str | bytes) or not isinstance(
                self.mcp_servers, Sequence
            ):
                raise ValueError("mcp_servers must be a list of MCPClient or MCPProvider")
            servers = providers_of(self.mcp_servers)
            wrapped = tuple(t if isinstance(t, Tool) else tool(t) for t in self.tools)
            Registry(wrapped)  # refuses duplicate names
            mode = check_loop_config(
                model=self.model if self.model is not None else DEFAULT_MODEL,
                max_iterations=self.max_iterations,
                tool_timeout=self.tool_timeout,
                tool_mode=self.tool_mode,
            )
            # Every other knob is checked by building a loop once, here, not at the first turn.
            self._loop_for(ScriptedLLM([]), self._with_skills(Registry(wrapped)), mode)
        except ValueError as exc:
            raise AgentConfigError(f"agent {self.name!r}: {exc}") from None
        object.__setattr__(self, "tools", wrapped)
        object.__setattr__(self, "mcp_servers", servers)
        object.__setattr__(self, "tool_mode", mode)

    def resolved_model(self) -> str:
        """The model to use: this agent's, else REACTQ_MODEL, else gpt-4o-mini."""
        return self.model or os.environ.get("REACTQ_MODEL") or DEFAULT_MODEL

    def registry(self) -> Registry:
        """A fresh Registry of this agent's tools (and ``load_skill`` when it has skills).

        MCP tools are not in it: ``MCPManager.start`` attaches them on a running loop.
        """
        return self._with_skills(Registry(self.tools))

    def build_loop(self, llm: LLMClient, registry: Registry | None = None) -> AgentLoop:
        """The AgentLoop for this agent, talking to ``llm``.

        ``registry`` defaults to ``self.registry()``; pass one that MCP tools were
        attached to (the loop fixes its tool list when it is built).
        """
        tools = registry if registry is not None else self.registry()
        return self._loop_for(llm, tools, self.tool_mode, self.resolved_model())

    def _with_skills(self, registry: Registry) -> Registry:
        if len(self.skills):
            registry.register(self.skills.tool())
        return registry

    def _loop_for(
        self, llm: LLMClient, registry: Registry, mode: ToolMode, model: str | None = None
    ) -> AgentLoop:
        return AgentLoop(
            llm,
            registry,
            model=model or self.model or DEFAULT_MODEL,
            system_prompt=self.skills.system_prompt(self.system_prompt),
            max_iterations=self.max_iterations,
            fallback_message=self.fallback_message,
            error_fallback_message=self.error_fallback_message,
            tool_timeout=self.tool_timeout,
            tool_mode=mode,
            stream=self.stream,
            tool_message_role=self.tool_message_role,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            reasoning_effort=self.reasoning_effort,
            repeat_call_limit=self.repeat_call_limit,
            wrap_up=self.wrap_up,
            context_budget=self.context_budget,
            max_total_tokens=self.max_total_tokens,
            max_cost=self.max_cost,
            prices=self.prices,
            interventions=self.interventions,
            hooks=self.hooks,
            tool_gate=self.tool_gate,
        )

    def build_llm(self, **options: Any) -> OpenAICompatibleClient:
        """An OpenAICompatibleClient for this agent (its endpoint and key, else the env).

        Create it on the event loop that will use it; ``options`` go to the client
        (timeout, max_retries).
        """
        return OpenAICompatibleClient(
            base_url=self.base_url, api_key=self.api_key, model=self.resolved_model(), **options
        )


def load_agents(specs: Sequence[str]) -> dict[str, Agent]:
    """Import agents from ``module[:attr]`` specs (attr defaults to ``agent``).

    The current directory is put on ``sys.path`` first, so ``examples.weather``
    resolves from the repository root. Raises ConfigError for a missing module
    or attribute, a value that is not an Agent, or two agents with one name.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    agents: dict[str, Agent] = {}
    origin: dict[str, str] = {}
    for raw in specs:
        spec = raw.strip()
        module_name, _, attr = spec.partition(":")
        module_name, attr = module_name.strip(), attr.strip() or "agent"
        if not module_name:
            raise ConfigError(f"invalid agent spec {raw!r}: use module[:attr]", spec=raw)
        for found in _import_spec(spec, module_name, attr):
            if found.name in agents and agents[found.name] is not found:
                raise ConfigError(
                    f"two agents are named {found.name!r} ({origin[found.name]} and {spec}); "
                    "agent names must be unique",
                    agent=found.name,
                )
            agents[found.name] = found
            origin[found.name] = spec
    return agents


def _import_spec(spec: str, module_name: str, attr: str) -> list[Agent]:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(
                f"agent spec {spec!r}: no module named {module_name!r} "
                f"(looked in the current directory {os.getcwd()!r} and sys.path)",
                spec=spec,
            ) from None
        raise ConfigError(
            f"agent spec {spec!r}: importing {module_name!r} failed: {exc}", spec=spec
        ) from exc
    except Exception as exc:
        raise ConfigError(
            f"agent spec {spec!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}",
            spec=spec,
        ) from exc
    if not hasattr(module, attr):
        found = [n for n, v in vars(module).items() if isinstance(v, Agent)]
        hint = f"; Agents it defines: {', '.join(found)}" if found else ""
        raise ConfigError(
            f"agent spec {spec!r}: module {module_name!r} has no attribute {attr!r}{hint}",
            spec=spec,
        )
    value = getattr(module, attr)
    items = list(value) if isinstance(value, list | tuple) else [value]
    bad = [v for v in items if not isinstance(v, Agent)]
    if bad or not items:
        shown = type(bad[0]).__name__ if bad else "an empty list"
        raise ConfigError(
            f"agent spec {spec!r}: {module_name}.{attr} must be an Agent or a list of Agents, "
            f"not {shown}",
            spec=spec,
        )
    return items
