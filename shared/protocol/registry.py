"""The worker registry: which agents the pool hosts, and which workers are up.

Workers announce their agents when they start and remove themselves when they
stop; a producer refuses a turn for an agent no worker ever announced, rather
than queue it where nothing consumes it. Each agent's announcement carries its
profile: the fields a turn may override and its configuration version, so the
producer refuses an override the agent does not allow at submit time. The newest
announcement wins: during a rolling deploy the producer checks against the last
worker to announce, and the worker running the turn checks again.

Workers publish each agent's tool catalogue beside it (``keys.agent_tools``), so
what never loads agent code (the gateway, the CLI) can list an agent's tools.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from redis.asyncio import Redis

from reactq.shared.catalogue import AgentInfo, AgentTools
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
        self,
        names: list[str],
        worker: str,
        profiles: Mapping[str, AgentProfile] | None = None,
        catalogues: Mapping[str, AgentTools] | None = None,
    ) -> None:
        """Announce that ``worker`` hosts these agents (producers check this), each with
        its profile (an empty one when ``profiles`` lacks it) and its tool catalogue
        (when ``catalogues`` has it)."""
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
            for name, catalogue in (catalogues or {}).items():
                pipe.hset(self.keys.agent_tools, name, catalogue.model_dump_json())
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

    async def agents(self, live_within: float) -> list[AgentInfo]:
        """Every agent a worker announced, by name; ``live`` when a worker hosting it
        beat within ``live_within`` seconds."""
        entries = await self.redis.hgetall(self.keys.agents)
        workers = await self.redis.hgetall(self.keys.workers)
        catalogues = await self.redis.hgetall(self.keys.agent_tools)
        now = time.time()
        beats: dict[str, float] = {}
        for raw in workers.values():
            data = _json(raw)
            for agent in data.get("agents") or ():
                beats[agent] = max(beats.get(agent, 0.0), float(data.get("ts") or 0.0))
        out: list[AgentInfo] = []
        for key in sorted(entries, key=_text):
            name = _text(key)
            data = _json(entries[key])
            tools = _catalogue(catalogues.get(key) or catalogues.get(name))
            ts = data.get("ts")
            out.append(
                AgentInfo(
                    name=name,
                    config_version=data.get("config_version") or None,
                    worker=data.get("worker") or None,
                    last_seen=float(ts) if isinstance(ts, int | float) else None,
                    live=now - beats.get(name, 0.0) <= live_within,
                    tool_categories=tools.tool_categories if tools is not None else None,
                    tools=len(tools.tools) if tools is not None else None,
                )
            )
        return out

    async def catalogue(self, name: str) -> AgentTools | None:
        """The agent's tool catalogue as its worker published it, or None."""
        return _catalogue(await self.redis.hget(self.keys.agent_tools, name))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _json(raw: bytes | str | None) -> dict[str, Any]:
    """An announcement's JSON object ({} for one that is not)."""
    try:
        data = json.loads(raw) if raw is not None else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _catalogue(raw: bytes | str | None) -> AgentTools | None:
    """A published catalogue; None when missing or written by an incompatible worker."""
    if raw is None:
        return None
    try:
        return AgentTools.model_validate_json(raw)
    except ValidationError:
        return None
