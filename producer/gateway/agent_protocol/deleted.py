"""Runs deleted through the Agent Protocol (``DELETE .../runs/{run_id}``, a cancel with
``action=rollback``).

A run is a reactq turn, and a turn's record stays with its session (``/v1`` still
reads it); what the Agent Protocol forgets is kept here: one Redis set per thread
(``{ns}:ap:deleted-runs:{thread_id}``, one key, so a cluster is fine), read by the
run routes (get, list, join: 404 or left out) and removed with its thread.
"""

from __future__ import annotations

from reactq.producer.gateway.service import Gateway
from reactq.shared.redis_client import text

__all__ = ["clear", "forget", "forgotten", "is_forgotten"]


def _key(gateway: Gateway, thread_id: str) -> str:
    return f"{gateway.producer.keys.namespace}:ap:deleted-runs:{thread_id}"


async def forget(gateway: Gateway, thread_id: str, run_id: str) -> None:
    """The run is gone for the Agent Protocol."""
    await gateway.producer.redis.sadd(_key(gateway, thread_id), run_id)


async def is_forgotten(gateway: Gateway, thread_id: str, run_id: str) -> bool:
    """True for a run deleted from the thread."""
    return bool(await gateway.producer.redis.sismember(_key(gateway, thread_id), run_id))


async def forgotten(gateway: Gateway, thread_id: str) -> set[str]:
    """The thread's deleted runs."""
    return {text(m) for m in await gateway.producer.redis.smembers(_key(gateway, thread_id))}


async def clear(gateway: Gateway, thread_id: str) -> None:
    """The thread is deleted: so is the record of its deleted runs."""
    await gateway.producer.redis.delete(_key(gateway, thread_id))
