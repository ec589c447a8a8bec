"""Prometheus metrics (the ``metrics`` extra): what a worker and the gateway expose.

Each process keeps its own registry (never the global one, so tests and
embedded uses do not collide). The worker serves it on ``REACTQ_METRICS_PORT``;
the gateway on ``/metrics``. Queue depth is read from the broker when scraped.

=================================  =========  ==============================
reactq_turns_started_total          counter    agent
reactq_turns_finished_total         counter    agent, status
reactq_turn_duration_seconds        histogram  agent, status
reactq_turns_in_flight              gauge      worker
reactq_model_tokens_total           counter    agent, kind (prompt/completion)
reactq_queue_depth                  gauge      agent (drain messages waiting)
reactq_audit_rows_dropped_total     counter    (audit rows the spill's cap dropped)
=================================  =========  ==============================
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kombu import Connection

from reactq.shared.errors import ConfigError
from reactq.shared.keys import Keys

__all__ = ["QueueDepthCollector", "WorkerMetrics", "new_registry"]

log = logging.getLogger("reactq.metrics")

DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


def _prometheus() -> Any:
    try:
        import prometheus_client.core  # the metrics extra, needed only when metrics are on
    except ImportError:
        raise ConfigError("metrics need prometheus-client: pip install 'reactq[metrics]'") from None
    return prometheus_client


def new_registry() -> Any:
    """A fresh CollectorRegistry."""
    return _prometheus().CollectorRegistry(auto_describe=True)


class QueueDepthCollector:
    """``reactq_queue_depth{agent}``: messages waiting on each agent's Celery queue.

    Each message is one ``drain`` of a session waiting for a worker. The broker
    is asked at scrape time through kombu, so Redis and RabbitMQ both work; a
    queue the broker does not know (yet) is 0.
    """

    def __init__(self, broker_url: str, namespace: str, agents: Callable[[], Iterable[str]]):
        self.broker_url = broker_url
        self.namespace = namespace
        self.agents = agents

    def _depth(self, connection: Any, queue: str) -> int:
        channel = connection.channel()
        try:
            return int(channel.queue_declare(queue=queue, passive=True).message_count)
        except Exception:
            return 0
        finally:
            try:
                channel.close()
            except Exception:
                pass

    def collect(self) -> Iterator[Any]:
        family = _prometheus().core.GaugeMetricFamily(
            "reactq_queue_depth", "Drain messages waiting on an agent's queue", labels=["agent"]
        )
        try:
            with Connection(self.broker_url, connect_timeout=2) as connection:
                for agent in sorted(set(self.agents())):
                    queue = Keys(self.namespace).queue(agent)
                    family.add_metric([agent], self._depth(connection, queue))
        except Exception as exc:
            log.warning("queue depth unavailable: %s", exc.__class__.__name__)
        yield family

    def describe(self) -> list[Any]:
        return []


class WorkerMetrics:
    """The worker's metrics, registered on their own registry."""

    def __init__(self, worker: str, registry: Any | None = None) -> None:
        p = _prometheus()
        self.registry = registry if registry is not None else new_registry()
        r = self.registry
        self.worker = worker
        self.turns_started = p.Counter(
            "reactq_turns_started", "Turns that started running", ["agent"], registry=r
        )
        self.turns_finished = p.Counter(
            "reactq_turns_finished",
            "Turns that finished, by status",
            ["agent", "status"],
            registry=r,
        )
        self.turn_duration = p.Histogram(
            "reactq_turn_duration_seconds",
            "Wall time of a turn, from start to its final event",
            ["agent", "status"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.in_flight = p.Gauge(
            "reactq_turns_in_flight",
            "Turns running in this worker process",
            ["worker"],
            registry=r,
        )
        self.tokens = p.Counter(
            "reactq_model_tokens", "Model tokens, by kind", ["agent", "kind"], registry=r
        )
        self.audit_dropped = p.Counter(
            "reactq_audit_rows_dropped",
            "Audit rows dropped because more waited for the database than "
            "REACTQ_AUDIT_SPILL_MAX_ROWS",
            registry=r,
        )
        self.in_flight.labels(worker).set(0)
        self._server: Any = None

    def serve(self, port: int, address: str) -> None:
        """Serve ``/metrics`` on ``address:port`` from a daemon thread."""
        started = _prometheus().start_http_server(port, addr=address, registry=self.registry)
        # prometheus-client >= 0.20 returns (server, thread); keep the server to close it.
        self._server = started[0] if isinstance(started, tuple) else None

    def close(self) -> None:
        """Stop the HTTP server, if one was started."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
