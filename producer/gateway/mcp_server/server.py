"""The MCP server itself: the SDK's low-level ``Server`` with reactq's two handlers
(``tools/list``, ``tools/call``), and the SDK's Streamable HTTP session manager that
serves it.

Who calls is read from each request's own headers (the gateway's API key), so every
list and call is scoped to the key that sent it, on a 2025-11-25 session as on the
stateless 2026-07-28 core.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import mcp_types as types
from fastapi import FastAPI
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from redis.exceptions import RedisError
from starlette.requests import Request

from reactq.producer.gateway.errors import unavailable_message
from reactq.producer.gateway.mcp_server.calls import run_call, tool_error
from reactq.producer.gateway.mcp_server.tools import (
    INPUT_SCHEMA,
    ToolInputError,
    arguments_of,
    tool_of,
    visible_agents,
)
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
from reactq.shared.errors import ServiceUnavailableError, UnknownAgentError

__all__ = ["INSTRUCTIONS", "build_server", "session_manager"]

logger = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Each tool is an agent of a reactq pool: call it with a message and it answers after "
    "its turn (its tools, its model). Pass the session_id a result names to continue "
    "that conversation."
)
"""What the server tells a host about its tools."""


def _version() -> str:
    try:
        return version("reactq")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def _scope(gateway: Gateway, ctx: ServerRequestContext[Any, Any]) -> KeyScope | None:
    """The scope of the key on the request that carried this message (None: the gateway
    has no keys). The guards let no request without a valid key reach ``/mcp``; a
    message that still has none is refused, never served as if unrestricted."""
    if not gateway.keys.enabled:
        return None
    request = ctx.request
    scope = (
        gateway.keys.scope_of_headers(request.headers.raw) if isinstance(request, Request) else None
    )
    if scope is None:
        raise MCPError(code=types.INVALID_REQUEST, message="a valid API key is required")
    return scope


def _failure(exc: Exception) -> str:
    """What a caller is told when the pool could not serve it (the class only: a message
    may carry a URL with a password); the detail goes to the log."""
    outage = isinstance(exc, RedisError | ServiceUnavailableError)
    logger.warning("MCP request failed: %s", exc, exc_info=not outage)
    if isinstance(exc, RedisError | OSError):
        return f"the pool's Redis does not answer ({type(exc).__name__})"
    if isinstance(exc, ServiceUnavailableError):
        return f"the pool's {unavailable_message(exc)}"
    return f"the gateway could not serve the call ({type(exc).__name__})"


def build_server(app: FastAPI) -> Server[Any]:
    """The MCP server of ``app``'s gateway (``app.state.gateway``, set before it serves)."""

    def gateway() -> Gateway:
        found: Gateway = app.state.gateway
        return found

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        gw = gateway()
        scope = _scope(gw, ctx)
        try:
            catalogues = await visible_agents(gw, scope)
        except Exception as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=_failure(exc)) from None
        return types.ListToolsResult(tools=[tool_of(c) for c in catalogues])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        gw = gateway()
        scope = _scope(gw, ctx)
        name = params.name
        try:
            if scope is not None and not scope.may_run(name):
                raise UnknownAgentError(name)
            catalogue = await gw.producer.agent_tools(name)
        except UnknownAgentError:
            # The protocol's answer to a tool it does not list; another tenant's agent
            # is answered the same, so a key does not learn which others exist.
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}") from None
        except Exception as exc:
            return tool_error(_failure(exc))
        try:
            args = arguments_of(params.arguments)
        except ToolInputError as exc:
            return tool_error(f"invalid arguments: {exc}")

        async def progress(count: float, message: str) -> None:
            await ctx.session.report_progress(count, None, message)

        try:
            return await run_call(
                gw, scope, name, catalogue.output_schema is not None, args, progress
            )
        except Exception as exc:  # not a cancellation: that is a BaseException
            return tool_error(_failure(exc))

    return Server(
        "reactq",
        version=_version(),
        title="reactq agents",
        description="The agents of a reactq pool, as tools",
        instructions=INSTRUCTIONS,
        # Every tool has the one input schema: without this, the SDK would list the
        # tools again (Redis reads) for each 2026-07-28 call, to check Mcp-Param headers.
        get_tool_input_schema=lambda name: INPUT_SCHEMA,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def session_manager(app: FastAPI, max_request_bytes: int) -> StreamableHTTPSessionManager:
    """The SDK's session manager for ``app``'s MCP server: a 2026-07-28 request is served
    on its own (no session), a 2025-11-25 client gets a session (``Mcp-Session-Id``) that
    lives in this gateway process. SSE responses, so progress reaches the client while
    the turn runs."""
    return StreamableHTTPSessionManager(
        app=build_server(app),
        json_response=False,
        stateless=False,
        max_request_body_size=max_request_bytes,
    )
