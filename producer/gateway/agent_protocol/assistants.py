"""The Agent Protocol's assistants (see the package's docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter

from reactq.producer.gateway.service import Gateway

__all__ = ["AssistantChoice", "choose", "router"]

router = APIRouter(tags=["agent-protocol"])


@dataclass(frozen=True)
class AssistantChoice:
    """Where a run on an assistant goes: the hosted agent, and the assistant's config
    over it (sent as the turn's overrides)."""

    agent: str
    overrides: dict[str, Any] = field(default_factory=dict)


async def choose(gateway: Gateway, assistant_id: str) -> AssistantChoice:
    """The agent (and overrides) a run on ``assistant_id`` goes to. A graph id (an
    agent's name) names the agent itself, as LangGraph's server allows."""
    del gateway
    return AssistantChoice(agent=assistant_id)
