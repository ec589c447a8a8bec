"""One asyncio loop per worker process, shared by every task thread.

Celery's thread pool is only a doorway: each drain task hands its coroutine to
this loop and waits. Clients bound to a loop (the redis pool, the SQL engine,
AsyncOpenAI) are created once, here.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from redis.asyncio import Redis

from shared.bus import RedisEventBus
from shared.keys import Keys
from shared.locks import SessionLock
from shared.sessions import SessionQueue
from shared.settings import Settings
from shared.state import StateStore, open_store
from worker.agent.llm import LLMClient
from worker.agent.runner import AgentRunner
from worker.definitions import Agent
from worker.drain import Drainer

log = logging.getLogger("reactq.worker")
T = TypeVar("T")


class Bridge:
    """Owns the worker process's event loop and everything bound to it."""

    def __init__(self, settings: Settings, agents: dict[str, Agent], worker_name: str) -> None:
        self.settings = settings
        self.agents = agents
        self.worker_name = worker_name
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="reactq-loop", daemon=True)
        self.redis: Redis | None = None
        self.store: StateStore | None = None
        self.llms: list[LLMClient] = []
        self.drainer: Drainer | None = None
        self.queue: SessionQueue | None = None

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> None:
        """Start the loop thread and open every connection."""
        self._thread.start()
        self.run(self._open())

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the loop from any thread and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _open(self) -> None:
        s = self.settings
        # Every in-flight turn may hold a connection briefly (publish, renew), and
        # subscribers block on one: size the pool to the concurrency.
        self.redis = Redis.from_url(s.redis_url, max_connections=s.concurrency * 2 + 16)
        keys = Keys(s.namespace)
        bus = RedisEventBus(
            self.redis, keys, maxlen=s.event_maxlen, ttl_seconds=s.event_ttl_seconds
        )
        lock = SessionLock(
            self.redis, keys, ttl_seconds=s.lease_ttl_seconds, owner=self.worker_name
        )
        queue = self.queue = SessionQueue(self.redis, keys, s.session_meta_ttl_seconds)
        self.store = await open_store(s.database_url)
        runners: dict[str, AgentRunner] = {}
        shared_llms: dict[tuple[str | None, str | None], LLMClient] = {}
        for name, agent in self.agents.items():
            key = (agent.base_url, agent.api_key)
            if key not in shared_llms:
                shared_llms[key] = agent.build_llm()
            runners[name] = AgentRunner(agent.build_loop(shared_llms[key]), self.store, name)
        self.llms = list(shared_llms.values())
        self.drainer = Drainer(
            queue=queue,
            lock=lock,
            bus=bus,
            store=self.store,
            runners=runners,
            settings=s,
            worker_name=self.worker_name,
        )
        await queue.register_agents(sorted(self.agents), self.worker_name)
        log.info("worker %s ready: agents %s", self.worker_name, ", ".join(sorted(self.agents)))

    def stop(self) -> None:
        """Close every connection and stop the loop."""
        if not self._thread.is_alive():
            return
        try:
            self.run(self._close(), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    async def _close(self) -> None:
        if self.queue is not None:
            await self.queue.forget_worker(self.worker_name)
        for llm in self.llms:
            close = getattr(llm, "aclose", None)
            if close is not None:
                await close()
        if self.store is not None:
            await self.store.close()
        if self.redis is not None:
            await self.redis.aclose()
