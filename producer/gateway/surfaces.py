"""The protocol surfaces the gateway speaks beside ``/v1``: each a package that other
ecosystems' clients reach unchanged.

=====================  ===========================================================
``agent_protocol``     LangGraph's Agent Server API: threads, runs, assistants, store, crons
``a2a``                A2A 1.0: agent cards, JSON-RPC tasks and messages
``mcp_server``         MCP over Streamable HTTP: every hosted agent is a tool
``openai_api``         OpenAI's Responses, Chat Completions and Models
``ag_ui``              AG-UI: a run's events for CopilotKit-style front ends
=====================  ===========================================================

Each package has the same three names, so ``factory.create_app`` mounts them all one
way: ``PREFIXES`` (its paths, which want an API key like ``/v1``), ``install(app)``
(its routes, and its error shape: ``errors.error_shapes``) and ``lifespan(app)`` (what
it runs while the app serves, such as the MCP SDK's session manager).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Protocol, cast

from fastapi import FastAPI

from reactq.producer.gateway import a2a, ag_ui, agent_protocol, mcp_server, openai_api

__all__ = ["SURFACES", "Surface", "guarded_prefixes", "surfaces_running"]


class Surface(Protocol):
    """What ``factory.create_app`` asks of a protocol package."""

    PREFIXES: tuple[str, ...]

    def install(self, app: FastAPI) -> None:
        """Add the surface's routes (behind ``deps.GUARDS``) and error shape to ``app``."""
        ...

    def lifespan(self, app: FastAPI) -> contextlib.AbstractAsyncContextManager[None]:
        """What the surface runs while ``app`` serves (often nothing)."""
        ...


def _surface(module: ModuleType) -> Surface:
    return cast(Surface, module)


SURFACES: tuple[Surface, ...] = tuple(
    _surface(m) for m in (agent_protocol, a2a, mcp_server, openai_api, ag_ui)
)
"""Every protocol surface, in the order their routes are mounted."""


def guarded_prefixes() -> tuple[str, ...]:
    """Every surface's paths: each wants an API key when keys are configured."""
    return tuple(prefix for surface in SURFACES for prefix in surface.PREFIXES)


@contextlib.asynccontextmanager
async def surfaces_running(app: FastAPI) -> AsyncIterator[None]:
    """Every surface's ``lifespan``, entered in order and left in reverse."""
    async with contextlib.AsyncExitStack() as stack:
        for surface in SURFACES:
            await stack.enter_async_context(surface.lifespan(app))
        yield
