"""How an MCP server is reached: stdio (a child process) or streamable HTTP.

Secrets stay in the worker: a stdio server gets only ``SAFE_ENV_VARS`` of the
worker's environment plus what its config names, and a URL is shown (in logs,
errors and reprs) as ``scheme://host`` only, since paths and queries carry
tokens often enough.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

from reactq.shared.settings import Settings

__all__ = ["SAFE_ENV_VARS", "redact_url", "safe_environment"]

SAFE_ENV_VARS = ("PATH", "HOME", "TMPDIR", "LANG", "LANGUAGE", "LC_ALL")
"""Variables a stdio server inherits from the worker (plus every ``LC_*``)."""


def redact_url(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: no user, password, path or query."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<invalid url>"
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{parts.scheme or '?'}://{host}{port}"


def safe_environment(extra: Mapping[str, str], inherit: Sequence[str]) -> dict[str, str]:
    """The environment of a stdio server: safe variables, ``inherit`` names, then ``extra``.

    The first two come from this worker's environment, through ``Settings.process_env``.
    """
    names = {*SAFE_ENV_VARS, *inherit}
    env = Settings.process_env(lambda key: key in names or key.startswith("LC_"))
    env.update(extra)
    return env


_URL_RE = re.compile(r"""https?://[^\s"'<>]+""")
# Loggers that print endpoint URLs: the SDK's HTTP client logs every request's full
# URL at INFO, and the SDK's transports log the endpoint at DEBUG.
_URL_LOGGERS = (
    "httpx2",
    "httpx",
    "mcp.client.streamable_http",
    "mcp.client.sse",
    "mcp.client.auth",
)


class _RedactURLs(logging.Filter):
    """Rewrites every URL of a log record's message to ``scheme://host``."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to the handler
            return True
        if "://" in message:
            record.msg = _URL_RE.sub(lambda m: redact_url(m.group(0)), message)
            record.args = ()
        return True


_FILTERED: set[str] = set()


def _redact_http_logs() -> None:
    for name in _URL_LOGGERS:
        if name not in _FILTERED:
            logging.getLogger(name).addFilter(_RedactURLs())
            _FILTERED.add(name)


def stdio_transport(
    command: Sequence[str], env: Mapping[str, str], cwd: str | None
) -> AbstractAsyncContextManager[Any]:
    """The SDK's stdio transport for ``command`` (a child process with exactly ``env``)."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=command[0], args=list(command[1:]), env=dict(env), cwd=cwd
    )
    return stdio_client(params, errlog=sys.stderr)


@asynccontextmanager
async def http_transport(
    url: str, headers: Mapping[str, str], timeout: float
) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP transport, with ``headers`` on every request."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    _redact_http_logs()
    # A long read timeout: a server may hold a response stream open while a tool runs.
    client = httpx2.AsyncClient(
        headers=dict(headers), timeout=httpx2.Timeout(timeout, read=max(timeout, 300.0))
    )
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams
