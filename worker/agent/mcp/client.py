"""MCPClient: one MCP server's session, on the official ``mcp`` SDK.

The SDK's transports and ``ClientSession`` are anyio context managers that must
be entered and left by one task, so each open session lives in a task of its
own that holds the contexts until it is told to close. Calls from any number
of turns go through that session concurrently. A session whose transport died
(the child exited, the connection dropped) is closed, and the next call opens
a new one: a failed call is an ``MCPError``, never a hung or dead worker.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import TYPE_CHECKING, Any

from reactq.shared.errors import MCPError
from reactq.worker.agent.mcp.transport import (
    http_transport,
    redact_url,
    safe_environment,
    stdio_transport,
)

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.shared.dispatcher import ProgressFnT
    from mcp_types import CallToolResult
    from mcp_types import Tool as MCPToolSpec

__all__ = ["MCPClient"]

log = logging.getLogger("reactq.mcp")

MAX_LIST_PAGES = 100
# JSON-RPC "connection closed": the session is gone, not the call refused.
_CONNECTION_CLOSED = -32000


class _Session:
    """One open session and the task that holds its contexts."""

    def __init__(self) -> None:
        self.session: ClientSession | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.dead = False


class MCPClient:
    """A connection to one MCP server, over streamable HTTP (``url=``) or stdio (``command=``).

    Nothing connects at construction: ``await connect()`` (or the first call)
    opens the session on the running loop. Use ``async with`` or ``aclose()``.
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        inherit_env: Sequence[str] = (),
        cwd: str | os.PathLike[str] | None = None,
        name: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 30.0,
    ) -> None:
        if (url is None) == (command is None):
            raise ValueError("MCPClient needs exactly one of url= (HTTP) or command=[...] (stdio)")
        if url is not None:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError("MCPClient url= must be an http:// or https:// URL")
            if env or inherit_env or cwd is not None:
                raise ValueError("MCPClient env=/inherit_env=/cwd= apply to command=, not url=")
        else:
            if isinstance(command, str | bytes) or not command:
                raise ValueError("MCPClient command= must be a non-empty list, e.g. ['npx', 'srv']")
            if not all(isinstance(part, str) and part for part in command):
                raise ValueError("MCPClient command= must hold non-empty strings")
            if headers:
                raise ValueError("MCPClient headers= apply to url=, not command=")
        for label, mapping in (("headers", headers), ("env", env)):
            if mapping is not None and not all(
                isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
            ):
                raise ValueError(f"MCPClient {label}= must map strings to strings")
        if isinstance(inherit_env, str):
            raise ValueError("MCPClient inherit_env= must be a list of variable names")
        for knob, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if isinstance(value, bool) or not value > 0:
                raise ValueError(f"MCPClient {knob}= must be > 0 seconds, got {value!r}")
        self.url = url
        self.command = tuple(command) if command is not None else None
        self._headers = dict(headers or {})
        self._env = dict(env or {})
        self.inherit_env = tuple(inherit_env)
        self.cwd = os.fspath(cwd) if cwd is not None else None
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self.name = name or (
            redact_url(url) if url is not None else os.path.basename(self.command[0])  # type: ignore[index]
        )
        """How the server is shown in logs and errors (never a full URL, header or env value)."""
        self._current: _Session | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False

    def __repr__(self) -> str:
        where = redact_url(self.url) if self.url is not None else f"command={self.command[0]!r}"  # type: ignore[index]
        return f"MCPClient({self.name!r}, {where})"

    async def __aenter__(self) -> MCPClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def connected(self) -> bool:
        """True while a session is open and its transport alive."""
        current = self._current
        return current is not None and not current.dead and current.session is not None

    async def connect(self) -> None:
        """Open the session unless one is open (a dead one is replaced); MCPError if it fails."""
        await self._session()

    async def list_tools(self) -> list[MCPToolSpec]:
        """Every tool the server offers, following ``tools/list`` pagination."""
        from mcp_types import PaginatedRequestParams

        session = await self._session()
        tools: list[MCPToolSpec] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._guard(session, "tools/list", session.list_tools(params=params))
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools
        raise MCPError(
            f"MCP server {self.name}: tools/list did not end after {MAX_LIST_PAGES} pages",
            server=self.name,
        )

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float | None = None,
        on_progress: ProgressFnT | None = None,
    ) -> CallToolResult:
        """Call a tool; the result may carry ``is_error`` (the tool failed, the server is fine).
        ``on_progress(progress, total, message)`` receives the server's progress
        notifications for the call.

        Raises MCPError when the server cannot be reached or the call dies with
        the transport (the session is then reopened on the next call).
        """
        session = await self._session()
        limit = timeout if timeout is not None else self.timeout
        return await self._guard(
            session,
            f"tools/call {name!r}",
            session.call_tool(
                name, dict(arguments), read_timeout_seconds=limit, progress_callback=on_progress
            ),
        )

    async def aclose(self) -> None:
        """Close the session and stop its transport (the child, the HTTP session); final."""
        self._closed = True
        current, self._current = self._current, None
        if current is not None:
            await self._shutdown(current)

    # -- internals -----------------------------------------------------------------------

    async def _session(self) -> ClientSession:
        if self._closed:
            raise MCPError(f"MCP server {self.name}: the client is closed", server=self.name)
        current = self._current
        if current is not None and current.session is not None and _closed_underneath(current):
            current.dead = True  # the transport ended while idle: reopen before sending
        if current is not None and not current.dead and current.session is not None:
            return current.session
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            current = self._current
            if current is not None and not current.dead and current.session is not None:
                return current.session
            if current is not None:
                self._current = None
                await self._shutdown(current)
                log.info("MCP server %s: reopening its session", self.name)
            opened = await self._open()
            self._current = opened
            assert opened.session is not None
            return opened.session

    async def _open(self) -> _Session:
        try:
            import mcp  # noqa: F401
        except ImportError:
            raise ImportError(
                "MCP servers need the 'mcp' package: pip install 'reactq[mcp]'"
            ) from None
        holder = _Session()
        holder.task = asyncio.create_task(self._hold(holder), name=f"mcp:{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(holder.ready), self.connect_timeout)
        except TimeoutError:
            await self._shutdown(holder)
            raise MCPError(
                f"MCP server {self.name}: no session within {self.connect_timeout:g} s",
                server=self.name,
            ) from None
        except BaseException as exc:
            await self._shutdown(holder)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise MCPError(
                f"MCP server {self.name}: cannot connect: {self._describe(exc)}", server=self.name
            ) from None
        log.info("MCP server %s: session open", self.name)
        return holder

    async def _hold(self, holder: _Session) -> None:
        """Enter the transport and session, hold them until told to stop, then leave them."""
        from mcp import ClientSession

        try:
            async with AsyncExitStack() as stack:
                transport: AbstractAsyncContextManager[Any]
                if self.url is not None:
                    transport = http_transport(self.url, self._headers, self.connect_timeout)
                else:
                    assert self.command is not None
                    env = safe_environment(self._env, self.inherit_env)
                    transport = stdio_transport(self.command, env, self.cwd)
                read, write = await stack.enter_async_context(transport)
                session = await stack.enter_async_context(
                    ClientSession(read, write, read_timeout_seconds=self.timeout)
                )
                await session.initialize()
                holder.session = session
                holder.ready.set_result(None)
                await holder.stop.wait()
        except BaseException as exc:
            if not holder.ready.done():
                holder.ready.set_exception(exc if isinstance(exc, Exception) else MCPError("stop"))
            elif not holder.stop.is_set():
                log.warning("MCP server %s: session ended: %s", self.name, self._describe(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            holder.dead = True

    async def _shutdown(self, holder: _Session) -> None:
        holder.dead = True
        holder.stop.set()
        task = holder.task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), 10)
            except TimeoutError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            except Exception:  # already reported by _hold
                pass
        if holder.ready.done() and not holder.ready.cancelled():
            holder.ready.exception()  # retrieved: asyncio would log it as never retrieved

    async def _guard(self, session: ClientSession, what: str, call: Any) -> Any:
        """Await an SDK call; a transport failure kills the session and raises MCPError."""
        from mcp.shared.exceptions import MCPError as SDKError

        try:
            return await call
        except asyncio.CancelledError:
            raise
        except SDKError as exc:
            if exc.code == _CONNECTION_CLOSED:
                self._mark_dead(session)
            raise MCPError(
                f"MCP server {self.name}: {what} failed: {self._scrub(exc.message)}",
                server=self.name,
                rpc_code=exc.code,
            ) from None
        except Exception as exc:
            self._mark_dead(session)
            raise MCPError(
                f"MCP server {self.name}: {what} failed: {self._describe(exc)}", server=self.name
            ) from None

    def _mark_dead(self, session: ClientSession) -> None:
        current = self._current
        if current is not None and current.session is session:
            current.dead = True
            current.stop.set()

    def _describe(self, exc: BaseException) -> str:
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        text = str(exc)
        return f"{type(exc).__name__}: {self._scrub(text)}" if text else type(exc).__name__

    def _scrub(self, text: str) -> str:
        """Text without the full URL or a header value (errors reach logs and the model)."""
        if self.url is not None:
            text = text.replace(self.url, self.name)
            base = self.url.split("?", 1)[0]
            text = text.replace(base, self.name)
        for value in (*self._headers.values(), *self._env.values()):
            if len(value) >= 4:
                text = text.replace(value, "***")
        return text[:500]


def _closed_underneath(holder: _Session) -> bool:
    """True when the SDK's dispatcher saw its transport end (best effort, private state)."""
    dispatcher = getattr(holder.session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))
