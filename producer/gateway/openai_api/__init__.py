"""OpenAI's front doors on the gateway: Responses (``/v1/responses``), Chat Completions
(``/v1/chat/completions``) and Models (``/v1/models``), a model being a hosted agent.

What is supported, partly or not: docs/guide/openai-clients.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import APIRouter, FastAPI

from reactq.producer.gateway.deps import GUARDS
from reactq.producer.gateway.errors import error_shapes
from reactq.producer.gateway.openai_api import chat, models, responses
from reactq.producer.gateway.openai_api.common import OPENAI_ERRORS, openai_error

__all__ = ["PREFIXES", "ROUTERS", "install", "lifespan"]

PREFIXES: tuple[str, ...] = ("/v1/responses", "/v1/chat/completions", "/v1/models")
"""Its paths (under ``/v1``, so behind the API key already); every error under them
is worded as OpenAI's (``common.openai_error``)."""

ROUTERS: list[APIRouter] = [models.router, chat.router, responses.router]
"""Its routers, mounted under ``/v1``."""


def install(app: FastAPI) -> None:
    """Mount its routers under ``/v1`` behind the key, and word their errors as OpenAI."""
    for router in ROUTERS:
        app.include_router(router, prefix="/v1", dependencies=GUARDS, responses=OPENAI_ERRORS)
    for prefix in PREFIXES:
        error_shapes(app)[prefix] = openai_error


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Nothing runs beside the app for it."""
    yield
