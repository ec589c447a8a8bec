"""The worker registry: which agents the pool hosts, and which workers are up.

Workers announce their agents when they start and remove themselves when they
stop; a producer refuses a turn for an agent no worker ever announced, rather
than queue it where nothing consumes it. Each agent's announcement carries its
profile: the fields a turn may override and its configuration version, so the
producer refuses an override the agent does not allow at submit time. The newest
announcement wins: during a rolling deploy the producer checks against the last
worker to announce, and the worker running the turn checks again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from redis.asyncio import Redis

from reactq.shared.keys import Keys


@dataclass(frozen=True)
class AgentProfile:
    """What a worker announces of one agent beside its name."""

    overridable: frozenset[str] = field(default_factory=frozenset)
    """The fields a turn may override (``Agent(overridable=...)``)."""
    config_version: str | None = None
    """A hash of the agent's definition (``Agent.config_version``)."""
    webhook: str | None = None
    """Where its turns' ends are POSTed unless a turn names its own (``Agent(webhook=...)``)."""


class WorkerRegistry:
    """The ``keys.agents`` and ``keys.workers`` hashes."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    async def register_agents(
        self, names: list[str], worker: str, profiles: Mapping[str, AgentProfile] | None = None
    ) -> None:
        """Announce that ``worker`` hosts these agents (producers check this), each with
        its profile (an empty one when ``profiles`` lacks it)."""
        base = {"worker": worker, "ts": round(time.time(), 3), "agents": names}
        stamp = json.dumps(base)
        entries: dict[str, str] = {}
        for name in names:
            profile = (profiles or {}).get(name, AgentProfile())
            entries[name] = json.dumps(
                {
                    **base,
                    "overridable": sorted(profile.overridable),
                    "config_version": profile.config_version,
                    "webhook": profile.webhook,
                }
            )
        async with self.redis.pipeline(transaction=False) as pipe:
            for name, entry in entries.items():
                pipe.hset(self.keys.agents, name, entry)
            pipe.hset(self.keys.workers, worker, stamp)
            await pipe.execute()

    async def agent_profile(self, name: str) -> AgentProfile | None:
        """The agent's announced profile, or None if no worker announced it."""
        raw = await self.redis.hget(self.keys.agents, name)
        if raw is None:
            return None
        try:
            data = json.loads(raw)
        except ValueError:
            return AgentProfile()
        if not isinstance(data, dict):
            return AgentProfile()
        # An announcement from a worker before profiles existed has neither key.
        webhook = data.get("webhook")
        return AgentProfile(
            frozenset(data.get("overridable") or ()),
            data.get("config_version") or None,
            webhook if isinstance(webhook, str) and webhook else None,
        )

    async def forget_worker(self, worker: str) -> None:
        """Remove a stopped worker from the worker registry (its agents stay known)."""
        await self.redis.hdel(self.keys.workers, worker)

    async def agent_known(self, name: str) -> bool:
        """True if some worker has announced the agent."""
        return bool(await self.redis.hexists(self.keys.agents, name))
