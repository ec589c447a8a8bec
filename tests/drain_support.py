"""An in-process ``Drainer`` on a real Redis and a real state store: the drain's own
code path (lease, claim, fence, run, commit, finals) without worker processes, for
tests that must put a step of the protocol at an exact point."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from reactq.shared.bus_redis import RedisEventBus
from reactq.shared.events import Event, FinalEvent
from reactq.shared.keys import Keys
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.protocol.deadlines import Deadlines
from reactq.shared.protocol.lease import SessionLease
from reactq.shared.protocol.outcomes import ClaimedTurn, LeaseEnd
from reactq.shared.protocol.queue import SessionQueue
from reactq.shared.settings import Settings
from reactq.shared.state import StateStore
from reactq.shared.turns import TurnRequest, TurnStatus
from reactq.worker.agent.llm.base import LLMResponse
from reactq.worker.agent.llm.scripted import ScriptedLLM
from reactq.worker.agent.runner import AgentRunner
from reactq.worker.drain import Drainer
from tests.pool_agents import agent as e2e_agent

AGENT = e2e_agent.name


def lookup_then_answer(messages: list[dict[str, Any]], _tools: Any) -> LLMResponse:
    """Call ``lookup`` on the newest user text, then answer from it (4 messages a turn)."""
    text = next(str(m["content"]) for m in reversed(messages) if m["role"] == "user")
    if messages[-1]["role"] == "user":
        call = ToolCall(id="c1", name="lookup", arguments=json.dumps({"key": text}))
        return LLMResponse(tool_calls=[call], finish_reason="tool_calls")
    return LLMResponse(content=f"answer to: {text}", finish_reason="stop")


def turn_messages(turn_id: str, text: str) -> list[ChatMessage]:
    """What a run of ``lookup_then_answer`` commits for the user message ``text``."""
    call = ToolCall(id="c1", name="lookup", arguments=json.dumps({"key": text}))
    return [
        ChatMessage(role="user", content=text, turn_id=turn_id),
        ChatMessage(role="assistant", content=None, tool_calls=[call], turn_id=turn_id),
        ChatMessage(role="tool", content='{"key": "x"}', tool_call_id="c1", turn_id=turn_id),
        ChatMessage(role="assistant", content=f"answer to: {text}", turn_id=turn_id),
    ]


@dataclass
class Rig:
    """One worker's drain, and the Redis side of the protocol it shares with others."""

    redis: Redis
    keys: Keys
    queue: SessionQueue
    lease: SessionLease
    deadlines: Deadlines
    bus: RedisEventBus
    store: StateStore
    llm: ScriptedLLM
    drainer: Drainer
    claims: list[ClaimedTurn] = field(default_factory=list)
    """Every claim the drain made (through ``queue.claim_next``), in order."""

    def turn(self, session_id: str, message: str) -> TurnRequest:
        return TurnRequest(session_id=session_id, agent=AGENT, message=message)

    async def events(self, session_id: str) -> list[Event]:
        return await self.bus.read(session_id, after="0")

    async def finals(self, session_id: str, turn_id: str) -> list[FinalEvent]:
        return [
            e
            for e in await self.events(session_id)
            if isinstance(e, FinalEvent) and e.turn_id == turn_id
        ]

    async def slot_and_lease(self, session_id: str) -> tuple[Any, Any]:
        """The running slot and the lease, both None once the session is at rest."""
        return (
            await self.redis.get(self.keys.running(session_id)),
            await self.redis.get(self.keys.lease(session_id)),
        )


@asynccontextmanager
async def drain_rig(
    redis_url: str,
    namespace: str,
    store: StateStore,
    *,
    worker: str = "w-test",
    lease_ttl: float = 10.0,
    keys: Keys | None = None,
) -> AsyncIterator[Rig]:
    """A Drainer named ``worker`` over ``store``; ``keys`` shares another rig's namespace."""
    keys = keys or Keys(f"{namespace}-d{uuid.uuid4().hex[:6]}")
    redis = Redis.from_url(redis_url)
    settings = Settings(redis_url=redis_url, namespace=keys.namespace, lease_ttl_seconds=lease_ttl)
    queue = SessionQueue(redis, keys)
    lease = SessionLease(redis, keys, ttl_seconds=lease_ttl, owner=worker)
    deadlines = Deadlines(redis, keys)
    bus = RedisEventBus(redis, keys)
    llm = ScriptedLLM(lookup_then_answer)
    runner = AgentRunner(e2e_agent.build_loop(llm, settings=settings), store, AGENT)
    drainer = Drainer(
        queue=queue,
        lease=lease,
        deadlines=deadlines,
        bus=bus,
        store=store,
        runners={AGENT: runner},
        settings=settings,
        worker_name=worker,
    )
    rig = Rig(redis, keys, queue, lease, deadlines, bus, store, llm, drainer)
    real_claim = queue.claim_next

    async def counted_claim(session_id: str) -> ClaimedTurn | None:
        claimed = await real_claim(session_id)
        if claimed is not None:
            rig.claims.append(claimed)
        return claimed

    real_advance = queue.advance

    async def counted_advance(
        session_id: str,
        token: int,
        finished: tuple[str, TurnStatus] | None = None,
        **kwargs: Any,
    ) -> ClaimedTurn | LeaseEnd:
        step = await real_advance(session_id, token, finished, **kwargs)
        if isinstance(step, ClaimedTurn):
            rig.claims.append(step)
        return step

    real_take = queue.take

    async def counted_take(
        session_id: str, lease: SessionLease
    ) -> tuple[int, ClaimedTurn | LeaseEnd] | None:
        taken = await real_take(session_id, lease)
        if taken is not None and isinstance(taken[1], ClaimedTurn):
            rig.claims.append(taken[1])
        return taken

    queue.claim_next = counted_claim  # type: ignore[method-assign]
    queue.advance = counted_advance  # type: ignore[method-assign]
    queue.take = counted_take  # type: ignore[method-assign]
    try:
        yield rig
    finally:
        await redis.aclose()
