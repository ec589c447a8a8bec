"""The HTTP gateway: turns in and events out for services in any language.

``create_app`` (``factory.py``) builds the ASGI app; ``reactq serve`` runs it
(``serve.py``), and ``uvicorn reactq.producer.gateway:app`` runs one configured from
the environment. The package::

    factory.py   the app factory: routers, error handlers, middleware
    service.py   ``Gateway``: what the routes share (settings, keys, producer, fan-out)
    deps.py      the one dependency style, the guards, the shared path and query types
    scopes.py    what each route touches, and the guard that keeps a key to its tenant
    security.py  API keys and their scopes, loopback-only, body limits, the bind check
    errors.py    every error as an ``ErrorBody`` with a stable code
    models.py    request and response bodies (the OpenAPI schemas), id patterns
    text.py      text UTF-8 cannot carry, refused in a write's body
    sse.py       a session's events as Server-Sent Events; fanout.py: one pub/sub
                 connection per process, fanned out to its clients
    serve.py     ``reactq serve``: uvicorn with a request-head deadline
    client.py    ``GatewayClient``, the small HTTP client ``reactq send --gateway`` uses
    routes/      one module per resource: turns, events, sessions, agents, store,
                 schedules, health (/healthz /readyz /metrics), page (/)

Importing the package loads none of it: ``create_app`` and ``app`` load on first use,
so ``reactq.producer.gateway.client`` costs no FastAPI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reactq.producer.gateway.factory import create_app as create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # The factory is ``factory.py``, not ``app.py``: a submodule named ``app`` would be
    # this package's ``app`` attribute once imported, and uvicorn reads ``app`` twice.
    factory = importlib.import_module(f"{__name__}.factory")
    if name == "create_app":
        return factory.create_app
    if name == "app":
        # Built on each read, from the environment, as ``uvicorn ...gateway:app`` wants.
        return factory.app_from_env()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
