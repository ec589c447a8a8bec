"""Child turns: a turn that delegated work to other agents, and the turns doing it.

A parent turn's ``delegate`` call becomes a child turn, an ordinary turn in a child
session of its own (``child_ids``: derived from the parent turn and the call, so a
re-run of the parent finds the child it made rather than make another), pushed on the
child agent's queue and run by any worker that hosts that agent. Bookkeeping, in the
parent session's slot::

    children:<parent turn>   c:<key>  the child's link (JSON: session, turn, agent)
                             r:<key>  its result, once it ended (JSON: status, text,
                                      output, usage, cost, code)
    delegation:<child turn>  the child's way back to its parent (a plain key)

``key`` is ``<call id>#<index>`` (``delegate_parallel`` makes several children per call).
The parent parks while its children run (``park``: status ``awaiting_children``, in the
parked-turn hash approvals use, so it holds no lease and no worker slot, and a cancel
ends it at once). Whoever publishes a child's final calls ``ended``: the result is
recorded for the parent once (``children_done.lua``), and when it was the last one the
parent's session is dispatched; the claim hands the parent out again and it resumes from
its checkpoint. ``ended`` also cancels the children a finished turn leaves running
(its cancel, interrupt or rollback). See docs/architecture.md, "Session protocol".
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from redis.asyncio import Redis

from reactq.shared.bus import EventBus
from reactq.shared.events import FinalEvent, QueuedEvent
from reactq.shared.keys import Keys
from reactq.shared.protocol import endings
from reactq.shared.protocol.control import CancelMode, notify_cancel
from reactq.shared.protocol.outcomes import CancelOutcome
from reactq.shared.protocol.queue import SessionQueue
from reactq.shared.redis_client import lua_source, text
from reactq.shared.turns import TurnRequest

__all__ = ["DELEGATION_METADATA", "ChildLink", "ChildResult", "Children", "child_ids"]

log = logging.getLogger("reactq.protocol")

DELEGATION_METADATA = "reactq_delegation"
"""The metadata key of a child turn: who delegated it (shown in its status and audit)."""

_PARK = lua_source(__name__, "now_ms", "running_slot", "children_park")
_DONE = lua_source(__name__, "now_ms", "deadlines", "children_done")

Drain = Callable[[str], Awaitable[None]]
"""Dispatch a drain of a session (by id; its agent is in its meta)."""


def child_ids(parent_turn: str, call_id: str, index: int) -> tuple[str, str]:
    """The child session id and turn id of the ``index``-th task of a call: the same
    for every attempt of the parent, valid under the session and turn id rules."""
    digest = hashlib.sha256(f"{parent_turn}|{call_id}|{index}".encode()).hexdigest()
    return f"{parent_turn[:80]}:{digest[:16]}", f"t_{digest[16:40]}"


@dataclass(frozen=True)
class ChildLink:
    """A child turn and the turn that delegated it."""

    parent_session: str
    parent_turn: str
    key: str
    """``<call id>#<index>``: which task of which call of the parent."""
    agent: str
    """The child's agent."""
    session_id: str
    turn_id: str
    chain: tuple[str, ...] = ()
    """The agents from the root turn down to the child (the child's included)."""
    ancestors: tuple[tuple[str, str], ...] = ()
    """(session id, turn id) of every turn above the child, the root's first."""
    created_at: float = 0.0
    """Unix time it was delegated (its place in the parent's breakdown)."""

    @property
    def depth(self) -> int:
        """1 for a child of a root turn, 2 for a grandchild, ..."""
        return max(1, len(self.chain) - 1)

    def dump(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def load(cls, raw: str) -> ChildLink:
        data = json.loads(raw)
        data["chain"] = tuple(data.get("chain") or ())
        data["ancestors"] = tuple(tuple(a) for a in data.get("ancestors") or ())
        return cls(**data)


@dataclass(frozen=True)
class ChildResult:
    """How a child turn ended, as its parent reads it."""

    agent: str
    session_id: str
    turn_id: str
    status: str
    text: str
    output: dict[str, Any] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    cost: float | None = None
    code: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    def breakdown(self) -> dict[str, Any]:
        """The entry of the parent's ``final.subagents``."""
        return {
            "agent": self.agent,
            "session_id": self.session_id,
            "turn_id": self.turn_id,
            "status": self.status,
            "usage": dict(self.usage),
            "cost": self.cost,
        }


class Children:
    """The Redis operations on child turns, and what a turn's end means for them."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        queue: SessionQueue,
        bus: EventBus,
        drain: Drain,
        *,
        meta_ttl_seconds: int = 30 * 86400,
        dispatch_grace_seconds: float = 30.0,
    ) -> None:
        """``bus``: where the endings of cancelled children are published; ``drain``:
        dispatches a session's drain (a parent whose children ended, a child submitted)."""
        self.redis = redis
        self.keys = keys
        self.queue = queue
        self.bus = bus
        self.drain = drain
        self.meta_ttl = meta_ttl_seconds
        self.grace_ms = int(dispatch_grace_seconds * 1000)
        self._park = redis.register_script(_PARK)
        self._done = redis.register_script(_DONE)

    async def link_of(self, turn_id: str) -> ChildLink | None:
        """The turn's parent, if it is a child turn."""
        raw = await self.redis.get(self.keys.delegation(turn_id))
        return None if raw is None else ChildLink.load(text(raw))

    async def state(
        self, session_id: str, turn_id: str
    ) -> tuple[dict[str, ChildLink], dict[str, ChildResult]]:
        """The turn's children by key, and the results of those that ended, both in the
        order they were delegated."""
        raw = await self.redis.hgetall(self.keys.children(session_id, turn_id))
        links: dict[str, ChildLink] = {}
        results: dict[str, ChildResult] = {}
        for f, v in raw.items():
            name, value = text(f), text(v)
            if name.startswith("c:"):
                links[name[2:]] = ChildLink.load(value)
            elif name.startswith("r:"):
                results[name[2:]] = ChildResult(**json.loads(value))

        def order(key: str) -> tuple[float, int]:
            link = links.get(key)
            return (link.created_at if link else 0.0, int(key.rpartition("#")[2] or 0))

        links = {k: links[k] for k in sorted(links, key=order)}
        return links, {k: results[k] for k in sorted(results, key=order)}

    async def submit(self, link: ChildLink, turn: TurnRequest) -> bool:
        """Link the child to its parent, push it and dispatch its drain; False (nothing
        done) when it was submitted before (an earlier attempt of the parent)."""
        if await self.queue.turn_status(link.turn_id) is not None:
            return False
        children = self.keys.children(link.parent_session, link.parent_turn)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hsetnx(children, f"c:{link.key}", link.dump())
            pipe.expire(children, self.meta_ttl)
            pipe.set(self.keys.delegation(link.turn_id), link.dump(), ex=self.meta_ttl)
            await pipe.execute()
        outcome = await self.queue.submit(turn)
        await self.bus.publish(
            QueuedEvent(
                session_id=turn.session_id,
                turn_id=turn.turn_id,
                agent=turn.agent,
                message=turn.message,
                metadata=turn.metadata,
                overrides=turn.overrides,
            )
        )
        if outcome.needs_dispatch:
            await self.drain(turn.session_id)
        return True

    async def park(
        self, session_id: str, turn_id: str, calls: list[dict[str, Any]], timeout_seconds: float
    ) -> str | None:
        """Park the running turn until its children end: ``waiting``, or ``ready`` when
        they all ended already; None when the running slot no longer holds it."""
        k = self.keys
        reply = await self._park(
            keys=[
                k.running(session_id),
                k.turns(session_id),
                k.approvals(session_id),
                k.children(session_id, turn_id),
            ],
            args=[
                turn_id,
                json.dumps(calls, ensure_ascii=False),
                max(1, int(timeout_seconds * 1000)),
                self.meta_ttl,
            ],
        )
        state = text(reply[0])
        return None if state == "gone" else state

    async def ended(self, final: FinalEvent) -> None:
        """A turn's final is out: record it for its parent (and dispatch the parent
        when it was the last child it waited for), and cancel the children it leaves
        running. Never raises: the turn has ended whatever happens here."""
        try:
            await self._ended(final)
        except Exception:
            log.exception("turn %s: could not settle its delegations", final.turn_id)

    async def _ended(self, final: FinalEvent) -> None:
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(k.delegation(final.turn_id))
            pipe.hgetall(k.children(final.session_id, final.turn_id))
            raw_link, raw_children = await pipe.execute()
        if raw_link is not None:
            link = ChildLink.load(text(raw_link))
            result = ChildResult(
                agent=link.agent,
                session_id=final.session_id,
                turn_id=final.turn_id,
                status=str(final.status),
                text=final.text,
                output=final.output,
                usage=dict(final.usage),
                cost=final.cost,
                code=final.code,
            )
            outcome = text(
                await self._done(
                    keys=[
                        k.children(link.parent_session, link.parent_turn),
                        k.approvals(link.parent_session),
                        k.lease_deadlines(link.parent_session),
                    ],
                    args=[
                        link.parent_turn,
                        link.key,
                        final.turn_id,
                        json.dumps(asdict(result), ensure_ascii=False),
                        link.parent_session,
                        self.grace_ms,
                    ],
                )
            )
            if outcome == "ready":
                await self.drain(link.parent_session)
        if raw_children:
            names = {text(f) for f in raw_children}
            for name, value in raw_children.items():
                field_name = text(name)
                if field_name.startswith("c:") and f"r:{field_name[2:]}" not in names:
                    child = ChildLink.load(text(value))
                    await self.cancel(child, f"its parent {final.turn_id} ended ({final.status})")

    async def cancel(self, child: ChildLink, why: str) -> None:
        """Cancel a child turn: a queued or parked one ends here (and its own children
        with it), a running one is told to stop at its next step."""
        result = await self.queue.cancel(child.session_id, child.turn_id)
        if result.outcome is CancelOutcome.CANCELLED:
            final = await endings.cancelled(self.bus, child.session_id, child.turn_id, why)
            await self._ended(final)
            if await self.queue.has_work(child.session_id):
                await self.drain(child.session_id)
        elif result.outcome is CancelOutcome.CANCELLING:
            await notify_cancel(self.redis, self.keys, child.turn_id, CancelMode.CANCEL)

    async def waiting(self, session_id: str, turn_id: str) -> bool:
        """True while the turn is parked waiting for its children."""
        values = await self.redis.hmget(self.keys.approvals(session_id), ["turn", "kind", "state"])
        turn, kind, state = (text(v) if v is not None else None for v in values)
        return turn == turn_id and kind == "children" and state == "waiting"
