"""The tool catalogue: what kind each tool is, and what an agent offers the model.

Every tool is one of three categories (``ToolCategory``): it only reads, it changes
something, or it keeps the agent's own bookkeeping (a plan). A tool that declares
none is WRITE: only a tool said to be read-only (``@tool(read_only=True)``, an MCP
tool with its server's ``readOnlyHint``) runs beside others. The category decides
two things: read tools of one step run side by side while the
others run alone, and an agent may expose only some categories
(``Agent(tool_categories={ToolCategory.READ})``, a read-only reviewer).

Workers publish each agent's catalogue in the worker registry
(``shared/protocol/workers.py``), so the producer, the CLI and the gateway, which
never load agent code, can answer ``reactq tools AGENT`` and
``GET /v1/agents/{name}/tools``.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AgentInfo", "AgentTools", "ToolCategory", "ToolInfo", "ToolSource", "categories_of"]


class ToolCategory(StrEnum):
    """What a tool does to the world: READ, WRITE or META."""

    READ = "read"
    """Only reads (``@tool(read_only=True)``): calls of one step run concurrently."""
    WRITE = "write"
    """Changes something (files, records, the outside world): runs alone, in order.
    A tool's category unless it declares another."""
    META = "meta"
    """The agent's own bookkeeping (its todo list, loading a skill): runs alone."""


ToolSource = Literal["local", "bundle", "mcp", "builtin"]
"""Where a tool comes from: the agent's own code, a ``reactq.bundles`` bundle, an MCP
server, or reactq itself (``load_skill``)."""


def categories_of(value: Iterable[ToolCategory | str] | None) -> frozenset[ToolCategory] | None:
    """``value`` as a set of categories (None stays None: every category);
    ValueError names an unknown one, or an empty set."""
    if value is None:
        return None
    if isinstance(value, str | bytes):
        value = [value] if isinstance(value, str) else []
    found: set[ToolCategory] = set()
    for item in value:
        try:
            found.add(ToolCategory(item))
        except ValueError:
            known = ", ".join(c.value for c in ToolCategory)
            raise ValueError(f"unknown tool category {item!r}: use {known}") from None
    if not found:
        raise ValueError("tool_categories is empty: give at least one category, or None for all")
    return frozenset(found)


class ToolInfo(BaseModel):
    """One tool as the catalogue lists it."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The name the model calls it by."""
    description: str = ""
    """What the model reads about it."""
    category: ToolCategory
    """READ, WRITE or META."""
    source: ToolSource = "local"
    """Where it comes from."""
    origin: str | None = None
    """The bundle (``files``) or MCP server (its client's name) it comes from."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """Its arguments' JSON Schema."""
    requires_approval: bool = False
    """True when every call waits for a person's decision."""
    timeout: float | None = None
    """Seconds a call may take (None: no limit of its own)."""


class AgentTools(BaseModel):
    """An agent's catalogue: the tools its model sees."""

    model_config = ConfigDict(frozen=True)

    agent: str
    """The agent."""
    config_version: str | None = None
    """The definition these tools belong to (``Agent.config_version``)."""
    tool_categories: list[ToolCategory] | None = None
    """The categories the agent exposes (None: all of them)."""
    tools: list[ToolInfo] = Field(default_factory=list)
    """Its tools, in registration order."""
    description: str = ""
    """What the agent is for (``Agent(description=...)``): what other agents and MCP
    hosts read about it."""
    output_schema: dict[str, Any] | None = None
    """The JSON Schema of its structured answer (``output_type``); None: it answers text."""


class AgentInfo(BaseModel):
    """One definition of an agent the pool hosts, as ``GET /v1/agents`` lists it: a
    name live with two definitions (config versions) at once is listed twice."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The agent."""
    config_version: str | None = None
    """The definition's version (``Agent.config_version``)."""
    worker: str | None = None
    """The worker that announced it last."""
    workers: list[str] = Field(default_factory=list)
    """The live workers hosting this definition (none when it is gone)."""
    last_seen: float | None = None
    """Unix time of that announcement."""
    live: bool = False
    """True when a worker hosting this definition beat within ``REACTQ_HEARTBEAT_SECONDS``."""
    tool_categories: list[ToolCategory] | None = None
    """The categories it exposes (None: all, or not announced)."""
    tools: int | None = None
    """How many tools it offers (None: its worker published no catalogue)."""
