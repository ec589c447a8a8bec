"""Whatever is in a session's pending list, the drain goes on to the session's next turn.

Payloads pushed raw into the real Redis pending list (as a bug or a hand-edit
could), next to valid turns, drained by the worker's real ``Drainer`` (issue 12,
items 2-4): a payload that cannot be a turn is logged, ended with an error final
when it names a usable turn id, and removed; a turn id runs at most once; the
session ends at rest (no lease, nothing running or pending) after a bounded
number of claims.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reactq.shared.events import ErrorEvent
from reactq.shared.state import open_store
from reactq.shared.turns import TurnStatus
from tests.drain_support import AGENT, Rig, drain_rig
from tests.state_fixtures import sid

DRAIN_TIMEOUT = 15


@pytest.fixture
async def rig(redis_url: str, namespace: str, tmp_path: Path) -> AsyncIterator[Rig]:
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    try:
        async with drain_rig(redis_url, namespace, store) as made:
            yield made
    finally:
        await store.close()


@pytest.fixture(autouse=True)
def worker_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="reactq.worker")
    return caplog


def payload(session_id: str, turn_id: object, message: str = "bad", **extra: object) -> str:
    return json.dumps(
        {"v": 1, "turn_id": turn_id, "session_id": session_id, "agent": AGENT, "message": message}
        | extra
    )


async def drain(rig: Rig, session_id: str) -> int:
    return await asyncio.wait_for(rig.drainer.drain(session_id), DRAIN_TIMEOUT)


async def assert_at_rest(rig: Rig, session_id: str) -> None:
    assert await rig.slot_and_lease(session_id) == (None, None)
    assert await rig.redis.llen(rig.keys.pending(session_id)) == 0
    assert await rig.redis.zscore(rig.keys.lease_deadlines(session_id), session_id) is None


async def assert_completed(rig: Rig, session_id: str, turn_id: str, message: str) -> None:
    finals = await rig.finals(session_id, turn_id)
    assert [(f.status, f.text) for f in finals] == [(TurnStatus.COMPLETED, f"answer to: {message}")]


async def test_a_turn_id_with_a_pipe_is_reported_and_the_session_goes_on(
    rig: Rig, worker_logs: pytest.LogCaptureFixture
) -> None:
    s = sid()
    await rig.redis.rpush(rig.keys.pending(s), payload(s, "t_mal|pipe", "pipe"))
    good = rig.turn(s, "after the pipe")
    await rig.queue.submit(good)

    assert await drain(rig, s) == 2
    await assert_completed(rig, s, good.turn_id, "after the pipe")
    # Not a usable turn id: nothing is published under it, the log says what happened.
    assert [e for e in await rig.events(s) if e.turn_id == "t_mal|pipe"] == []
    assert any("t_mal|pipe" in r.getMessage() for r in worker_logs.records)
    assert len(rig.claims) == 2  # no spin: each payload claimed once
    assert [m.turn_id for m in await rig.store.get_messages(s)] == [good.turn_id] * 4
    await assert_at_rest(rig, s)


async def test_bytes_that_are_not_utf8_are_reported_and_the_session_goes_on(
    rig: Rig, worker_logs: pytest.LogCaptureFixture
) -> None:
    s = sid()
    pending = rig.keys.pending(s)
    await rig.redis.rpush(pending, b"\xff\xfe not text at all \xc3")
    # A turn id that can be read, in a payload whose message is not UTF-8.
    named = payload(s, "t_badbytes", "MARK").encode().replace(b"MARK", b"caf\xe9")
    await rig.redis.rpush(pending, named)
    good = rig.turn(s, "after the bytes")
    await rig.queue.submit(good)

    assert await drain(rig, s) == 3
    await assert_completed(rig, s, good.turn_id, "after the bytes")
    bad = [e for e in await rig.events(s) if e.turn_id == "t_badbytes"]
    assert [e.type for e in bad] == ["error", "final"]
    assert isinstance(bad[0], ErrorEvent) and bad[0].code == "invalid_turn"
    assert bad[-1].status == TurnStatus.ERROR and "UTF-8" in bad[-1].text  # type: ignore[attr-defined]
    malformed = [r for r in worker_logs.records if "malformed turn payload" in r.getMessage()]
    assert len(malformed) == 2
    assert len(rig.claims) == 3
    assert [m.turn_id for m in await rig.store.get_messages(s)] == [good.turn_id] * 4
    await assert_at_rest(rig, s)


async def test_a_turn_id_pushed_twice_runs_once(
    rig: Rig, worker_logs: pytest.LogCaptureFixture
) -> None:
    s = sid()
    twice = rig.turn(s, "only once")
    await rig.queue.submit(twice)
    await rig.redis.rpush(rig.keys.pending(s), twice.model_dump_json())  # the same turn again
    good = rig.turn(s, "after the copy")
    await rig.queue.submit(good)

    assert await drain(rig, s) == 2
    await assert_completed(rig, s, twice.turn_id, "only once")
    await assert_completed(rig, s, good.turn_id, "after the copy")
    assert sum(e.type == "started" for e in await rig.events(s) if e.turn_id == twice.turn_id) == 1
    assert any(
        twice.turn_id in r.getMessage() and "again" in r.getMessage() for r in worker_logs.records
    )
    turn_ids = [m.turn_id for m in await rig.store.get_messages(s)]
    assert turn_ids == [twice.turn_id] * 4 + [good.turn_id] * 4
    await assert_at_rest(rig, s)

    # Pushed once more after the session went quiet: a later drain drops it too.
    await rig.redis.rpush(rig.keys.pending(s), twice.model_dump_json())
    last = rig.turn(s, "the last one")
    await rig.queue.submit(last)
    assert await drain(rig, s) == 1
    await assert_completed(rig, s, last.turn_id, "the last one")
    assert len(await rig.finals(s, twice.turn_id)) == 1
    assert len(await rig.store.get_messages(s)) == 12
    assert await rig.queue.turn_status(twice.turn_id) == (s, TurnStatus.COMPLETED)
    await assert_at_rest(rig, s)


async def test_whatever_is_pending_the_valid_turns_run_in_order(
    rig: Rig, worker_logs: pytest.LogCaptureFixture
) -> None:
    s = sid()
    other = sid()
    junk: list[str | bytes] = [
        "",
        "not json",
        "[1, 2]",
        "null",
        json.dumps({"v": 1}),
        payload(s, 42),
        payload(s, ["t_list"]),
        payload(s, "t_" + "x" * 200),
        payload(s, "t_caf\u00e9"),
        payload(s, "t_new\nline"),
        payload(s, "T_upper"),
        payload(s, "t_"),
        payload(s, "t_missing_fields").replace('"agent"', '"agnt"'),
        payload(s, "t_other_session").replace(s, other),
        payload(s, "t_newer_schema", v=2),
        b"\x80",
    ]
    usable = ["t_missing_fields", "t_other_session", "t_newer_schema"]
    first, last = rig.turn(s, "first"), rig.turn(s, "last")
    await rig.queue.submit(first)
    pending = rig.keys.pending(s)
    for item in junk:
        await rig.redis.rpush(pending, item)
    await rig.queue.submit(last)

    assert await drain(rig, s) == len(junk) + 2
    assert len(rig.claims) == len(junk) + 2
    await assert_completed(rig, s, first.turn_id, "first")
    await assert_completed(rig, s, last.turn_id, "last")
    events = await rig.events(s)
    ended = {e.turn_id: e for e in events if e.type == "final"}
    assert set(ended) == {first.turn_id, last.turn_id, *usable}
    for turn_id in usable:
        assert ended[turn_id].status == TurnStatus.ERROR  # type: ignore[attr-defined]
    assert [e.turn_id for e in events if e.type == "started"] == [first.turn_id, last.turn_id]
    logged = [r for r in worker_logs.records if r.levelno >= logging.ERROR]
    assert len(logged) >= len(junk)
    turn_ids = [m.turn_id for m in await rig.store.get_messages(s)]
    assert turn_ids == [first.turn_id] * 4 + [last.turn_id] * 4
    await assert_at_rest(rig, s)


async def test_a_drain_that_fails_leaves_its_session_to_the_reaper(rig: Rig) -> None:
    """Whatever else goes wrong under the lease, the released session keeps a deadline
    while it has turns, so the reaper dispatches it again."""
    s = sid()
    later = rig.turn(s, "still runs")
    await rig.queue.submit(later)
    working = rig.queue.advance

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the claim broke")

    rig.queue.advance = broken  # type: ignore[method-assign,assignment]
    with pytest.raises(RuntimeError, match="the claim broke"):
        await drain(rig, s)
    assert await rig.redis.get(rig.keys.lease(s)) is None
    assert await rig.redis.zscore(rig.keys.lease_deadlines(s), s) is not None
    rig.queue.advance = working  # type: ignore[method-assign]
    assert await drain(rig, s) == 1
    await assert_completed(rig, s, later.turn_id, "still runs")
    await assert_at_rest(rig, s)
