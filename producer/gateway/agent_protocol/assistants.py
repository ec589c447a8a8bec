"""The Agent Protocol's assistants: one per agent the pool hosts (see the package's
docstring)::

    POST /assistants/search                  by graph_id, name, metadata; limit, offset
    POST /assistants/count                   how many the same filters match
    GET  /assistants/{assistant_id}          one                                   404
    GET  /assistants/{assistant_id}/schemas  its input, output, state, config schemas  404
    GET  /assistants/{assistant_id}/graph    its nodes and edges (agent <-> tools)  404

An assistant's ``assistant_id`` is a stable UUID (``uuid5`` of the pool's namespace and
the agent's name), its ``graph_id`` the agent's name; either names it in a path or a
run (``choose``). The answers come from the worker registry, as ``GET /v1/agents``'s
do: a key limited to some agents (``agents=``) sees those only, and any other
answers 404 as if no worker hosted it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, ConfigDict, Field

from reactq.producer.gateway.deps import GatewayDep, ScopeDep
from reactq.producer.gateway.errors import GatewayError
from reactq.producer.gateway.models import ErrorBody
from reactq.producer.gateway.scopes import Scoped, Touches, listing
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
from reactq.shared.catalogue import AgentInfo

__all__ = ["Assistant", "AssistantChoice", "assistant_id_of", "choose", "router"]

router = APIRouter(tags=["agent-protocol: assistants"])

# Fixed forever: an assistant's id must not change between releases.
_ID_NAMESPACE = uuid.UUID("6f1c1e2a-7d3b-5c0e-9a41-2b8f0d6e4c17")

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No worker hosts it (``assistant_not_found``)"}
}

AssistantId = Annotated[
    str,
    Path(max_length=200, description="The assistant's UUID, or its graph id (the agent's name)"),
]


def assistant_id_of(namespace: str, agent: str) -> str:
    """The assistant id of ``agent`` in the pool of ``namespace``: a UUID that stays the
    same for as long as the names do."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"{namespace}:{agent}"))


class Assistant(BaseModel):
    """An assistant as LangGraph's SDK reads it (``langgraph_sdk.schema.Assistant``)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    assistant_id: str
    """A UUID, stable for the agent's name in this pool."""
    graph_id: str
    """The agent's name."""
    name: str
    """The agent's name too."""
    description: str | None = None
    """What it is."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Its config: ``{"configurable": {}}`` (the agent's settings are the worker's)."""
    context: dict[str, Any] = Field(default_factory=dict)
    """Its static context (none)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """``config_version`` (the hash of the live definition), ``live``, ``tools``."""
    version: int = 1
    """Always 1: reactq versions a definition by its hash (``metadata.config_version``)."""
    created_at: datetime
    """When a worker last announced it."""
    updated_at: datetime
    """The same."""


class AssistantSearch(BaseModel):
    """``POST /assistants/search`` (and ``/count``, without the page)."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    graph_id: str | None = None
    """Only this agent's."""
    name: str | None = None
    """Names containing it (any case)."""
    metadata: dict[str, Any] | None = None
    """Assistants whose metadata holds each of these pairs."""
    limit: int = Field(10, ge=1, le=1000)
    """Assistants a page."""
    offset: int = Field(0, ge=0)
    """Assistants to skip."""


class AssistantCount(BaseModel):
    """``POST /assistants/count``'s filters."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    graph_id: str | None = None
    """Only this agent's."""
    name: str | None = None
    """Names containing it (any case)."""
    metadata: dict[str, Any] | None = None
    """Assistants whose metadata holds each of these pairs."""


@dataclass(frozen=True)
class AssistantChoice:
    """Where a run on an assistant goes: the hosted agent, and the assistant's config
    over it (sent as the turn's overrides)."""

    agent: str
    overrides: dict[str, Any] = field(default_factory=dict)


def _stamp(ts: float | None) -> datetime:
    return datetime.fromtimestamp(ts or 0.0, tz=UTC)


def _assistant(namespace: str, info: AgentInfo) -> Assistant:
    seen = _stamp(info.last_seen)
    return Assistant(
        assistant_id=assistant_id_of(namespace, info.name),
        graph_id=info.name,
        name=info.name,
        description=f"reactq agent {info.name!r}",
        config={"configurable": {}},
        metadata={
            "config_version": info.config_version,
            "live": info.live,
            "tools": info.tools,
        },
        created_at=seen,
        updated_at=seen,
    )


async def _hosted(gateway: Gateway, scope: KeyScope | None) -> list[Assistant]:
    """One assistant per agent name the key may see, in name order: of a name live with
    two definitions, the one announced last."""
    latest: dict[str, AgentInfo] = {}
    for info in await gateway.producer.agents():
        if scope is not None and not scope.may_run(info.name):
            continue
        kept = latest.get(info.name)
        if kept is None or (info.live, info.last_seen or 0) > (kept.live, kept.last_seen or 0):
            latest[info.name] = info
    namespace = gateway.settings.namespace
    return [_assistant(namespace, latest[name]) for name in sorted(latest)]


