"""OpenAI's front doors on the gateway: Responses (``/v1/responses``), Chat Completions
(``/v1/chat/completions``) and Models (``/v1/models``), a model being a hosted agent.

What is supported, partly or not: docs/guide/openai-clients.md.
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
