"""ScriptedServer: a real OpenAI-compatible HTTP server on 127.0.0.1 for tests and demos.

It answers ``POST /v1/chat/completions`` with whatever its handler returns (a
``Reply``), as JSON or, for ``"stream": true``, as Server-Sent Events split into
several chunks; it speaks HTTP/1.1 with keep-alive, so the real ``openai`` SDK
talks to it exactly as to a provider. ``python -m reactq.worker.agent.llm
--port N`` serves ``demo_model``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import signal
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from reactq.worker.agent.llm.demo import demo_model
from reactq.worker.agent.llm.replies import (
    Reply,
    completion_body,
    prompt_tokens,
    stream_chunks,
)

__all__ = ["Handler", "Reply", "ScriptedServer", "demo_model", "main"]

Handler = Callable[[dict[str, Any]], Reply | Awaitable[Reply]]
"""What answers each request: its JSON body in, a ``Reply`` (or an awaitable of one) out."""
_REASONS = {
    200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 408: "Timeout",
    413: "Payload Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
    502: "Bad Gateway", 503: "Service Unavailable",
}  # fmt: skip
MAX_BODY = 32 * 1024 * 1024


class ScriptedServer:
    """An OpenAI-compatible endpoint driven by ``handler(request_json) -> Reply``.

    Use ``async with ScriptedServer(handler) as server`` on the caller's loop, or
    ``ScriptedServer(handler).start_in_thread()`` / ``stop()`` to host it on a
    private loop in a thread. ``requests`` keeps the last ``max_requests``
    request bodies received (oldest first), ``request_headers`` their HTTP headers
    (names in lower case), ``response_formats`` the ``response_format`` of each
    (None when a request carried none), so a test can see structured output was asked.

    ``requests_per_second`` makes it a provider with a rate limit: a request beyond
    that many in the last second is answered 429 (counted in ``rate_limited``), and
    every answer carries ``x-ratelimit-remaining-requests`` / ``-reset-requests``.

    ``context_window`` makes it a model with a window: a request whose prompt (counted
    as the usage block counts it, about four characters a token) is over that many
    tokens is refused 400 ``context_length_exceeded``; ``prompt_sizes`` keeps every
    request's count.

    ``content_parts`` keeps, per chat request, the content of each of its user messages
    as content parts (a string as one text part). ``refuse_images`` makes it a text-only
    model: True for every model, or the model names that are, refuse a request with an
    image part with 400, as OpenAI does (``Invalid content type. image_url is only
    supported by certain models.``).
    """

    def __init__(
        self,
        handler: Handler = demo_model,
        *,
        latency: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        max_requests: int = 1000,
        requests_per_second: int | None = None,
        context_window: int | None = None,
        refuse_images: bool | Collection[str] = False,
    ) -> None:
        if latency < 0:
            raise ValueError(f"latency must be >= 0 seconds, got {latency!r}")
        if requests_per_second is not None and requests_per_second < 1:
            raise ValueError(f"requests_per_second must be >= 1, got {requests_per_second!r}")
        self.handler = handler
        self.latency = latency
        self.host = host
        self.port = port
        self.max_requests = max_requests
        self.requests: list[dict[str, Any]] = []
        self.response_formats: list[Any] = []
        self.request_headers: list[dict[str, str]] = []
        self.request_count = 0
        self.streams_abandoned = 0
        """Streams the client closed before their end (a cancelled generation)."""
        self.requests_per_second = requests_per_second
        self.rate_limited = 0
        """Requests answered 429 for going over ``requests_per_second``."""
        self.request_times: list[float] = []
        """``time.monotonic()`` of each chat request answered within the rate limit."""
        self.context_window = context_window
        self.prompt_sizes: list[int] = []
        """The prompt tokens of each chat request, as the usage block counts them."""
        self.refuse_images = refuse_images
        self.content_parts: list[list[list[dict[str, Any]]]] = []
        """Per chat request, each user message's content as parts."""
        self._window: deque[float] = deque()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._thread_stop: asyncio.Event | None = None

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    # -- lifecycle on the caller's loop -------------------------------------------

    async def start(self) -> ScriptedServer:
        """Listen (on a free port unless one was given)."""
        self._server = await asyncio.start_server(
            self._serve_connection, self.host, self.port, backlog=4096, limit=MAX_BODY
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def aclose(self) -> None:
        """Stop listening and drop every open connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> ScriptedServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- lifecycle on a private thread --------------------------------------------

    def start_in_thread(self, timeout: float = 10.0) -> ScriptedServer:
        """Serve from a private event loop on a daemon thread; return once listening."""
        ready = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            self._thread_loop = asyncio.get_running_loop()
            self._thread_stop = asyncio.Event()
            try:
                await self.start()
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                return
            ready.set()
            try:
                await self._thread_stop.wait()
            finally:
                await self.aclose()

        self._thread = threading.Thread(
            target=asyncio.run, args=(main(),), name="scripted-llm-server", daemon=True
        )
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError(f"ScriptedServer did not start within {timeout} s")
        if failure:
            self._thread.join(timeout)
            raise failure[0]
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop a server started with ``start_in_thread`` and wait for its thread."""
        if self._thread is None:
            return
        loop, stop = self._thread_loop, self._thread_stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop finished already
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout)
        self._thread = None

    # -- HTTP ---------------------------------------------------------------------

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            while await self._serve_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away or sent garbage: drop the connection
        except asyncio.CancelledError:
            # Only aclose() (or loop shutdown) cancels these tasks. Ending normally
            # keeps Python 3.11's stream callback from logging the cancellation.
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection should close."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False  # a clean close between requests
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            await self._send(writer, 400, b'{"error":{"message":"bad request line"}}', close=True)
            return False
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader)
        else:
            length = int(headers.get("content-length", "0") or 0)
            if length > MAX_BODY:
                await self._send(writer, 413, b'{"error":{"message":"too large"}}', close=True)
                return False
            body = await reader.readexactly(length) if length else b""
        path = target.split("?", 1)[0].rstrip("/")
        if method == "POST" and path.endswith("/chat/completions"):
            await self._chat(body, headers, reader, writer, close=not keep_alive)
        elif method == "GET" and path.endswith("/models"):
            listing = {
                "object": "list",
                "data": [{"id": "scripted", "object": "model", "owned_by": "reactq"}],
            }
            await self._send(writer, 200, json.dumps(listing).encode(), close=not keep_alive)
        else:
            error = {"error": {"message": f"no route for {method} {path}", "code": "not_found"}}
            await self._send(writer, 404, json.dumps(error).encode(), close=not keep_alive)
        return keep_alive

    async def _chat(
        self,
        body: bytes,
        headers: dict[str, str],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        close: bool,
    ) -> None:
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise ValueError("the body is not a JSON object")
        except ValueError as exc:
            error = {"error": {"message": f"invalid JSON body: {exc}", "type": "invalid_request"}}
            await self._send(writer, 400, json.dumps(error).encode(), close=close)
            return
        self.request_count += 1
        self.requests.append(request)
        self.request_headers.append(headers)
        self.response_formats.append(request.get("response_format"))
        if len(self.requests) > self.max_requests:
            del self.requests[: len(self.requests) - self.max_requests]
            del self.request_headers[: len(self.request_headers) - self.max_requests]
            del self.response_formats[: len(self.response_formats) - self.max_requests]
        parts = _user_parts(request)
        self.content_parts.append(parts)
        del self.content_parts[: -self.max_requests]
        if self._refuses_images(request) and any(
            p.get("type") == "image_url" for message in parts for p in message
        ):
            refusal: dict[str, Any] = {
                "error": {
                    "message": "Invalid content type. image_url is only supported by certain "
                    "models.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": None,
                }
            }
            await self._send(writer, 400, json.dumps(refusal).encode(), close=close)
            return
        prompt = prompt_tokens(request)
        self.prompt_sizes.append(prompt)
        if self.context_window is not None and prompt > self.context_window:
            message = (
                f"This model's maximum context length is {self.context_window} tokens; "
                f"the messages are {prompt} tokens"
            )
            error = {"error": {"message": message, "code": "context_length_exceeded"}}
            await self._send(writer, 400, json.dumps(error).encode(), close=close)
            return
        limits: tuple[tuple[str, str], ...] = ()
        if self.requests_per_second is not None:
            refused, limits = self._rate_limit()
            if refused is not None:
                await self._send(writer, 429, refused, headers=limits, close=close)
                return
        if self.latency:
            await asyncio.sleep(self.latency)
        try:
            result = self.handler(request)
            reply = await result if inspect.isawaitable(result) else result
        except Exception as exc:  # a broken handler is the test's bug: say so as a 500
            error = {"error": {"message": f"handler raised {type(exc).__name__}: {exc}"}}
            await self._send(writer, 500, json.dumps(error).encode(), close=close)
            return
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if limits:
            reply = reply.but(headers=(*limits, *reply.headers))
        if not reply.is_completion:
            assert reply.body is not None
            await self._send(
                writer, reply.status, reply.body, reply.content_type, reply.headers, close=close
            )
        elif request.get("stream"):
            await self._stream(reader, writer, reply, request, close=close)
        else:
            payload = _json_bytes(completion_body(reply, request))
            await self._send(writer, reply.status, payload, headers=reply.headers, close=close)

    def _refuses_images(self, request: Mapping[str, Any]) -> bool:
        if isinstance(self.refuse_images, bool):
            return self.refuse_images
        return request.get("model") in self.refuse_images

    def _rate_limit(self) -> tuple[bytes | None, tuple[tuple[str, str], ...]]:
        """Count a request against ``requests_per_second`` (a sliding one-second
        window): the body of a 429 when it is one too many (else None), and the
        rate-limit headers of the answer."""
        assert self.requests_per_second is not None
        now = time.monotonic()
        window = self._window
        while window and window[0] <= now - 1.0:
            window.popleft()
        over = len(window) >= self.requests_per_second
        if over:
            self.rate_limited += 1
        else:
            window.append(now)
            self.request_times.append(now)
        reset_ms = max(1, round((window[0] + 1.0 - now) * 1000)) if window else 0
        headers = (
            ("x-ratelimit-limit-requests", str(self.requests_per_second)),
            ("x-ratelimit-remaining-requests", str(self.requests_per_second - len(window))),
            ("x-ratelimit-reset-requests", f"{reset_ms}ms"),
        )
        if not over:
            return None, headers
        error = {"error": {"message": "rate limit exceeded", "type": "requests", "code": None}}
        return json.dumps(error).encode(), (*headers, ("retry-after-ms", str(reset_ms)))

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: tuple[tuple[str, str], ...] = (),
        *,
        close: bool = False,
    ) -> None:
        head = _head(status, content_type, headers, close) + f"Content-Length: {len(body)}\r\n\r\n"
        writer.write(head.encode("latin-1") + body)
        await writer.drain()

    async def _stream(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        reply: Reply,
        request: Mapping[str, Any],
        *,
        close: bool,
    ) -> None:
        head = _head(reply.status, "text/event-stream", reply.headers, close)
        writer.write(
            (head + "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
        )
        events = [_json_bytes(c).decode() for c in stream_chunks(reply, request)]
        for sent, data in enumerate([*events, "[DONE]"]):
            if sent == reply.cut_after:
                # A stream cut mid-way: the connection drops without the closing chunk.
                raise ConnectionResetError("scripted cut")
            if sent == reply.stall_after:
                await self._await_hangup(reader)
                return
            if sent and reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
            frame = f"data: {data}\n\n".encode()
            # One HTTP chunk per SSE event, flushed, so the client really sees fragments.
            writer.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _await_hangup(self, reader: asyncio.StreamReader) -> None:
        while await reader.read(4096):
            pass
        self.streams_abandoned += 1
        raise ConnectionResetError("the client hung up mid-stream")


def _json_bytes(data: Any) -> bytes:
    """``data`` as UTF-8 JSON; text UTF-8 cannot carry (a lone surrogate a test scripts)
    is escaped (``\\ud800``), as many real endpoints send it."""
    try:
        return json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(data).encode()


def _user_parts(request: Mapping[str, Any]) -> list[list[dict[str, Any]]]:
    """Each user message's content as content parts."""
    found: list[list[dict[str, Any]]] = []
    for message in request.get("messages") or ():
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                found.append([p for p in content if isinstance(p, dict)])
            else:
                found.append([{"type": "text", "text": str(content)}])
    return found


def _head(status: int, content_type: str, headers: tuple[tuple[str, str], ...], close: bool) -> str:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", f"Content-Type: {content_type}"]
    lines += [f"{name}: {value}" for name, value in headers]
    lines.append("Connection: close" if close else "Connection: keep-alive")
    return "\r\n".join(lines) + "\r\n"


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # the empty trailer
            return bytes(body)
        body += await reader.readexactly(size)
        await reader.readexactly(2)
        if len(body) > MAX_BODY:
            raise ConnectionError("chunked body too large")


def main(argv: list[str] | None = None) -> None:
    """Serve ``demo_model`` until interrupted (``--port``, ``--latency``, ``--host``)."""
    parser = argparse.ArgumentParser(
        prog="python -m reactq.worker.agent.llm",
        description="An offline OpenAI-compatible endpoint answering with the demo model.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    args = parser.parse_args(argv)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        async with ScriptedServer(
            demo_model, latency=args.latency, host=args.host, port=args.port
        ) as server:
            print(
                f"scripted OpenAI-compatible server (demo model) on {server.base_url}", flush=True
            )
            await stop.wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
