"""The Agent Protocol (LangGraph's Agent Server API) on the gateway, beside ``/v1``.

LangGraph's clients (``langgraph-sdk`` for Python, ``@langchain/langgraph-sdk`` for
JavaScript) talk to a reactq pool unchanged: a thread is a reactq session, a run is a
turn, an assistant is a hosted agent (``graph_id`` = the agent's name). The routes sit
at the paths LangGraph's server serves them (``/threads``, ``/runs``, ``/assistants``,
``/store``, ``/crons``), behind the same API keys and tenant scoping as ``/v1``
(``factory.py`` mounts them). One module per resource:

=================  ==============================================================
``threads``        threads: create, get, search, count, patch, delete, copy, state, history
``runs``           runs on a thread or stateless: create, wait, stream, join, cancel
``assistants``     assistants: one per hosted agent and its config versions
``store``          the long-term store's items and namespaces
``crons``          scheduled runs over reactq's schedules
=================  ==============================================================

What is supported, partly or not: docs/guide/agent-protocol.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import APIRouter, FastAPI

from reactq.producer.gateway.agent_protocol import assistants, crons, runs, store, threads
from reactq.producer.gateway.deps import GUARDS
from reactq.producer.gateway.errors import ERROR_RESPONSES

__all__ = ["PREFIXES", "ROUTERS", "install", "lifespan"]

ROUTERS: list[APIRouter] = [
    assistants.router,
    threads.router,
    runs.router,
    store.router,
    crons.router,
]
"""The Agent Protocol's routers, mounted at the root of the gateway."""

PREFIXES = ("/assistants", "/threads", "/runs", "/store", "/crons")
"""Their paths: behind the API key, like ``/v1``."""


def install(app: FastAPI) -> None:
    """Mount its routers at the root of ``app``, behind the key; errors keep reactq's
    ``ErrorBody`` (the SDK raises on the status, and shows the body)."""
    for router in ROUTERS:
        app.include_router(router, dependencies=GUARDS, responses=ERROR_RESPONSES)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Nothing runs beside the app for it."""
    yield
