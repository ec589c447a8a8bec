"""A real MCP server on the ``mcp`` package's own server API, for the tests.

``python -m tests.mcp_servers.demo stdio`` serves over stdin/stdout;
``python -m tests.mcp_servers.demo http PORT [TOKEN]`` serves streamable HTTP on
127.0.0.1:PORT at ``/mcp``, refusing requests without ``Authorization: Bearer
TOKEN`` when a token is given. ``tools/list`` is paginated two tools a page, so
a client that does not follow ``nextCursor`` misses tools.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ListToolsResult, PaginatedRequestParams, ToolAnnotations

PAGE_SIZE = 2


class PagedServer(MCPServer):
    """MCPServer whose tools/list answers in pages of PAGE_SIZE."""

    async def _handle_list_tools(  # type: ignore[override]
        self, ctx: Any, params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        tools = await self.list_tools()
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + PAGE_SIZE
        return ListToolsResult(
            tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None
        )


server = PagedServer("reactq-demo", warn_on_duplicate_tools=False, log_level="WARNING")


# Read-only by its annotation: reactq makes it a READ tool (the others, unhinted, WRITE).
@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason (an isError result)."""
    raise ToolError(reason)


@server.tool()
def environment(names: list[str]) -> dict[str, str | None]:
    """The server's values of the named environment variables, and its PID."""
    found: dict[str, str | None] = {name: os.environ.get(name) for name in names}
    found["__pid__"] = str(os.getpid())
    found["__keys__"] = ",".join(sorted(os.environ))
    return found


@server.tool()
def crash() -> str:
    """Exit the server process at once (a transport failure for the client)."""
    os._exit(3)


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "done"


@server.tool()
async def count_up(to: int, ctx: Context) -> str:  # type: ignore[type-arg]
    """Count to ``to``, reporting each step as progress (0.3 s apart)."""
    for i in range(1, to + 1):
        await ctx.report_progress(i, to, f"counted {i}")
        await asyncio.sleep(0.3)
    return f"counted to {to}"


def serve_http(port: int, token: str | None) -> None:
    import uvicorn
    from starlette.types import ASGIApp, Receive, Scope, Send

    inner: ASGIApp = server.streamable_http_app()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if token is not None and scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await inner(scope, receive, send)

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


def main(argv: list[str]) -> None:
    if argv[:1] == ["stdio"]:
        server.run("stdio")
    elif argv[:1] == ["http"] and len(argv) in (2, 3):
        serve_http(int(argv[1]), argv[2] if len(argv) == 3 else None)
    else:
        raise SystemExit("usage: python -m tests.mcp_servers.demo stdio | http PORT [TOKEN]")


if __name__ == "__main__":
    main(sys.argv[1:])
