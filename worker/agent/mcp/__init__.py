"""MCP: tools from Model Context Protocol servers, on the official ``mcp`` SDK.

``MCPClient`` reaches one server (streamable HTTP or stdio); ``MCPProvider``
registers its tools in a ``Registry``; ``MCPManager`` opens an agent pool's
servers once per worker process. Importing this package does not import the
SDK: connecting does, and fails with an ImportError naming ``reactq[mcp]``
when it is missing.
"""

from reactq.worker.agent.mcp.client import MCPClient
from reactq.worker.agent.mcp.content import (
    MAX_ERROR_CHARS,
    MAX_RESULT_CHARS,
    ToolErrorScreen,
    default_error_message,
)
from reactq.worker.agent.mcp.manager import MCPManager
from reactq.worker.agent.mcp.provider import MCPProvider, MCPTool, providers_of
from reactq.worker.agent.mcp.transport import SAFE_ENV_VARS, redact_url

__all__ = [  # noqa: RUF022 - grouped by purpose, as the style guide asks
    # servers and their tools
    "MCPClient",
    "MCPProvider",
    "MCPTool",
    "providers_of",
    # the worker's lifecycle
    "MCPManager",
    # error text
    "ToolErrorScreen",
    "default_error_message",
    "MAX_ERROR_CHARS",
    "MAX_RESULT_CHARS",
    # safety
    "SAFE_ENV_VARS",
    "redact_url",
]
