"""The HTTP gateway: turns in and events out for services in any language.

An ASGI app (FastAPI); ``reactq serve`` runs it under uvicorn, and
``uvicorn reactq.producer.gateway:app`` works too (without API keys it then
answers loopback clients only; ``reactq serve`` also gives request heads a
deadline). It is stateless: run as many as you like behind a load balancer, and
any of them can stream any session.

::

    POST /v1/sessions/{session_id}/turns     submit a turn            202 409 413 422
    GET  /v1/sessions/{session_id}/events    Server-Sent Events: replay, then live
    GET  /v1/sessions/{session_id}/messages  the conversation (?branch=)
    GET  /v1/turns/{turn_id}                 status, attempt, final, pending approvals
    GET  /v1/turns/{turn_id}/events          its events: the stream's, else the audit log's
    POST /v1/turns/{turn_id}/cancel          ask the pool to cancel it  202 404 409
    POST /v1/turns/{turn_id}/undo            revert its file changes  200 404 409
    POST /v1/turns/{turn_id}/decisions       approve or deny waiting tool calls  200 404 409 422
    POST /v1/turns/{turn_id}/calls/{call_id}/result   a waiting call's result  200 404 409
    GET|PATCH|DELETE /v1/sessions[/{session_id}[/turns|/branches|/active_branch|/truncate]]
                                             sessions, their turns and branches
    GET|PUT|DELETE /v1/store/{namespace}[/{key}]   the long-term store
    GET|POST|DELETE /v1/schedules[/{schedule_id}[/pause|/resume]]   scheduled turns
    GET  /v1/agents[/{name}/tools]           the pool's agents and their tools
    GET  /healthz  /readyz  /metrics  /openapi.json  /  (the watch page)

Each resource's routes are one module of ``routes/`` (every turn route in
``routes/turns.py``); what they share is ``deps.py``'s, and what they need of the
producer beyond its public API is ``service.Gateway``'s.

Every ``/v1`` route wants ``Authorization: Bearer KEY`` when REACTQ_API_KEYS is set;
a scoped key reaches its tenant's sessions and turns only, each route declaring what
it touches (``scopes.py``), and every turn it submits carries the key's
identity (``shared/tenancy.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.middleware.cors import CORSMiddleware

from reactq.producer.gateway.deps import GUARDS
from reactq.producer.gateway.errors import (
    ERROR_RESPONSES,
    TextSafeJSONResponse,
    install_error_handlers,
)
from reactq.producer.gateway.routes import (
    agents,
    events,
    health,
    page,
    schedules,
    sessions,
    store,
    turns,
)
from reactq.producer.gateway.scopes import check_declared
from reactq.producer.gateway.security import ApiKeys, BodyLimit, LoopbackOnly, RequireKey
from reactq.producer.gateway.service import Gateway
from reactq.producer.gateway.surfaces import SURFACES, guarded_prefixes, surfaces_running
from reactq.shared.logs import configure_logging
from reactq.shared.settings import Settings

__all__ = ["GUARDED_PATHS", "ROUTERS", "app_from_env", "create_app"]

GUARDED_PATHS = ("/v1", "/metrics", *guarded_prefixes())
"""Paths that want an API key (when keys are configured)."""

ROUTERS: list[APIRouter] = [
    turns.router,
    events.router,
    sessions.router,
    agents.router,
    store.router,
    schedules.router,
]
"""The ``/v1`` routers, one per resource; each is mounted behind ``deps.GUARDS``."""


def create_app(settings: Settings | None = None, *, insecure: bool = False) -> FastAPI:
    """The gateway as an ASGI app, configured from ``settings`` (default: the env).

    Without API keys it serves loopback clients only (403 for others) unless
    ``insecure`` (``reactq serve --insecure``).
    """
    settings = settings or Settings.from_env()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        gateway = Gateway(settings)
        app.state.gateway = gateway
        await gateway.start()
        try:
            async with surfaces_running(app):
                yield
        finally:
            await gateway.close()

    app = FastAPI(
        title="reactq gateway",
        version="1",
        summary="Submit turns to a reactq pool and stream their events.",
        lifespan=lifespan,
        default_response_class=TextSafeJSONResponse,
    )
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router, prefix="/v1", dependencies=GUARDS, responses=ERROR_RESPONSES)
    for surface in SURFACES:
        surface.install(app)
    app.include_router(health.router)
    app.include_router(page.router)
    check_declared(app)
    app.mount("/static", StaticFiles(directory=page.STATIC), name="static")
    # The last added runs first. From the outside in: who may call at all, CORS (so
    # a browser can read the errors below), the key, then the body: a request is
    # refused on its headers before any of its body is read.
    app.add_middleware(
        BodyLimit, limit=settings.max_request_bytes, timeout=settings.request_timeout_seconds
    )
    keys = ApiKeys(settings.api_keys)
    app.add_middleware(RequireKey, keys=keys, prefixes=GUARDED_PATHS)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
            expose_headers=["Content-Type"],
        )
    if not keys.enabled and not insecure:
        app.add_middleware(LoopbackOnly)
    return app


def app_from_env() -> FastAPI:
    """The app ``uvicorn reactq.producer.gateway:app`` runs: configured from the
    environment, logging like ``reactq serve`` (the server's own lines included:
    uvicorn configured its loggers before importing the app)."""
    settings = Settings.from_env()
    configure_logging(settings)
    return create_app(settings)
