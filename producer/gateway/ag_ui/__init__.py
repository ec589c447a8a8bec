"""AG-UI on the gateway: a run's events as AG-UI events for front ends built on it
(CopilotKit, ``@ag-ui/client``), with client-side tools round-tripped.

What is supported, partly or not: docs/guide/ag-ui.md.
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
