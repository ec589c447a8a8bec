"""The StateStore contract for what a turn record keeps beyond its outcome (issue 15,
items 1, 2 and 6): the turn's metadata, the agent's configuration version, its usage
and cost, and a session's totals over them; run against every backend on real servers."""

from __future__ import annotations

import uuid

import pytest

from reactq.shared.state import SessionUsage, StateStore
from tests.state_fixtures import (  # noqa: F401 - the fixtures register by import
    record,
    sid,
    store_fixture,
    url_fixture,
    user,
)


def tid() -> str:
    return f"t_{uuid.uuid4().hex}"


async def test_a_turn_record_keeps_metadata_version_usage_and_cost(store: StateStore) -> None:
    s, t = sid(), tid()
    await store.ensure_session(s, "a")
    usage = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    metadata = {"tenant": "acme", "nested": {"ok": [1, 2]}, "text": "naïve ☃"}
    rec = record(s, t, metadata=metadata, config_version="abc123", usage=usage, cost=0.25)
    await store.commit_turn(s, [user("hi")], rec)
    stored = await store.get_turn(t)
    assert stored is not None
    assert (stored.metadata, stored.config_version, stored.usage, stored.cost) == (
        metadata,
        "abc123",
        usage,
        0.25,
    )
    (listed,) = await store.list_turns(s)
    assert listed.usage == usage and listed.metadata == metadata


async def test_a_record_without_them_reads_back_empty(store: StateStore) -> None:
    s, t = sid(), tid()
    await store.ensure_session(s, "a")
    await store.commit_turn(s, [user("hi")], record(s, t))
    stored = await store.get_turn(t)
    assert stored is not None
    assert (stored.metadata, stored.config_version, stored.usage, stored.cost) == (
        {},
        None,
        {},
        None,
    )


async def test_session_usage_sums_the_committed_turns(store: StateStore) -> None:
    s, other = sid(), sid()
    assert await store.session_usage(s) == SessionUsage(session_id=s)
    for session in (s, other):
        await store.ensure_session(session, "a")
    turns = [
        ({"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}, 0.5),
        ({"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}, None),
        ({}, 0.25),
    ]
    for usage, cost in turns:
        await store.commit_turn(s, [user("x")], record(s, tid(), usage=usage, cost=cost))
    await store.commit_turn(
        other, [user("y")], record(other, tid(), usage={"total_tokens": 1000}, cost=9.0)
    )
    totals = await store.session_usage(s)
    assert totals.model_dump(exclude={"cost"}) == {
        "session_id": s,
        "turns": 3,
        "prompt_tokens": 15,
        "completion_tokens": 3,
        "total_tokens": 18,
    }
    assert totals.cost == pytest.approx(0.75)


async def test_a_deleted_session_has_no_usage(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    await store.commit_turn(s, [user("x")], record(s, tid(), usage={"total_tokens": 7}))
    assert (await store.session_usage(s)).total_tokens == 7
    await store.delete_session(s)
    assert await store.session_usage(s) == SessionUsage(session_id=s)
