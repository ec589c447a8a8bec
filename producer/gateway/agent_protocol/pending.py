"""Threads created before their first run.

A reactq session is created by its first turn, for that turn's agent (a session
belongs to one agent), so a thread ``POST /threads`` makes is kept here until a run
gives it an agent: one Redis hash of the namespace (``{ns}:ap:threads``, one key, so a
cluster is fine) maps each such thread to its creation time and metadata. Once the
state store has the session, its metadata moves there (``adopt``) and the entry goes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from reactq.producer.gateway.service import Gateway
from reactq.shared.redis_client import text

__all__ = ["PendingThread", "adopt", "delete", "get", "put", "scan"]


@dataclass(frozen=True)
class PendingThread:
    """A thread with no session yet."""

    thread_id: str
    created_at: float
    updated_at: float
    metadata: dict[str, Any] = field(default_factory=dict)


def _key(gateway: Gateway) -> str:
    return f"{gateway.producer.keys.namespace}:ap:threads"


def _parse(thread_id: str, raw: bytes | str) -> PendingThread:
    data = json.loads(raw)
    return PendingThread(thread_id, data["created_at"], data["updated_at"], data["metadata"])


async def get(gateway: Gateway, thread_id: str) -> PendingThread | None:
    """The pending thread, None for none."""
    raw = await gateway.producer.redis.hget(_key(gateway), thread_id)
    return None if raw is None else _parse(thread_id, raw)


async def put(gateway: Gateway, thread: PendingThread, *, new: bool = False) -> bool:
    """Store ``thread``; with ``new``, only if it is not there (False when it was)."""
    raw = json.dumps(
        {
            "created_at": thread.created_at,
            "updated_at": thread.updated_at,
            "metadata": thread.metadata,
        }
    )
    redis = gateway.producer.redis
    if new:
        return bool(await redis.hsetnx(_key(gateway), thread.thread_id, raw))
    await redis.hset(_key(gateway), thread.thread_id, raw)
    return True


def created(thread_id: str, metadata: dict[str, Any]) -> PendingThread:
    """A new pending thread, made now."""
    now = time.time()
    return PendingThread(thread_id, now, now, dict(metadata))


async def delete(gateway: Gateway, thread_id: str) -> bool:
    """Forget the pending thread; True if there was one."""
    return bool(await gateway.producer.redis.hdel(_key(gateway), thread_id))


async def scan(gateway: Gateway) -> list[PendingThread]:
    """Every pending thread, newest first."""
    entries = await gateway.producer.redis.hgetall(_key(gateway))
    found = [_parse(text(k), v) for k, v in entries.items()]
    return sorted(found, key=lambda t: t.created_at, reverse=True)


async def adopt(gateway: Gateway, thread_id: str) -> None:
    """Once the state store has the session: move the pending thread's metadata onto
    it (the session's own keys win) and forget the entry."""
    thread = await get(gateway, thread_id)
    if thread is None:
        return
    record = await (await gateway.producer.state_store()).get_session(thread_id)
    if record is None:
        return
    missing = {k: v for k, v in thread.metadata.items() if k not in record.metadata}
    if missing:
        await gateway.producer.update_session_metadata(thread_id, missing)
    await delete(gateway, thread_id)
