"""A2A 1.0 on the gateway: every hosted agent as an A2A agent (its card, JSON-RPC
tasks and messages), a task being a turn and a context a session.

What is supported, partly or not: docs/guide/a2a.md.
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
