"""An MCP server on the gateway at ``/mcp`` (Streamable HTTP): every hosted agent is a
tool, a call runs a turn and returns its final.

What is supported, partly or not: docs/guide/mcp-server.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

__all__ = ["PREFIXES", "install", "lifespan"]

PREFIXES: tuple[str, ...] = ()
"""Its paths: behind the API key, like ``/v1``."""


def install(app: FastAPI) -> None:
    """Add its routes to ``app``."""


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Nothing runs beside the app for it."""
    yield
