"""Redis Cluster: every key one session's scripts touch shares a slot, shards spread
over the slot space, the settings refuse a cluster broker, and a worker's scripts
are on every primary before its first turn. The protocol, end-to-end and chaos
suites run against a real cluster too (``redis_cluster_url`` in tests/conftest.py)."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, cast

import pytest
from redis.crc import key_slot

from reactq.shared.errors import ConfigError
from reactq.shared.keys import DEFAULT_CLUSTER_SHARDS, Keys
from reactq.shared.redis_urls import is_cluster_url, node_url
from reactq.shared.settings import Settings

CLUSTER = "redis+cluster://127.0.0.1:7000/0"


def _scripted_together(keys: Keys, sid: str) -> list[str]:
    """Every key one session's Lua scripts take or build (the cancel flags are built
    from their prefix inside the scripts)."""
    return [
        keys.events(sid),
        keys.channel(sid),
        keys.pending(sid),
        keys.running(sid),
        keys.meta(sid),
        keys.turns(sid),
        keys.steps(sid),
        keys.lease(sid),
        keys.fence(sid),
        keys.cancel_flag(sid, "t_0123456789abcdef"),
        keys.approvals(sid),
        keys.approvals_index(sid),
        keys.lease_deadlines(sid),
        keys.webhook(sid, "t_0123456789abcdef"),
        keys.webhook_deadlines(sid),
    ]


def test_a_sessions_scripted_keys_share_one_slot() -> None:
    keys = Keys("ns", shards=DEFAULT_CLUSTER_SHARDS)
    for n in range(500):
        sid = f"s-{n}-{uuid.uuid4().hex[:6]}"
        slots = {key_slot(k.encode()) for k in _scripted_together(keys, sid)}
        assert len(slots) == 1, (sid, slots)


def test_shards_spread_over_the_slot_space() -> None:
    keys = Keys("ns", shards=DEFAULT_CLUSTER_SHARDS)
    slots = [key_slot(k.encode()) for k in keys.deadline_sets()]
    assert len(set(slots)) >= DEFAULT_CLUSTER_SHARDS - 2  # CRC16 may put two on one slot
    # Three masters split the slots in thirds (redis-cli --cluster create): each gets some.
    thirds = [sum(1 for s in slots if lo <= s < lo + 5462) for lo in (0, 5462, 10924)]
    assert min(thirds) >= DEFAULT_CLUSTER_SHARDS // 6, thirds
    # And sessions land in every shard.
    tags = {keys.tag(f"s-{n}") for n in range(5000)}
    assert len(tags) == DEFAULT_CLUSTER_SHARDS


def test_a_single_redis_keeps_one_set_and_the_session_id_tag() -> None:
    keys = Keys("ns")
    assert keys.events("abc") == "ns:s:{abc}:events"
    assert keys.deadline_sets() == [keys.lease_deadlines("abc")] == ["ns:leases"]
    assert keys.approvals_indexes() == [keys.approvals_index("abc")] == ["ns:approvals"]


def test_cluster_urls() -> None:
    assert is_cluster_url(CLUSTER) and is_cluster_url("rediss+cluster://h:1")
    assert not is_cluster_url("redis://h:1/0")
    assert node_url(CLUSTER) == "redis://127.0.0.1:7000/0"
    assert node_url("rediss+cluster://h:1") == "rediss://h:1"
    assert node_url("redis://h:1/0") == "redis://h:1/0"


def test_a_cluster_is_never_the_broker() -> None:
    with pytest.raises(ConfigError, match="REACTQ_BROKER_URL") as refused:
        Settings.from_env({"REACTQ_REDIS_URL": CLUSTER})
    assert "Celery" in str(refused.value)
    with pytest.raises(ConfigError, match="REACTQ_BROKER_URL is a Redis Cluster"):
        Settings.from_env({"REACTQ_REDIS_URL": CLUSTER, "REACTQ_BROKER_URL": CLUSTER})
    settings = Settings.from_env(
        {"REACTQ_REDIS_URL": CLUSTER, "REACTQ_BROKER_URL": "redis://127.0.0.1:6379/0"}
    )
    assert Keys.for_settings(settings).shards == DEFAULT_CLUSTER_SHARDS
    custom = Settings.from_env(
        {
            "REACTQ_REDIS_URL": CLUSTER,
            "REACTQ_BROKER_URL": "amqp://guest@127.0.0.1//",
            "REACTQ_REDIS_CLUSTER_SHARDS": "8",
        }
    )
    assert len(Keys.for_settings(custom).deadline_sets()) == 8
    assert Keys.for_settings(Settings.from_env({})).shards == 0


async def test_a_worker_preloads_every_script_on_every_primary(redis_cluster_url: str) -> None:
    # A worker loads its scripts before its first turn (Bridge), so its first burst of
    # calls never meets NOSCRIPT on any node.
    import reactq.worker.bridge  # noqa: F401 - imports every module with a script
    from reactq.shared.redis_client import connect, preload_scripts

    redis = connect(redis_cluster_url, 8)
    try:
        loaded = await preload_scripts(redis)
        assert loaded >= 10
        cluster = cast(Any, redis)
        from reactq.shared.redis_client import _SOURCES

        shas = [hashlib.sha1(source.encode()).hexdigest() for source in _SOURCES]
        primaries = cluster.get_primaries()
        assert len(primaries) == 3
        for node in primaries:
            exists = await cluster.execute_command("SCRIPT EXISTS", *shas, target_nodes=node)
            assert list(exists) == [1] * len(shas), node
    finally:
        await redis.aclose()