def _matches(assistant: Assistant, body: AssistantCount | AssistantSearch) -> bool:
    if body.graph_id is not None and assistant.graph_id != body.graph_id:
        return False
    if body.name is not None and body.name.casefold() not in assistant.name.casefold():
        return False
    return all(assistant.metadata.get(k) == v for k, v in (body.metadata or {}).items())


async def _find(gateway: Gateway, scope: KeyScope | None, assistant_id: str) -> Assistant:
    for assistant in await _hosted(gateway, scope):
        if assistant_id in (assistant.assistant_id, assistant.graph_id):
            return assistant
    raise GatewayError(
        f"no assistant {assistant_id!r}: no worker hosts such an agent",
        status=404,
        error_code="assistant_not_found",
    )


async def choose(gateway: Gateway, assistant_id: str) -> AssistantChoice:
    """The agent (and overrides) a run on ``assistant_id`` goes to: the assistant's UUID
    or its graph id (an agent's name, as LangGraph's server allows) names the agent.
    An id that is neither is taken as an agent's name, so submitting the turn refuses
    it as an agent no worker hosts."""
    for assistant in await _hosted(gateway, None):
        if assistant_id in (assistant.assistant_id, assistant.graph_id):
            return AssistantChoice(agent=assistant.graph_id)
    return AssistantChoice(agent=assistant_id)


# A route naming one assistant checks the key's agents itself (404, ``_find``).
_ONE = Scoped(kind=Touches.LISTING, inner=("assistant_id",)).dependency()


async def _named(assistant_id: AssistantId, gateway: GatewayDep, scope: ScopeDep) -> Assistant:
    return await _find(gateway, scope, assistant_id)


Named = Annotated[Assistant, Depends(_named)]
"""The assistant ``{assistant_id}`` names (its UUID or graph id) if the key may see it,
else 404 ``assistant_not_found``."""


@router.post("/assistants/search", response_model=list[Assistant], dependencies=[listing()])
async def search_assistants(
    body: AssistantSearch, gateway: GatewayDep, scope: ScopeDep
) -> list[Assistant]:
    """The assistants the key may see, in name order, filtered, a page at a time."""
    found = [a for a in await _hosted(gateway, scope) if _matches(a, body)]
    return found[body.offset : body.offset + body.limit]


@router.post("/assistants/count", response_model=int, dependencies=[listing()])
async def count_assistants(body: AssistantCount, gateway: GatewayDep, scope: ScopeDep) -> int:
    """How many assistants the key may see match the filters."""
    return sum(_matches(a, body) for a in await _hosted(gateway, scope))


@router.get(
    "/assistants/{assistant_id}",
    response_model=Assistant,
    responses=_NOT_FOUND,
    dependencies=[_ONE],
)
async def get_assistant(found: Named) -> Assistant:
    """The assistant, by its UUID or its graph id."""
    return found


_MESSAGE = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["human", "ai", "tool", "system"]},
        "content": {"anyOf": [{"type": "string"}, {"type": "array"}]},
        "id": {"type": ["string", "null"]},
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "tool_call_id": {"type": "string"},
    },
    "required": ["type", "content"],
}
_MESSAGES_STATE = {
    "title": "MessagesState",
    "type": "object",
    "properties": {"messages": {"type": "array", "items": _MESSAGE}},
    "required": ["messages"],
}
_CONFIG = {
    "title": "Config",
    "type": "object",
    "properties": {"configurable": {"type": "object"}},
}


@router.get(
    "/assistants/{assistant_id}/schemas",
    responses=_NOT_FOUND,
    dependencies=[_ONE],
)
async def assistant_schemas(found: Named) -> dict[str, Any]:
    """Its schemas: input, output and state are LangGraph's messages state
    (``{"messages": [...]}`` in LangChain's message format), config a ``configurable``
    object; no context schema."""
    return {
        "graph_id": found.graph_id,
        "input_schema": _MESSAGES_STATE,
        "output_schema": _MESSAGES_STATE,
        "state_schema": _MESSAGES_STATE,
        "config_schema": _CONFIG,
        "context_schema": None,
    }


@router.get(
    "/assistants/{assistant_id}/graph",
    responses=_NOT_FOUND,
    dependencies=[_ONE],
)
async def assistant_graph(found: Named) -> dict[str, Any]:
    """Its graph as a ReAct loop: ``__start__`` -> ``agent`` <-> ``tools``, ``agent`` ->
    ``__end__`` (the node names the runs' ``updates`` use)."""
    del found
    nodes = [
        {"id": "__start__", "type": "schema", "data": "__start__"},
        {"id": "agent", "type": "runnable", "data": {"name": "agent"}},
        {"id": "tools", "type": "runnable", "data": {"name": "tools"}},
        {"id": "__end__", "type": "schema", "data": "__end__"},
    ]
    edges = [
        {"source": "__start__", "target": "agent"},
        {"source": "agent", "target": "tools", "conditional": True},
        {"source": "agent", "target": "__end__", "conditional": True},
        {"source": "tools", "target": "agent"},
    ]
    return {"nodes": nodes, "edges": edges}
