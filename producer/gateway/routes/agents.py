"""The gateway's agent routes: which agents the pool hosts, and each one's tools.
``factory.py`` mounts them under ``/v1``, behind the API key::

    GET /v1/agents                 the agents workers announced, by name and live definition
    GET /v1/agents/{name}/tools    the agent's tools: category, source, JSON schema   404

The gateway loads no agent code: both answers come from the worker registry, where
every worker publishes its agents' catalogues (``shared/protocol/workers.py``). A
key limited to some agents (``agents=`` in ``REACTQ_API_KEYS``) lists those only, and
any other answers 404 as if no worker hosted it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from reactq.producer.gateway.deps import AgentName, GatewayDep, ScopeDep
from reactq.producer.gateway.errors import GatewayError
from reactq.producer.gateway.models import ErrorBody
from reactq.producer.gateway.scopes import listing, touches
from reactq.shared.catalogue import AgentInfo, AgentTools
from reactq.shared.errors import UnknownAgentError

__all__ = ["AgentList", "router"]

router = APIRouter(tags=["agents"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No worker hosts the agent (``unknown_agent``)"}
}


class AgentList(BaseModel):
    """``GET /v1/agents``: the agents the pool hosts."""

    model_config = ConfigDict(frozen=True)

    agents: list[AgentInfo] = Field(default_factory=list)
    """Every agent a worker announced (and the key may see), by name: a name live with
    two definitions (config versions) at once has an entry for each."""


@router.get("/agents", response_model=AgentList, dependencies=[listing()])
async def list_agents(gateway: GatewayDep, scope: ScopeDep) -> AgentList:
    """The agents workers announced: each one's version, last announcement, whether a
    worker hosting it is live, and how many tools it offers; one entry for each
    definition of a name that live workers host."""
    found = await gateway.producer.agents()
    return AgentList(agents=[a for a in found if scope is None or scope.may_run(a.name)])


@router.get(
    "/agents/{name}/tools",
    response_model=AgentTools,
    responses=_NOT_FOUND,
    dependencies=[touches(agent="path.name")],
)
async def agent_tools(name: AgentName, gateway: GatewayDep) -> AgentTools:
    """The tools the agent's model sees, each with its category (read, write, meta),
    source (local, bundle, mcp, builtin), origin and JSON schema."""
    # Another agent than the key's was answered by the guard, like one no worker hosts.
    try:
        return await gateway.producer.agent_tools(name)
    except UnknownAgentError:
        raise GatewayError(
            f"no worker hosts an agent named {name!r} (or none published its tools)",
            status=404,
            error_code="unknown_agent",
        ) from None
