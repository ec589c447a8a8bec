"""The ASGI endpoint at ``/mcp``: the request handed to the SDK's session manager, with
the caller's key as its authenticated user, or a JSON-RPC error when no MCP server runs.

The key as the user is what the SDK's session manager binds a 2025-11-25 session to: a
request with another key finds no such session (404), as the SDK answers for a session
another credential opened.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from reactq.producer.gateway.security import KeyScope

__all__ = ["MISSING_SDK", "McpEndpoint", "jsonrpc_error_body"]

MISSING_SDK = "the MCP server needs the 'mcp' package: pip install 'reactq[mcp]'"
"""What ``/mcp`` answers when the ``mcp`` extra is not installed."""

# JSON-RPC's "internal error": the server cannot serve the request at all.
_INTERNAL_ERROR = -32603


def jsonrpc_error_body(code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error with no request id (what a transport-level refusal carries)."""
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    body = jsonrpc_error_body(_INTERNAL_ERROR, message)
    await JSONResponse(body, status_code=status)(scope, receive, send)


def _as_user(scope: KeyScope) -> Any:
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    # The token itself never leaves the gateway's guards: the key's name stands for it.
    return AuthenticatedUser(AccessToken(token=scope.name, client_id=scope.name, scopes=[]))


class McpEndpoint:
    """``/mcp``: the SDK's Streamable HTTP transport, once the app's lifespan started it
    (``app.state.mcp_manager``); 501 naming the extra without the ``mcp`` package, 503
    while the server is not running."""

    def __init__(self, available: bool) -> None:
        self.available = available

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.available:
            await _refuse(scope, receive, send, 501, MISSING_SDK)
            return
        state = scope["app"].state
        manager = getattr(state, "mcp_manager", None)
        if manager is None:
            await _refuse(
                scope, receive, send, 503, "the MCP server is not running: the gateway is starting"
            )
            return
        key = state.gateway.keys.scope_of_headers(scope["headers"])
        if key is not None:
            scope = {**scope, "user": _as_user(key)}
        await manager.handle_request(scope, receive, send)
