"""The gateway's own health and the pool's metrics, outside ``/v1``::

    GET /healthz    the process is up                                  200
    GET /readyz     Redis, the broker and the state store answer       200 503
    GET /metrics    the pool as a producer sees it, for Prometheus     200 401 404 501

``/metrics``: ``reactq_queue_depth{agent}`` (drain messages waiting on each agent's
queue, read from the broker) and ``reactq_workers`` (worker processes registered in
Redis). Turn counts and durations are the workers' own metrics
(``REACTQ_METRICS_PORT``). Without the ``metrics`` extra it answers 501. With
REACTQ_API_KEYS set it wants a key like every ``/v1`` route (Prometheus:
``authorization: {credentials: KEY}``), and a key with a tenant's prefix finds no
such route: it is the whole pool's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from reactq.producer.gateway.deps import GatewayDep, require_key
from reactq.producer.gateway.errors import ERROR_RESPONSES
from reactq.producer.gateway.models import Health, Readiness
from reactq.producer.gateway.scopes import pool_wide, touches_nothing
from reactq.shared.metrics import QueueDepthCollector, new_registry

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, dependencies=[touches_nothing()])
async def healthz() -> Health:
    """The process is up."""
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    dependencies=[touches_nothing()],
    responses={503: {"model": Readiness, "description": "A service does not answer"}},
)
async def readyz(gateway: GatewayDep) -> Any:
    """Redis, the broker and the state store answer (503 naming the one that does not)."""
    body = await gateway.readiness()
    return JSONResponse(body.model_dump(), status_code=200 if body.status == "ready" else 503)


def _render(broker_url: str, namespace: str, agents: list[str], workers: int) -> tuple[bytes, str]:
    import prometheus_client  # the metrics extra; /metrics answers 501 without it

    registry = new_registry()
    registry.register(QueueDepthCollector(broker_url, namespace, lambda: agents))
    gauge = prometheus_client.Gauge(
        "reactq_workers", "Worker processes registered in Redis", registry=registry
    )
    gauge.set(workers)
    return prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST


@router.get(
    "/metrics",
    dependencies=[Depends(require_key), pool_wide()],
    response_model=None,
    responses={
        200: {
            "description": "The Prometheus text exposition format",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        401: ERROR_RESPONSES[401],
        501: {
            "description": "prometheus-client is not installed",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
    },
)
async def metrics(gateway: GatewayDep) -> Response:
    """Prometheus metrics: queue depth per agent, registered workers."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return PlainTextResponse("pip install 'reactq[metrics]'\n", status_code=501)
    agents, workers = await gateway.pool_counts()
    # The broker is asked synchronously (kombu): keep it off the event loop.
    body, content_type = await asyncio.to_thread(
        _render,
        gateway.settings.effective_broker_url,
        gateway.settings.namespace,
        agents,
        workers,
    )
    return Response(body, media_type=content_type)
