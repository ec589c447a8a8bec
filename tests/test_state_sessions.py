"""The StateStore contract for sessions as a whole (issue 20, item 3): listing with
filters and cursors, metadata, deletion, a session's turn records; run against
every backend on real servers."""

from __future__ import annotations

import uuid

import pytest

from reactq.shared.errors import InvalidCursorError, InvalidMetadataError, SessionNotFoundError
from reactq.shared.state import SessionRecord, StateStore, TurnCheckpoint
from tests.state_fixtures import (  # noqa: F401 - the fixtures register by import
    record,
    sid,
    store_fixture,
    url_fixture,
    user,
)


def agent_name() -> str:
    # Stores on a shared server (PostgreSQL, Redis) hold other tests' sessions: each
    # test lists its own agent's.
    return f"agent-{uuid.uuid4().hex[:8]}"


async def listed(store: StateStore, **filters: object) -> list[str]:
    """Every session id the filters select, page by page (two a page)."""
    out: list[str] = []
    cursor = None
    while True:
        page = await store.list_sessions(limit=2, cursor=cursor, **filters)  # type: ignore[arg-type]
        assert len(page.sessions) <= 2
        out.extend(s.session_id for s in page.sessions)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


async def test_list_sessions_newest_first_by_agent_in_pages(store: StateStore) -> None:
    mine, other = agent_name(), agent_name()
    made = [sid() for _ in range(5)]
    for s in made:
        await store.ensure_session(s, mine)
    await store.ensure_session(sid(), other)

    assert await listed(store, agent=mine) == made[::-1]
    page = await store.list_sessions(agent=mine, limit=10)
    assert page.next_cursor is None and [s.session_id for s in page.sessions] == made[::-1]
    first = page.sessions[-1]
    assert isinstance(first, SessionRecord)
    assert (first.agent, first.active_branch, first.metadata) == (mine, "trunk", {})
    assert first.updated_at >= first.created_at > 0


async def test_list_sessions_updated_since(store: StateStore) -> None:
    mine = agent_name()
    old, touched = sid(), sid()
    await store.ensure_session(old, mine)
    await store.ensure_session(touched, mine)
    since = max(s.updated_at for s in (await store.list_sessions(agent=mine)).sessions)
    await store.commit_turn(touched, [user("later")], record(touched, f"t_{uuid.uuid4().hex}"))
    assert await listed(store, agent=mine, updated_since=since + 1e-6) == [touched]
    updated = await store.get_session(touched)
    assert updated is not None and updated.updated_at > since


async def test_metadata_is_merged_filtered_and_kept(store: StateStore) -> None:
    mine = agent_name()
    a, b = sid(), sid()
    await store.ensure_session(a, mine)
    await store.ensure_session(b, mine)

    assert await store.update_metadata(a, {"user": "u1", "tier": 2, "tags": ["x"]}) == {
        "user": "u1",
        "tier": 2,
        "tags": ["x"],
    }
    # A merge: a key set to None is removed, the others stay.
    assert await store.update_metadata(a, {"tier": None, "lang": "fr"}) == {
        "user": "u1",
        "tags": ["x"],
        "lang": "fr",
    }
    await store.update_metadata(b, {"user": "u2"})
    got = await store.get_session(a)
    assert got is not None and got.metadata == {"user": "u1", "tags": ["x"], "lang": "fr"}

    assert await listed(store, agent=mine, metadata={"user": "u1"}) == [a]
    assert await listed(store, agent=mine, metadata={"user": "u1", "lang": "de"}) == []
    assert await listed(store, agent=mine, metadata={"tags": ["x"]}) == [a]
    assert set(await listed(store, agent=mine)) == {a, b}

    with pytest.raises(SessionNotFoundError):
        await store.update_metadata(sid(), {"user": "u3"})
    with pytest.raises(InvalidMetadataError):
        await store.update_metadata(a, {"bad": {1, 2}})  # type: ignore[dict-item]


async def test_delete_session_removes_all_its_state(store: StateStore) -> None:
    mine = agent_name()
    s, kept = sid(), sid()
    await store.ensure_session(s, mine)
    await store.ensure_session(kept, mine)
    turn = f"t_{uuid.uuid4().hex}"
    await store.commit_turn(s, [user("hello")], record(s, turn))
    await store.fork(s, 1, new_branch_id="side")
    await store.update_metadata(s, {"user": "u1"})
    running = f"t_{uuid.uuid4().hex}"
    await store.checkpoint_step(
        TurnCheckpoint(session_id=s, turn_id=running, step=1, messages=[user("step")])
    )

    assert await store.delete_session(s) is True
    assert await store.get_session(s) is None
    assert await store.get_messages(s) == [] and await store.list_branches(s) == []
    assert await store.get_turn(turn) is None and await store.list_turns(s) == []
    assert await store.get_checkpoint(s, running) is None
    assert await listed(store, agent=mine) == [kept]
    assert await store.delete_session(s) is False

    # The id can be used again, from scratch.
    again = await store.ensure_session(s, mine)
    assert again.active_branch == "trunk" and again.fence == 0
    assert [b.branch_id for b in await store.list_branches(s)] == ["trunk"]
    got = await store.get_session(s)
    assert got is not None and got.metadata == {}


async def test_list_turns_oldest_first(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, agent_name())
    ids = [f"t_{uuid.uuid4().hex}" for _ in range(3)]
    for n, turn in enumerate(ids):
        await store.commit_turn(
            s, [user(f"m{n}")], record(s, turn, attempt=n + 1, final_text=f"a{n}")
        )
    turns = await store.list_turns(s)
    assert [(t.turn_id, t.attempt, t.final_text) for t in turns] == [
        (ids[0], 1, "a0"),
        (ids[1], 2, "a1"),
        (ids[2], 3, "a2"),
    ]
    assert await store.list_turns(sid()) == []


async def test_a_cursor_that_is_not_one_is_refused(store: StateStore) -> None:
    with pytest.raises(InvalidCursorError):
        await store.list_sessions(cursor="not-a-cursor")
    with pytest.raises(ValueError, match="limit"):
        await store.list_sessions(limit=0)
