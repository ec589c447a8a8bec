"""The gateway's ``/metrics``: the pool as a producer sees it, for Prometheus.

``reactq_queue_depth{agent}`` (drain messages waiting on each agent's queue,
read from the broker) and ``reactq_workers`` (worker processes registered in
Redis). Turn counts and durations are the workers' own metrics
(``REACTQ_METRICS_PORT``). Without the ``metrics`` extra the route answers 501.
With REACTQ_API_KEYS set it wants a key like every ``/v1`` route (Prometheus:
``authorization: {credentials: KEY}``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from reactq.producer.gateway_errors import ERROR_RESPONSES
from reactq.shared.metrics import QueueDepthCollector, new_registry

__all__ = ["install_metrics"]


def _render(broker_url: str, namespace: str, agents: list[str], workers: int) -> tuple[bytes, str]:
    import prometheus_client  # the metrics extra; /metrics answers 501 without it

    registry = new_registry()
    registry.register(QueueDepthCollector(broker_url, namespace, lambda: agents))
    gauge = prometheus_client.Gauge(
        "reactq_workers", "Worker processes registered in Redis", registry=registry
    )
    gauge.set(workers)
    return prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST


def install_metrics(app: FastAPI, dependencies: Sequence[Any] = ()) -> None:
    """Add ``GET /metrics`` to the gateway app (guarded by ``dependencies``)."""

    @app.get(
        "/metrics",
        tags=["health"],
        dependencies=list(dependencies),
        response_model=None,
        responses={
            200: {
                "description": "The Prometheus text exposition format",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            **({401: ERROR_RESPONSES[401]} if dependencies else {}),
            501: {
                "description": "prometheus-client is not installed",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
        },
    )
    async def metrics(request: Request) -> Response:
        """Prometheus metrics: queue depth per agent, registered workers."""
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            return PlainTextResponse("pip install 'reactq[metrics]'\n", status_code=501)
        gateway = request.app.state.gateway
        producer = gateway.producer
        agents = sorted(
            a.decode() if isinstance(a, bytes) else str(a)
            for a in await producer.redis.hkeys(producer.keys.agents)
        )
        workers = int(await producer.redis.hlen(producer.keys.workers))
        # The broker is asked synchronously (kombu): keep it off the event loop.
        body, content_type = await asyncio.to_thread(
            _render,
            gateway.settings.effective_broker_url,
            gateway.settings.namespace,
            agents,
            workers,
        )
        return Response(body, media_type=content_type)
