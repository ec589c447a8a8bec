"""The worker registry: which agents the pool hosts, and which workers are up.

Workers announce their agents when they start and remove themselves when they
stop; a producer refuses a turn for an agent no worker ever announced, rather
than queue it where nothing consumes it. Each agent's announcement carries its
profile: the fields a turn may override and its configuration version, so the
producer refuses an override the agent does not allow at submit time. The newest
announcement wins: during a rolling deploy the producer checks against the last
worker to announce, and the worker running the turn checks again.

Each worker's own entry (``keys.workers``) names the configuration version of every
agent it hosts, so the live definitions of a name are those of its live workers (a
heartbeat within ``REACTQ_HEARTBEAT_SECONDS``; a stopping worker removes its entry).
Two definitions of one name live at once (a rolling deploy, or two different agents
given the same name) are both listed, and a worker that announces a name live with
another version hears about it (``rivals``) and says so.

Workers publish each agent's tool catalogue beside it (``keys.agent_tools``), so
what never loads agent code (the gateway, the CLI) can list an agent's tools.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

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
        definitions: dict[str, dict[str, Any]] = {}
        entries: dict[str, str] = {}
        for name in names:
            profile = (profiles or {}).get(name, AgentProfile())
            catalogue = (catalogues or {}).get(name)
            definitions[name] = {
                "config_version": profile.config_version,
                "tools": len(catalogue.tools) if catalogue is not None else None,
                "tool_categories": catalogue.tool_categories if catalogue is not None else None,
            }
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
            pipe.hset(self.keys.workers, worker, json.dumps({**base, "definitions": definitions}))
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

    async def live_hosts(self, agent: str, live_within: float) -> int:
        """How many workers hosting ``agent`` beat within ``live_within`` seconds.

        Workers re-announce themselves (with a timestamp) three times per
        ``REACTQ_HEARTBEAT_SECONDS``; a stopped worker removes its entry, a killed one
        stops beating. The timestamps are the workers' clocks: a skew between machines
        above the interval would make a live pool look gone, never the reverse."""
        workers = await self.redis.hgetall(self.keys.workers)
        # Any definition counts: a worker from before versions were announced too.
        live = _live_definitions(workers.values(), time.time() - live_within, {})
        return sum(len(hosted.workers) for hosted in live.get(agent, {}).values())

    async def agents(self, live_within: float) -> list[AgentInfo]:
        """Every agent a worker announced, by name: one entry for each definition (config
        version) a live worker hosts (a worker beat within ``live_within`` seconds), or,
        when none does, the last announced one with ``live`` False."""
        entries = await self.redis.hgetall(self.keys.agents)
        workers = await self.redis.hgetall(self.keys.workers)
        catalogues = await self.redis.hgetall(self.keys.agent_tools)
        announced = {_text(key): _json(raw) for key, raw in entries.items()}
        fallback = {name: data.get("config_version") or None for name, data in announced.items()}
        live = _live_definitions(workers.values(), time.time() - live_within, fallback)
        out: list[AgentInfo] = []
        for name in sorted(set(announced) | set(live)):
            data = announced.get(name, {})
            tools = _catalogue(catalogues.get(name) or catalogues.get(name.encode()))
            hosted = live.get(name)
            if not hosted:
                ts = data.get("ts")
                out.append(
                    AgentInfo(
                        name=name,
                        config_version=data.get("config_version") or None,
                        worker=data.get("worker") or None,
                        last_seen=float(ts) if isinstance(ts, int | float) else None,
                        live=False,
                        tool_categories=tools.tool_categories if tools is not None else None,
                        tools=len(tools.tools) if tools is not None else None,
                    )
                )
                continue
            for version in sorted(hosted, key=lambda v: v or ""):
                out.append(hosted[version].info(name, tools))
        return out

    async def rivals(
        self, versions: Mapping[str, str | None], live_within: float
    ) -> dict[str, list[AgentInfo]]:
        """For each agent of ``versions`` (name -> the config version a worker hosts),
        the live definitions of its name with another version, when there are any."""
        workers = await self.redis.hgetall(self.keys.workers)
        # A worker from before versions were announced is no rival: its version is unknown.
        live = _live_definitions(workers.values(), time.time() - live_within, None)
        out: dict[str, list[AgentInfo]] = {}
        for name, version in versions.items():
            others = [
                hosted.info(name, None)
                for other, hosted in sorted(live.get(name, {}).items(), key=lambda i: i[0] or "")
                if other != version
            ]
            if others:
                out[name] = others
        return out

    async def catalogue(self, name: str) -> AgentTools | None:
        """The agent's tool catalogue as its worker published it, or None."""
        return _catalogue(await self.redis.hget(self.keys.agent_tools, name))


class _Hosted(NamedTuple):
    """One definition of an agent, as the live workers hosting it announced it."""

    workers: tuple[str, ...]
    """The live workers hosting it, the one that beat last first."""
    last_seen: float
    """Unix time of the last of their beats."""
    announced: dict[str, Any]
    """That beat's announcement of the agent (its tool count and categories)."""

    def info(self, name: str, catalogue: AgentTools | None) -> AgentInfo:
        """The definition as ``agents()`` lists it; its counts from the announcement, else
        from ``catalogue`` when that is of the same version."""
        version = self.announced.get("config_version") or None
        tools, categories = self.announced.get("tools"), self.announced.get("tool_categories")
        if tools is None and catalogue is not None and catalogue.config_version == version:
            tools, categories = len(catalogue.tools), catalogue.tool_categories
        return AgentInfo(
            name=name,
            config_version=version,
            worker=self.workers[0],
            workers=sorted(self.workers),
            last_seen=self.last_seen,
            live=True,
            tool_categories=categories if isinstance(categories, list) else None,
            tools=tools if isinstance(tools, int) else None,
        )


def _live_definitions(
    stamps: Iterable[bytes | str], since: float, fallback: Mapping[str, str | None] | None
) -> dict[str, dict[str | None, _Hosted]]:
    """Agent name -> config version -> its live workers, from the workers' entries that
    beat at ``since`` or later. A worker that announced no versions (one from before
    they were announced) counts as hosting ``fallback``'s version of each agent, or,
    without a ``fallback``, is left out."""
    found: dict[str, dict[str | None, _Hosted]] = {}
    for raw in stamps:
        data = _json(raw)
        ts = data.get("ts")
        if not isinstance(ts, int | float) or ts < since:
            continue
        worker = str(data.get("worker") or "?")
        definitions = data.get("definitions")
        if not isinstance(definitions, dict):
            if fallback is None:
                continue
            definitions = {}
        for name in data.get("agents") or ():
            announced = definitions.get(name)
            if not isinstance(announced, dict):
                announced = {"config_version": (fallback or {}).get(name)}
            version = announced.get("config_version") or None
            hosted = found.setdefault(name, {}).get(version)
            if hosted is None or ts > hosted.last_seen:
                others = hosted.workers if hosted is not None else ()
                hosted = _Hosted((worker, *others), float(ts), announced)
            else:
                hosted = hosted._replace(workers=(*hosted.workers, worker))
            found[name][version] = hosted
    return found


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
