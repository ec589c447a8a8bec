"""The mounted routes: the agent cards and each agent's JSON-RPC endpoint, the SDK's
dispatcher (its method routing, its errors, its SSE, its v0.3 adapter for a client
sending ``A2A-Version: 0.3``) over ``ReactqRequestHandler``."""

from __future__ import annotations

from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types.a2a_pb2 import AgentCard, AgentSkill
from fastapi import APIRouter, Request, Response
from starlette.responses import JSONResponse

from reactq.producer.gateway.a2a.cards import card_of
from reactq.producer.gateway.a2a.handler import CallerState, ReactqRequestHandler
from reactq.producer.gateway.errors import ERROR_RESPONSES, GatewayError
from reactq.producer.gateway.mcp_server.tools import visible_agents
from reactq.producer.gateway.scopes import listing, scope_of, touches
from reactq.producer.gateway.service import Gateway, gateway_of
from reactq.shared.catalogue import AgentTools
from reactq.shared.errors import UnknownAgentError

__all__ = ["CARD_PATH", "router"]

CARD_PATH = "/.well-known/agent-card.json"
"""Where a card is, at the root (the pool's) and under each agent's path."""

router = APIRouter(tags=["a2a"])
"""The A2A routes (mounted behind the gateway's key)."""


class _ContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, with the path's agent, the caller's scope and the
    gateway in its state (what ``ReactqRequestHandler`` reads)."""

    def build(self, request: Any) -> ServerCallContext:
        context = super().build(request)
        context.state[CallerState.AGENT] = request.path_params["agent"]
        context.state[CallerState.SCOPE] = scope_of(request)
        context.state[CallerState.GATEWAY] = gateway_of(request)
        context.state[CallerState.PUSHER] = request.app.state.a2a_pusher
        return context


_dispatcher = JsonRpcDispatcher(
    ReactqRequestHandler(), context_builder=_ContextBuilder(), enable_v0_3_compat=True
)


async def _catalogue(gateway: Gateway, agent: str) -> AgentTools:
    try:
        return await gateway.producer.agent_tools(agent)
    except UnknownAgentError:
        raise GatewayError(
            f"no agent {agent!r} is served here", status=404, error_code=UnknownAgentError.code
        ) from None


@router.post("/a2a/{agent}", dependencies=[touches(agent="path.agent")])
async def a2a_rpc(agent: str, request: Request) -> Response:
    """The agent's A2A JSON-RPC endpoint: SendMessage, SendStreamingMessage (SSE),
    GetTask, ListTasks, CancelTask, SubscribeToTask. A task is a turn, a context a
    session."""
    await _catalogue(gateway_of(request), agent)
    return await _dispatcher.handle_requests(request)


@router.get(f"/a2a/{{agent}}{CARD_PATH}", dependencies=[touches(agent="path.agent")])
async def a2a_agent_card(agent: str, request: Request) -> JSONResponse:
    """The agent's A2A card: its skills (the agent, its tools), capabilities, security
    scheme and JSON-RPC interface."""
    gateway = gateway_of(request)
    card = card_of(await _catalogue(gateway, agent), str(request.base_url), gateway.keys.enabled)
    return JSONResponse(agent_card_to_dict(card))


@router.get(CARD_PATH, dependencies=[listing()], responses=ERROR_RESPONSES)
async def a2a_pool_card(request: Request) -> JSONResponse:
    """The pool's A2A card: every agent the key may run as a skill, and each one's
    JSON-RPC interface (its own card is under ``/a2a/{agent}``)."""
    gateway = gateway_of(request)
    base = str(request.base_url)
    cards = [
        card_of(c, base, gateway.keys.enabled)
        for c in await visible_agents(gateway, scope_of(request))
    ]
    pool = AgentCard(
        name="reactq",
        description="The agents of a reactq pool; each one is an A2A agent at /a2a/{agent}.",
    )
    if cards:
        pool.CopyFrom(cards[0])
        pool.name, pool.description = (
            "reactq",
            "The agents of a reactq pool; each one is an A2A agent at /a2a/{agent}.",
        )
        del pool.skills[:]
        del pool.supported_interfaces[:]
    for card in cards:
        pool.skills.append(
            AgentSkill(id=card.name, name=card.name, description=card.description, tags=["agent"])
        )
        pool.supported_interfaces.extend(card.supported_interfaces)
    return JSONResponse(agent_card_to_dict(pool))
