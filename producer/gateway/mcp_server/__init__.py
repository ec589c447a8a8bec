"""An MCP server on the gateway at ``/mcp`` (Streamable HTTP): every hosted agent is a
tool, a call runs a turn and returns its final.

Built on the official ``mcp`` SDK (the ``mcp`` extra): its low-level ``Server`` and its
``StreamableHTTPSessionManager`` speak the wire (the stateless 2026-07-28 core, and
2025-11-25 sessions for clients that ``initialize``); reactq gives the two handlers. One
module per part:

=============  ==================================================================
``endpoint``   the ASGI endpoint at ``/mcp``: the caller's key, the SDK's transport
``server``     the SDK's ``Server`` with ``tools/list`` and ``tools/call``, its manager
``tools``      the agents a key sees as tools, their schemas, a call's arguments
``calls``      a call as a turn: progress from its events, its final as the result
=============  ==================================================================

Without the ``mcp`` package the gateway serves everything else, and ``/mcp`` answers 501
naming the extra. What is supported, partly or not: docs/guide/mcp-server.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from starlette.routing import Route

from reactq.producer.gateway.errors import error_shapes
from reactq.producer.gateway.mcp_server.endpoint import McpEndpoint, jsonrpc_error_body
from reactq.producer.gateway.models import ErrorBody

__all__ = ["PATH", "PREFIXES", "available", "install", "lifespan"]

PATH = "/mcp"
"""Where the MCP server answers."""

PREFIXES: tuple[str, ...] = (PATH,)
"""Its paths: behind the API key, like ``/v1``."""

# JSON-RPC codes for the gateway's own refusals under /mcp (a path that is not /mcp
# itself, a method the route does not take): the request was not a valid MCP one.
_INVALID_REQUEST = -32600
_INTERNAL_ERROR = -32603


def available() -> bool:
    """True when the ``mcp`` package (the ``mcp`` extra) is installed and imports."""
    try:
        import mcp.server.streamable_http_manager  # noqa: F401
    except ImportError:
        return False
    return True


def _error_shape(status: int, body: ErrorBody) -> tuple[int, dict[str, Any]]:
    code = _INTERNAL_ERROR if status >= 500 else _INVALID_REQUEST
    return status, jsonrpc_error_body(code, body.message)


def install(app: FastAPI) -> None:
    """Add ``/mcp`` to ``app`` (the SDK's transport, or the 501 without the SDK), and
    word the gateway's errors under it as JSON-RPC errors."""
    app.router.routes.append(Route(PATH, endpoint=McpEndpoint(available())))
    error_shapes(app)[PATH] = _error_shape


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Run the SDK's session manager while ``app`` serves (nothing without the SDK)."""
    if not available():
        yield
        return
    from reactq.producer.gateway.mcp_server.server import session_manager

    manager = session_manager(app, app.state.gateway.settings.max_request_bytes)
    async with manager.run():
        app.state.mcp_manager = manager
        try:
            yield
        finally:
            app.state.mcp_manager = None
