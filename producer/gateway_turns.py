"""The look-up behind ``GET /readyz`` (``GET /v1/turns/{id}``'s is
``producer/turn_lookup.py``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from fastapi.responses import JSONResponse
from kombu import Connection

from reactq.producer.gateway_models import Readiness

if TYPE_CHECKING:
    from reactq.producer.gateway import Gateway

CHECK_TIMEOUT = 3  # an int: kombu's connect_timeout is typed by its default (5)


async def _broker_ok(url: str) -> None:
    def connect() -> None:
        with Connection(url, connect_timeout=CHECK_TIMEOUT) as conn:
            conn.ensure_connection(max_retries=1)

    await asyncio.to_thread(connect)


async def readiness(gateway: Gateway) -> JSONResponse:
    """Ask Redis, the broker and the state store; 503 naming any that does not answer."""
    producer = gateway.producer

    async def store_ok() -> None:
        await (await producer.state_store()).get_session("readyz-probe")

    checks = {
        "redis": producer.redis.ping(),
        "broker": _broker_ok(gateway.settings.effective_broker_url),
        "state_store": store_ok(),
    }
    results: dict[str, str] = {}
    for name, check in checks.items():
        try:
            await asyncio.wait_for(check, CHECK_TIMEOUT)
            results[name] = "ok"
        except Exception as exc:
            # The class only: a message may carry a URL with a password.
            results[name] = f"unavailable ({type(exc).__name__})"
    ready = all(v == "ok" for v in results.values())
    body = Readiness(status="ready" if ready else "unavailable", checks=results)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
