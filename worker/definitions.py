"""``Agent``: one agent's whole configuration in one object, and loading agents.

A worker hosts the agents named by ``--agents module[:attr]``; each names a
module attribute holding an ``Agent`` (or a list of them)::

    # examples/weather.py
    agent = Agent(name="weather", system_prompt="...", tools=[get_weather])

The loop's knobs are declared once, on ``LoopConfig``: an Agent takes each as a
keyword argument (or a whole ``loop=LoopConfig(...)``) and holds the result.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reactq.shared.catalogue import AgentTools, ToolCategory, categories_of
from reactq.shared.errors import ConfigError, SkillError, WebhookRefusedError
from reactq.shared.protocol.workers import AgentProfile
from reactq.shared.settings import Settings
from reactq.shared.webhooks import split_url
from reactq.worker.agent.config import DEFAULT_MODEL, LoopConfig, PromptFunction
from reactq.worker.agent.delegation import as_subagents, delegation_tools
from reactq.worker.agent.fingerprint import fingerprint
from reactq.worker.agent.interventions import maybe_await
from reactq.worker.agent.llm.base import LLMClient
from reactq.worker.agent.llm.endpoint import (
    ClientFactory,
    LLMEndpoint,
    RateLimit,
    check_rate_limit,
    header_items,
    openai_client,
)
from reactq.worker.agent.llm.ratelimit import RateLimiter
from reactq.worker.agent.loop import AgentLoop
from reactq.worker.agent.mcp import MCPClient, MCPProvider, providers_of
from reactq.worker.agent.skills import SkillSet
from reactq.worker.agent.tools import Registry, Tool, ToolContext, tool

__all__ = ["DEFAULT_MODEL", "Agent", "AgentConfigError", "load_agents"]

AGENT_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_KNOBS = frozenset(f.name for f in dataclasses.fields(LoopConfig))

# What skills_dir= accepts: one directory or several.
_SkillsDir = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


class AgentConfigError(ConfigError, ValueError):
    """An Agent definition is invalid (a ConfigError that is also a ValueError)."""


@dataclass(frozen=True, eq=False, init=False)
class Agent:
    """One agent: its name, tools, model endpoint, and its loop's knobs (a LoopConfig).

    Every ``LoopConfig`` knob is a keyword argument too::

        Agent(name="weather", model="gpt-4o", system_prompt="...", tools=[get_weather],
              tool_mode=ToolMode.NATIVE, max_iterations=6, budget_message="...")

    or pass ``loop=LoopConfig(...)`` (several agents may share one); knobs given
    beside it override its values. Everything is checked here, at construction:
    a bad value raises AgentConfigError naming the agent and the knob.
    """

    name: str
    """Unique name producers address (1-64 of [A-Za-z0-9_-]); also its queue's suffix."""
    description: str
    """What it is for, in a sentence or two: what MCP hosts and other agents read about it
    (the gateway's MCP tool and A2A card); "" for none. Never sent to its own model."""
    tools: tuple[Tool, ...]
    """Tools it may call (plain functions are wrapped with ``@tool``)."""
    mcp_servers: tuple[MCPProvider, ...]
    """MCP servers whose tools it may call (an MCPProvider sets prefix / allow / block)."""
    skills_dir: _SkillsDir | None
    """Directory (or directories) of skills, ``<name>/SKILL.md``, the model may load."""
    base_url: str | None
    """The OpenAI-compatible endpoint; None: the settings' (OPENAI_BASE_URL), else OpenAI."""
    api_key: str | None = field(repr=False)
    """Its key; None: ``api_key_env``'s, else the settings' (OPENAI_API_KEY). Never shown."""
    api_key_env: str | None
    """The environment variable holding its key (read through Settings); None: see api_key."""
    timeout: float | None
    """Seconds one model request may take; None: the settings' (REACTQ_LLM_TIMEOUT_SECONDS)."""
    max_retries: int | None
    """Retries of a failed model request; None: the settings' (REACTQ_LLM_MAX_RETRIES)."""
    headers: tuple[tuple[str, str], ...] = field(repr=False)
    """Extra HTTP headers on every model request (never shown in repr, nor logged)."""
    client_factory: ClientFactory | None
    """``client_factory(endpoint) -> LLMClient`` for a custom provider; None: the openai SDK."""
    rate_limit: RateLimit | None
    """Requests and tokens per minute the whole pool may send its model (one budget in
    Redis); None: the settings' (REACTQ_LLM_*_PER_MINUTE) on their endpoint, else none."""
    webhook: str | None
    """Where its turns' ends are POSTed (signed) unless a turn names its own webhook; None:
    only turns that name one. Checked like every webhook when a turn is submitted."""
    tool_categories: frozenset[ToolCategory] | None
    """The tool categories its model sees (``{ToolCategory.READ}``: a read-only reviewer);
    tools of the others are never shown and a call to one is refused. None: all."""
    loop: LoopConfig
    """The loop's knobs: model, system prompt, tool mode, limits, messages, budgets, hooks."""
    skills: SkillSet = field(init=False, repr=False)
    """The skills found in ``skills_dir`` (discovered at construction; empty without one)."""

    def __init__(
        self,
        name: str,
        *,
        description: str = "",
        tools: Sequence[Tool | Callable[..., Any]] = (),
        mcp_servers: Sequence[MCPProvider | MCPClient] = (),
        skills_dir: _SkillsDir | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
        client_factory: ClientFactory | None = None,
        rate_limit: RateLimit | None = None,
        webhook: str | None = None,
        tool_categories: Iterable[ToolCategory | str] | None = None,
        loop: LoopConfig | None = None,
        **knobs: Any,
    ) -> None:
        if not isinstance(name, str) or not AGENT_NAME_RE.fullmatch(name):
            raise AgentConfigError(
                f"agent name {name!r} is invalid: use 1-64 characters from [A-Za-z0-9_-]"
            )
        unknown = sorted(set(knobs) - _KNOBS)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(_KNOBS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise AgentConfigError(
                f"agent {name!r}: unknown setting {unknown[0]!r}{hint}; an Agent takes name, "
                "description, tools, mcp_servers, skills_dir, base_url, api_key, api_key_env, "
                "timeout, max_retries, headers, client_factory, rate_limit, webhook, "
                "tool_categories, loop and the knobs of "
                "LoopConfig"
            )
        if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
            raise AgentConfigError(f"agent {name!r}: tools must be a list of tools")
        if not isinstance(description, str):
            raise AgentConfigError(f"agent {name!r}: description must be a string")
        try:
            skills = SkillSet.from_paths(skills_dir) if skills_dir is not None else SkillSet()
        except SkillError as exc:
            raise AgentConfigError(f"agent {name!r}: {exc.message}") from None
        try:
            if loop is not None and not isinstance(loop, LoopConfig):
                raise ValueError(f"loop must be a LoopConfig, got {loop!r}")
            config = loop if loop is not None else LoopConfig()
            if knobs:
                config = dataclasses.replace(config, **knobs)
            if isinstance(mcp_servers, str | bytes) or not isinstance(mcp_servers, Sequence):
                raise ValueError("mcp_servers must be a list of MCPClient or MCPProvider")
            servers = providers_of(mcp_servers)
            wrapped = tuple(t if isinstance(t, Tool) else tool(t) for t in tools)
            header_pairs = header_items(headers)
            _check_client_knobs(api_key, api_key_env, timeout, max_retries, client_factory)
            check_rate_limit(rate_limit)
            if webhook is not None:
                try:
                    split_url(webhook)
                except WebhookRefusedError as exc:
                    raise ValueError(f"webhook: {exc.message}") from None
            categories = categories_of(tool_categories)
            # Refuses duplicate names, load_skill among them.
            _with_skills(Registry(wrapped, categories=categories), skills)
        except ValueError as exc:
            raise AgentConfigError(f"agent {name!r}: {exc}") from None
        # Frozen: the dataclass's own __setattr__ refuses, so set through object's.
        for attr, value in (
            ("name", name),
            ("description", description.strip()),
            ("tools", wrapped),
            ("mcp_servers", servers),
            ("skills_dir", skills_dir),
            ("base_url", base_url),
            ("api_key", api_key),
            ("api_key_env", api_key_env),
            ("timeout", timeout),
            ("max_retries", max_retries),
            ("headers", header_pairs),
            ("client_factory", client_factory),
            ("rate_limit", rate_limit),
            ("webhook", webhook),
            ("tool_categories", categories),
            ("loop", config),
            ("skills", skills),
        ):
            object.__setattr__(self, attr, value)

    def resolved_model(self, settings: Settings | None = None) -> str:
        """The model to use: this agent's, else the settings' (REACTQ_MODEL), else gpt-4o-mini.

        ``settings`` None reads ``Settings.from_env()``.
        """
        if self.loop.model:
            return self.loop.model
        return _settings(settings).model or DEFAULT_MODEL

    def resolved_loop(self, settings: Settings | None = None) -> LoopConfig:
        """The LoopConfig its loop runs: the model resolved, the skills in the system prompt."""
        prompt = self.loop.system_prompt
        skills = self.skills
        if isinstance(prompt, str):
            resolved: str | PromptFunction = skills.system_prompt(prompt)
        elif len(skills):
            resolved = _with_skills_section(prompt, skills)
        else:
            resolved = prompt
        return dataclasses.replace(
            self.loop, model=self.resolved_model(settings), system_prompt=resolved
        )

    @functools.cached_property
    def config_version(self) -> str:
        """A 12-hex-digit hash of this definition: its name, tools (names, schemas,
        flags), MCP servers, endpoint, skills, description (when given) and every loop
        knob (a function by its qualified name). Every worker computes the same one for
        the same definition; turns record it (``started`` and ``final`` events, the
        turn's record)."""
        return fingerprint(
            {
                "name": self.name,
                "tools": [
                    [
                        t.name,
                        t.description,
                        t.parameters,
                        t.category,
                        t.requires_approval,
                        t.timeout,
                    ]
                    for t in self.tools
                ],
                "tool_categories": sorted(self.tool_categories or ()),
                "mcp_servers": self.mcp_servers,
                "skills": sorted(self.skills.names),
                "base_url": self.base_url,
                "api_key_env": self.api_key_env,
                "timeout": self.timeout,
                "max_retries": self.max_retries,
                "headers": [name for name, _ in self.headers],  # values may be secrets
                "client_factory": self.client_factory,
                "loop": self.loop,
                # Only when given: the versions of agents without one stay what they were.
                **({"description": self.description} if self.description else {}),
            }
        )

    def profile(self) -> AgentProfile:
        """What a worker announces of this agent: the knobs a turn may override and its
        configuration version (producers check overrides against it at submit time)."""
        return AgentProfile(frozenset(self.loop.overridable), self.config_version, self.webhook)

    def registry(self) -> Registry:
        """A fresh Registry of this agent's tools (and ``load_skill`` when it has skills).

        MCP tools are not in it: ``MCPManager.start`` attaches them on a running loop.
        """
        registry = _with_skills(Registry(self.tools, categories=self.tool_categories), self.skills)
        if self.loop.subagents:  # delegate and delegate_parallel (worker/agent/delegation.py)
            for t in delegation_tools(as_subagents(self.loop.subagents), self.loop.max_parallel):
                registry.register(t)
        return registry

    def catalogue(self, registry: Registry | None = None) -> AgentTools:
        """The tools its model sees, for the catalogue (``reactq tools AGENT``): those of
        ``registry`` (one MCP tools were attached to), else of ``self.registry()``."""
        tools = registry if registry is not None else self.registry()
        spec = self.loop.output_spec()
        return AgentTools(
            agent=self.name,
            config_version=self.config_version,
            tool_categories=sorted(self.tool_categories) if self.tool_categories else None,
            tools=[t.info() for t in tools],
            description=self.description,
            output_schema=spec.schema if spec is not None else None,
        )

    def build_loop(
        self,
        llm: LLMClient,
        registry: Registry | None = None,
        *,
        settings: Settings | None = None,
        fallback_llms: Sequence[LLMClient] | None = None,
        limiters: Sequence[RateLimiter | None] | None = None,
    ) -> AgentLoop:
        """The AgentLoop for this agent, talking to ``llm``.

        ``registry`` defaults to ``self.registry()``; pass one that MCP tools were
        attached to (the loop fixes its tool list when it is built). ``settings``
        give the default model (None reads ``Settings.from_env()``).
        ``fallback_llms``: a client per fallback model (``ClientCache.for_agent``
        makes them); None: ``llm`` for each. ``limiters``: each model's share of the
        pool's rate limit (``RateLimiters.for_agent`` makes them); None: no limit.
        """
        tools = registry if registry is not None else self.registry()
        return AgentLoop(
            llm,
            tools,
            self.resolved_loop(settings),
            fallback_llms=fallback_llms,
            version=self.config_version,
            limiters=limiters,
        )

    def endpoints(self, settings: Settings | None = None) -> list[LLMEndpoint]:
        """Its own endpoint, then each fallback model's, resolved against the settings
        (None reads ``Settings.from_env()``). ConfigError names a key variable that is
        not set."""
        s = _settings(settings)
        own = LLMEndpoint(
            base_url=self.base_url or s.openai_base_url,
            api_key=self.api_key
            or self._key_from(s, self.api_key_env, "api_key_env")
            or _secret(s.openai_api_key),
            timeout=self.timeout if self.timeout is not None else s.llm_timeout_seconds,
            max_retries=self.max_retries if self.max_retries is not None else s.llm_max_retries,
            headers=self.headers,
            rate_limit=self.rate_limit or (None if self.base_url else _pool_rate_limit(s)),
        )
        out = [own]
        for model in self.loop.fallbacks:
            if model.base_url is None and model.api_key_env is None:
                out.append(dataclasses.replace(own, rate_limit=model.rate_limit or own.rate_limit))
                continue
            where = f"fallback model {model.name!r}: api_key_env"
            key = self._key_from(s, model.api_key_env, where)
            if model.base_url is None:
                key = key or own.api_key
            limit = model.rate_limit or (own.rate_limit if model.base_url is None else None)
            out.append(
                dataclasses.replace(
                    own, base_url=model.base_url or own.base_url, api_key=key, rate_limit=limit
                )
            )
        return out

    def _key_from(self, settings: Settings, variable: str | None, knob: str) -> str | None:
        if variable is None:
            return None
        key = _secret(settings.secret_from_env(variable))
        if key is None:
            raise ConfigError(
                f"agent {self.name!r}: {knob} names {variable}, which is not set",
                agent=self.name,
                variable=variable,
            )
        return key

    def build_llm(self, settings: Settings | None = None, **options: Any) -> LLMClient:
        """A client for this agent's own endpoint (``endpoints(settings)[0]``), through its
        ``client_factory`` (default: an OpenAICompatibleClient).

        ``settings`` None reads ``Settings.from_env()``. Create it on the event
        loop that will use it; ``options`` replace endpoint knobs (timeout, max_retries).
        """
        endpoint = dataclasses.replace(self.endpoints(settings)[0], **options)
        return (self.client_factory or openai_client)(endpoint)


def _pool_rate_limit(settings: Settings) -> RateLimit | None:
    """The settings' limit for agents on the pool's endpoint (REACTQ_LLM_*_PER_MINUTE)."""
    rpm, tpm = settings.llm_requests_per_minute, settings.llm_tokens_per_minute
    if rpm is None and tpm is None:
        return None
    return RateLimit(requests_per_minute=rpm, tokens_per_minute=tpm)


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None


def _check_client_knobs(
    api_key: str | None,
    api_key_env: str | None,
    timeout: float | None,
    max_retries: int | None,
    client_factory: ClientFactory | None,
) -> None:
    if api_key is not None and api_key_env is not None:
        raise ValueError(
            "api_key= conflicts with api_key_env=: give the key itself or the name of the "
            "variable that holds it, not both"
        )
    if api_key_env is not None and (not isinstance(api_key_env, str) or not api_key_env):
        raise ValueError(f"api_key_env must name an environment variable, got {api_key_env!r}")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
    if max_retries is not None and (
        isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0
    ):
        raise ValueError(f"max_retries must be an int >= 0 or None, got {max_retries!r}")
    if client_factory is not None and not callable(client_factory):
        raise ValueError(f"client_factory must be callable or None, got {client_factory!r}")


def _settings(settings: Settings | None) -> Settings:
    return settings if settings is not None else Settings.from_env()


def _with_skills_section(prompt: PromptFunction, skills: SkillSet) -> PromptFunction:
    """A per-turn system prompt with the skills section appended to what it returns."""

    async def with_section(turn: ToolContext) -> str:
        return skills.system_prompt(await maybe_await(prompt(turn)))

    return with_section


def _with_skills(registry: Registry, skills: SkillSet) -> Registry:
    if len(skills):
        registry.register(skills.tool())
    return registry


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


def _where(exc: BaseException) -> str:
    """`` at FILE:LINE`` of the line that raised ``exc`` while a module was imported:
    the innermost frame of Python code (not the import machinery's), or the line a
    SyntaxError names; "" when there is none."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" at {exc.filename}:{exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    if not frames or frames[-1].filename == __file__:
        return ""
    return f" at {frames[-1].filename}:{frames[-1].lineno}"


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
            f"agent spec {spec!r}: importing {module_name!r} failed{_where(exc)}: {exc}",
            spec=spec,
        ) from exc
    except Exception as exc:
        raise ConfigError(
            f"agent spec {spec!r}: importing {module_name!r} failed{_where(exc)}: "
            f"{type(exc).__name__}: {exc}",
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
