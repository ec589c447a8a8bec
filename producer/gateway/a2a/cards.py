"""The agent card of each hosted agent: its description, one skill for the agent and
one per tool, streaming and push notifications, the gateway's bearer keys as its
security scheme, and its JSON-RPC interface at ``/a2a/{agent}``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0

from reactq.shared.catalogue import AgentTools

__all__ = ["BEARER", "INPUT_MODES", "OUTPUT_MODES", "card_of"]

BEARER = "bearer"
"""The card's name for the gateway's API keys (``Authorization: Bearer KEY``)."""

INPUT_MODES = ["text/plain", "application/json", "image/png", "image/jpeg", "image/webp"]
"""What a message may carry: text, data (as its JSON text), images."""

OUTPUT_MODES = ["text/plain", "application/json"]
"""What a task answers: the final text, and the structured output as data."""


def _version() -> str:
    try:
        return version("reactq")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def card_of(catalogue: AgentTools, base_url: str, keys_enabled: bool) -> AgentCard:
    """The card of the agent of ``catalogue``, served from ``base_url`` (the gateway's)."""
    name = catalogue.agent
    description = catalogue.description or f"The reactq agent {name!r}."
    skills = [
        AgentSkill(id=name, name=name, description=description, tags=["agent"]),
        *(
            AgentSkill(
                id=f"{name}.{tool.name}",
                name=tool.name,
                description=tool.description or f"The tool {tool.name!r}.",
                tags=["tool", str(tool.category)],
            )
            for tool in catalogue.tools
        ),
    ]
    card = AgentCard(
        name=name,
        description=description,
        supported_interfaces=[
            AgentInterface(
                url=f"{base_url.rstrip('/')}/a2a/{name}",
                protocol_binding="JSONRPC",
                protocol_version=PROTOCOL_VERSION_1_0,
            )
        ],
        provider=AgentProvider(organization="reactq", url=base_url),
        version=_version(),
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=INPUT_MODES,
        default_output_modes=OUTPUT_MODES,
        skills=skills,
    )
    if keys_enabled:
        card.security_schemes[BEARER].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="A reactq gateway API key"
                )
            )
        )
        requirement = SecurityRequirement()
        requirement.schemes[BEARER].SetInParent()
        card.security_requirements.append(requirement)
    return card
