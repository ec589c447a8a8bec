"""A2A 1.0 on the gateway: every hosted agent as an A2A agent (its card, JSON-RPC
tasks and messages), a task being a turn and a context a session.

Built on the official ``a2a-sdk`` (the ``a2a`` extra): its JSON-RPC dispatcher speaks
the wire (methods, errors, SSE, the v0.3 adapter), its protobuf types are the task,
message and card; reactq gives the ``RequestHandler``. One module per part:

============  ====================================================================
``endpoint``  the routes: ``/a2a/{agent}`` (JSON-RPC), the cards
``handler``   the SDK's ``RequestHandler``: messages as turns, tasks from turns
``messages``  A2A parts to a turn's input; the answer to an approval
``tasks``     a turn as a task: state, status message, artifacts
``cards``     an agent's card: skills, capabilities, security scheme
``index``     the tasks A2A started, per tenant, for ``ListTasks``
============  ====================================================================

Without the ``a2a-sdk`` package the gateway serves everything else without these
routes. What is supported, partly or not: docs/guide/a2a.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from reactq.producer.gateway.deps import GUARDS
from reactq.producer.gateway.errors import ERROR_RESPONSES, error_shapes
from reactq.producer.gateway.models import ErrorBody

__all__ = [
    "A2A_ERRORS",
    "PATH",
    "PREFIXES",
    "JsonRpcError",
    "JsonRpcErrorBody",
    "available",
    "install",
    "lifespan",
]

PATH = "/a2a"
"""Where the agents answer: ``/a2a/{agent}``."""

PREFIXES: tuple[str, ...] = (PATH, "/.well-known/agent-card.json")
"""Its paths: behind the API key, like ``/v1``."""

# JSON-RPC codes for the gateway's own refusals under /a2a (an unknown agent, a key
# that may not reach it): the request was not one this server takes.
_INVALID_REQUEST = -32600
_INTERNAL_ERROR = -32603


class JsonRpcError(BaseModel):
    """A JSON-RPC error object."""

    code: int
    """Its JSON-RPC code: -32600 for a request this server refuses, -32603 its failure."""
    message: str
    """What went wrong."""
    data: dict[str, Any] | None = None
    """``{"reason": ...}``: reactq's error code."""


class JsonRpcErrorBody(BaseModel):
    """A JSON-RPC error response: how the gateway's own refusals read under ``/a2a``."""

    jsonrpc: str = "2.0"
    """Always "2.0"."""
    id: str | int | None = None
    """The request's id (None: the refusal came before it was read)."""
    error: JsonRpcError
    """The error."""


A2A_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": JsonRpcErrorBody, "description": answer["description"]}
    for status, answer in ERROR_RESPONSES.items()
}
"""The error responses of the A2A routes, for the OpenAPI document."""


def available() -> bool:
    """True when the ``a2a-sdk`` package (the ``a2a`` extra) is installed and imports."""
    try:
        import a2a.server.routes.jsonrpc_dispatcher  # noqa: F401
    except ImportError:
        return False
    return True


def _error_shape(status: int, body: ErrorBody) -> tuple[int, dict[str, Any]]:
    code = _INTERNAL_ERROR if status >= 500 else _INVALID_REQUEST
    error = {"code": code, "message": body.message, "data": {"reason": body.code}}
    return status, {"jsonrpc": "2.0", "id": None, "error": error}


def install(app: FastAPI) -> None:
    """Add the A2A routes to ``app`` behind the key (nothing without the SDK), and word
    the gateway's errors under ``/a2a`` as JSON-RPC errors."""
    if not available():
        return
    from reactq.producer.gateway.a2a.endpoint import router

    app.include_router(router, dependencies=GUARDS, responses=A2A_ERRORS)
    error_shapes(app)[PATH] = _error_shape


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The push notifications' follower of tasks (``push.py``): it resumes the tasks a
    gateway before it followed, and stops with the app."""
    if not available():
        yield
        return
    from reactq.producer.gateway.a2a.push import Pusher

    pusher = Pusher(app.state.gateway)
    app.state.a2a_pusher = pusher
    pusher.resume()
    try:
        yield
    finally:
        await pusher.close()
