"""The worker registry: which agents the pool hosts, and which workers are up.

Workers announce their agents when they start and remove themselves when they
stop; a producer refuses a turn for an agent no worker ever announced, rather
than queue it where nothing consumes it.
"""

from __future__ import annotations

import json
import time

from redis.asyncio import Redis

from reactq.shared.keys import Keys


class WorkerRegistry:
    """The ``keys.agents`` and ``keys.workers`` hashes."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    async def register_agents(self, names: list[str], worker: str) -> None:
        """Announce that ``worker`` hosts these agents (producers check this)."""
        stamp = json.dumps({"worker": worker, "ts": round(time.time(), 3), "agents": names})
        async with self.redis.pipeline(transaction=False) as pipe:
            if names:
                pipe.hset(self.keys.agents, mapping=dict.fromkeys(names, stamp))
            pipe.hset(self.keys.workers, worker, stamp)
            await pipe.execute()

    async def forget_worker(self, worker: str) -> None:
        """Remove a stopped worker from the worker registry (its agents stay known)."""
        await self.redis.hdel(self.keys.workers, worker)

    async def agent_known(self, name: str) -> bool:
        """True if some worker has announced the agent."""
        return bool(await self.redis.hexists(self.keys.agents, name))
