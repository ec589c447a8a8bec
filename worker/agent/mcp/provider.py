"""MCPProvider: an MCP server's tools, registered in a Registry beside local tools."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from reactq.shared.errors import MCPError, ToolError
from reactq.worker.agent.mcp.client import MCPClient
from reactq.worker.agent.mcp.content import ToolErrorScreen, result_text, screen_error
from reactq.worker.agent.tools import Registry, Tool, ToolCategory, ToolContext
from reactq.worker.agent.tools.progress import reporter

if TYPE_CHECKING:
    from mcp.shared.dispatcher import ProgressFnT
    from mcp_types import Tool as MCPToolSpec

__all__ = ["MCPProvider", "MCPTool"]

log = logging.getLogger("reactq.mcp")

_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


async def _placeholder(ctx: ToolContext) -> None:
    """Stands in for a function: an MCP tool's call goes to its server."""


class MCPTool(Tool):
    """A tool of an MCP server: the server's schema, and calls sent to the server.

    Arguments are checked by the server (its answer to bad ones is an error
    result the model reads); a transport failure is a tool error for this call.
    """

    def __init__(
        self,
        provider: MCPProvider,
        spec: MCPToolSpec,
        name: str,
        *,
        timeout: float | None = None,
    ) -> None:
        description = spec.description or spec.title or f"The MCP tool {spec.name}."
        # MCP's default is "may change things": only a server's readOnlyHint makes it READ.
        reads = bool(spec.annotations and spec.annotations.read_only_hint is True)
        super().__init__(
            _placeholder,
            name=name,
            description=description,
            timeout=timeout,
            category=ToolCategory.READ if reads else ToolCategory.WRITE,
            source="mcp",
            origin=provider.client.name,
        )
        self.provider = provider
        self.remote_name = spec.name
        """The tool's name on its server (``name`` may carry a prefix)."""
        schema = dict(spec.input_schema or _EMPTY_SCHEMA)
        schema.pop("$schema", None)  # some model endpoints refuse the meta-schema key
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        self.parameters = schema

    def __repr__(self) -> str:
        return f"MCPTool(name={self.name!r}, server={self.provider.client.name!r})"

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        """The arguments as given: the server validates them against its own schema."""
        return args

    async def call(self, args: dict[str, Any], ctx: ToolContext | None = None) -> Any:
        """Send ``tools/call``; an ``isError`` result or a transport failure raises ToolError."""
        client = self.provider.client
        try:
            result = await client.call_tool(
                self.remote_name, args, timeout=self.timeout, on_progress=_forwarder()
            )
        except MCPError as exc:
            raise ToolError(exc.message, tool=self.name, server=client.name) from None
        if result.is_error:
            text = await screen_error(self.provider.on_tool_error, self.remote_name, result)
            raise ToolError(text, tool=self.name, server=client.name)
        return result_text(result)


def _forwarder() -> ProgressFnT | None:
    """The running call's ``tool_progress`` for the server's progress notifications
    (the SDK calls it from its session's reader task: bound to the call here)."""
    send = reporter()
    if send is None:
        return None

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        fraction = progress / total if total else None
        await send(message or "", fraction, {"progress": progress, "total": total})

    return forward


class MCPProvider:
    """Registers one MCP server's tools in a Registry: ``await provider.attach(registry)``.

    ``prefix`` goes in front of every tool name (``"docs_"`` -> ``docs_search``);
    ``allow`` keeps only the named tools and ``block`` drops the named ones
    (both by the server's own names). ``on_tool_error(message, content)`` screens
    the server's text of a failed call before the model reads it.
    """

    def __init__(
        self,
        client: MCPClient,
        *,
        prefix: str = "",
        allow: Iterable[str] | None = None,
        block: Iterable[str] = (),
        on_tool_error: ToolErrorScreen | None = None,
        tool_timeout: float | None = None,
        required: bool = True,
    ) -> None:
        if not isinstance(client, MCPClient):
            raise ValueError(f"MCPProvider needs an MCPClient, got {type(client).__name__}")
        if not isinstance(prefix, str) or _INVALID_NAME_CHARS.search(prefix) or len(prefix) > 32:
            raise ValueError(
                f"MCP tool prefix {prefix!r} is invalid: use up to 32 of [A-Za-z0-9_-]"
            )
        if isinstance(allow, str) or isinstance(block, str):
            raise ValueError("MCPProvider allow=/block= must be lists of tool names")
        if on_tool_error is not None and not callable(on_tool_error):
            raise ValueError("MCPProvider on_tool_error= must be callable")
        if tool_timeout is not None and (isinstance(tool_timeout, bool) or not tool_timeout > 0):
            raise ValueError(f"MCPProvider tool_timeout= must be > 0 or None, got {tool_timeout!r}")
        self.client = client
        self.prefix = prefix
        self.allow = frozenset(allow) if allow is not None else None
        self.block = frozenset(block)
        self.on_tool_error = on_tool_error
        self.tool_timeout = tool_timeout
        self.required = bool(required)
        """False: a server that cannot be reached at start is skipped (logged), not fatal."""

    def __repr__(self) -> str:
        return f"MCPProvider({self.client!r}, prefix={self.prefix!r})"

    def selects(self, remote_name: str) -> bool:
        """True when the allow/block lists keep the server's tool ``remote_name``."""
        if remote_name in self.block:
            return False
        return self.allow is None or remote_name in self.allow

    def local_name(self, remote_name: str) -> str:
        """The registry name of a server tool: prefixed, invalid characters made ``_``, <= 64."""
        return (self.prefix + _INVALID_NAME_CHARS.sub("_", remote_name))[:64]

    async def tools(self) -> list[MCPTool]:
        """The selected tools of the server (connecting if need be)."""
        specs = await self.client.list_tools()
        out: list[MCPTool] = []
        seen: set[str] = set()
        for spec in specs:
            if not self.selects(spec.name):
                continue
            name = self.local_name(spec.name)
            if name in seen:
                log.warning(
                    "MCP server %s: tool %r maps to %r like another; skipped",
                    self.client.name,
                    spec.name,
                    name,
                )
                continue
            seen.add(name)
            out.append(MCPTool(self, spec, name, timeout=self.tool_timeout))
        return out

    async def attach(self, registry: Registry) -> list[MCPTool]:
        """Register the server's selected tools in ``registry``; return them.

        A name already in the registry raises ValueError (use ``prefix=``).
        """
        tools = await self.tools()
        clashes = [t.name for t in tools if t.name in registry]
        if clashes:
            raise ValueError(
                f"MCP server {self.client.name}: tool names {clashes} are already registered; "
                "give the server a prefix= or block= them"
            )
        for item in tools:
            registry.register(item)
        return tools


def providers_of(servers: Iterable[MCPProvider | MCPClient]) -> tuple[MCPProvider, ...]:
    """``Agent(mcp_servers=...)`` items as providers (a bare MCPClient gets the defaults)."""
    out: list[MCPProvider] = []
    for item in servers:
        if isinstance(item, MCPProvider):
            out.append(item)
        elif isinstance(item, MCPClient):
            out.append(MCPProvider(item))
        else:
            raise ValueError(
                f"mcp_servers items must be MCPClient or MCPProvider, not {type(item).__name__}"
            )
    return tuple(out)
