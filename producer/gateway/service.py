"""What the routes share: the gateway's settings, keys, producer and fan-out, and the
reads the routes need beyond ``Producer``'s public API.

The routes call ``Producer``'s public methods, or a method here: this class is the one
place of the gateway that reaches into the producer's parts (its Redis, its queue,
its event bus), so a change to those touches this file, not the routes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from fastapi import Request
from kombu import Connection
from redis.asyncio import Redis

from reactq.producer.client import Producer
from reactq.producer.gateway.fanout import Fanout, Listener
from reactq.producer.gateway.models import Readiness
from reactq.producer.gateway.security import ApiKeys
from reactq.producer.gateway.sse import event_stream
from reactq.shared.events import Event
from reactq.shared.redis_urls import node_url
from reactq.shared.settings import Settings

__all__ = ["CHECK_TIMEOUT", "Gateway", "gateway_of"]

logger = logging.getLogger(__name__)

CHECK_TIMEOUT = 3  # an int: kombu's connect_timeout is typed by its default (5)
"""Seconds each service has to answer ``GET /readyz``."""


class Gateway:
    """What the routes share: settings, keys, the producer and the fan-out."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = ApiKeys(settings.api_keys)
        self.producer = Producer(settings)
        # On a cluster, one node: a PUBLISH reaches the subscribers of every node.
        self.pubsub_redis: Redis = Redis.from_url(node_url(settings.redis_url))
        self.fanout = Fanout(
            self.pubsub_redis,
            self.producer.keys,
            settings.sse_client_buffer,
            settings.sse_client_buffer_bytes,
        )
        self._retry: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Open the pub/sub connection (retrying in the background if Redis is down)."""
        try:
            await self.fanout.start()
        except Exception as exc:
            logger.warning("Redis pub/sub unavailable at startup (%s); retrying", exc)
            self._retry = asyncio.create_task(self.fanout.restart())

    async def close(self) -> None:
        """Release every connection."""
        await self.fanout.close()
        await self.pubsub_redis.aclose()
        await self.producer.close()

    async def turn_session(self, turn_id: str) -> str | None:
        """The session of a turn Redis still knows (None for one it does not)."""
        found = await self.producer.queue.turn_status(turn_id)
        return None if found is None else found[0]

    async def session_agent(self, session_id: str) -> str | None:
        """The agent a session belongs to (Redis, else the state store), None for none."""
        agent = await self.producer.queue.session_agent(session_id)
        if agent is not None:
            return agent
        record = await (await self.producer.state_store()).get_session(session_id)
        return None if record is None else record.agent

    async def streamed_events(self, session_id: str, turn_id: str) -> list[Event]:
        """The turn's events its session's Redis stream still holds, oldest first."""
        return [e for e in await self.producer.bus.read(session_id) if e.turn_id == turn_id]

    def event_stream(
        self, listener: Listener, *, after: str | None, turn_id: str | None
    ) -> AsyncIterator[bytes]:
        """The SSE bytes of ``listener``'s session (``sse.event_stream``), with the
        gateway's heart-beat."""
        return event_stream(
            self.producer.redis,
            self.producer.keys,
            self.fanout,
            listener,
            after=after,
            turn_id=turn_id,
            heartbeat_seconds=self.settings.sse_heartbeat_seconds,
        )

    async def pool_counts(self) -> tuple[list[str], int]:
        """The agents registered in Redis (sorted) and the worker processes registered."""
        redis, keys = self.producer.redis, self.producer.keys
        agents = sorted(
            a.decode() if isinstance(a, bytes) else str(a) for a in await redis.hkeys(keys.agents)
        )
        return agents, int(await redis.hlen(keys.workers))

    async def readiness(self) -> Readiness:
        """Ask Redis, the broker and the state store (each within ``CHECK_TIMEOUT``)."""
        producer = self.producer

        async def store_ok() -> None:
            await (await producer.state_store()).get_session("readyz-probe")

        checks = {
            "redis": producer.redis.ping(),
            "broker": _broker_ok(self.settings.effective_broker_url),
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
        return Readiness(status="ready" if ready else "unavailable", checks=results)


async def _broker_ok(url: str) -> None:
    def connect() -> None:
        with Connection(url, connect_timeout=CHECK_TIMEOUT) as conn:
            conn.ensure_connection(max_retries=1)

    await asyncio.to_thread(connect)


def gateway_of(request: Request) -> Gateway:
    """The gateway serving ``request`` (``app.state.gateway``, set by the app's lifespan)."""
    gateway: Gateway = request.app.state.gateway
    return gateway
