"""The branching contract: a session is a tree of branches with an active head,
run against every backend on real servers."""

from __future__ import annotations

import pytest

from reactq.shared.errors import BranchError, BranchNotFoundError, SessionNotFoundError
from reactq.shared.messages import ChatMessage
from reactq.shared.state import TRUNK, BranchInfo, StateStore
from tests.state_fixtures import (  # noqa: F401 - the fixtures register by import
    contents,
    record,
    sid,
    store_fixture,
    url_fixture,
    user,
)


async def session_with(store: StateStore, *texts: str) -> str:
    s = sid()
    await store.ensure_session(s, "a")
    await store.append(s, [user(t) for t in texts])
    return s


def numbered(*texts: str, start: int = 1) -> list[tuple[int, str]]:
    return [(start + i, t) for i, t in enumerate(texts)]


async def test_a_new_session_has_an_active_empty_trunk(store: StateStore) -> None:
    s = await session_with(store)
    (trunk,) = await store.list_branches(s)
    assert isinstance(trunk, BranchInfo)
    assert (trunk.branch_id, trunk.parent_branch_id, trunk.fork_sequence) == (TRUNK, None, 0)
    assert (trunk.length, trunk.active) == (0, True)
    assert await store.list_branches(sid()) == []


async def test_fork_keeps_messages_1_to_n_and_becomes_active(store: StateStore) -> None:
    s = await session_with(store, "a", "b", "c", "d")
    branch = await store.fork(s, 2)
    assert branch != TRUNK
    info = await store.get_session(s)
    assert info is not None and info.active_branch == branch
    assert await contents(store, s) == numbered("a", "b")
    await store.append(s, [user("c2")])
    assert await contents(store, s) == numbered("a", "b", "c2")
    assert await contents(store, s, branch) == numbered("a", "b", "c2")
    # The original line stays reachable, unchanged.
    assert await contents(store, s, TRUNK) == numbered("a", "b", "c", "d")
    branches = {b.branch_id: b for b in await store.list_branches(s)}
    assert (branches[TRUNK].length, branches[TRUNK].active) == (4, False)
    new = branches[branch]
    assert (new.parent_branch_id, new.fork_sequence, new.length, new.active) == (
        TRUNK,
        2,
        3,
        True,
    )
    assert [b.branch_id for b in await store.list_branches(s)] == [TRUNK, branch]


async def test_fork_at_the_ends(store: StateStore) -> None:
    s = await session_with(store, "a", "b")
    empty = await store.fork(s, 0, branch_id=TRUNK, activate=False)
    whole = await store.fork(s, 2, branch_id=TRUNK, activate=False)
    assert await contents(store, s, empty) == []
    assert await contents(store, s, whole) == numbered("a", "b")
    info = await store.get_session(s)
    assert info is not None and info.active_branch == TRUNK


async def test_fork_refuses_bad_input(store: StateStore) -> None:
    s = await session_with(store, "a", "b")
    for point in (3, -1):
        with pytest.raises(BranchError, match="cannot fork"):
            await store.fork(s, point)
    with pytest.raises(BranchNotFoundError):
        await store.fork(s, 0, branch_id="nope")
    with pytest.raises(SessionNotFoundError):
        await store.fork(sid(), 0)
    named = await store.fork(s, 1, new_branch_id="edit-1")
    assert named == "edit-1"
    with pytest.raises(BranchError, match="already has"):
        await store.fork(s, 1, new_branch_id="edit-1")
    with pytest.raises(BranchError, match="invalid branch id"):
        await store.fork(s, 1, new_branch_id="no spaces")
    with pytest.raises(ValueError):  # BranchError is a ValueError too
        await store.fork(s, 1, new_branch_id=TRUNK)
    assert [b.branch_id for b in await store.list_branches(s)] == [TRUNK, "edit-1"]


async def test_switch_branch_moves_the_head(store: StateStore) -> None:
    s = await session_with(store, "a", "b")
    branch = await store.fork(s, 1)
    await store.switch_branch(s, TRUNK)
    await store.append(s, [user("c")])
    assert await contents(store, s) == numbered("a", "b", "c")
    await store.switch_branch(s, branch)
    assert await contents(store, s) == numbered("a")
    with pytest.raises(BranchNotFoundError):
        await store.switch_branch(s, "nope")
    with pytest.raises(SessionNotFoundError):
        await store.switch_branch(sid(), TRUNK)
    info = await store.get_session(s)
    assert info is not None and info.active_branch == branch
    flags = {b.branch_id: b.active for b in await store.list_branches(s)}
    assert flags == {TRUNK: False, branch: True}


async def test_nested_forks_inherit_through_their_parents(store: StateStore) -> None:
    s = await session_with(store, "a", "b", "c", "d")
    b1 = await store.fork(s, 2)
    await store.append(s, [user("c1"), user("d1")])
    inside = await store.fork(s, 1, branch_id=b1)  # inside b1's inherited prefix
    after = await store.fork(s, 3, branch_id=b1)  # inside b1's own messages
    await store.append(s, [user("e")], branch_id=after)
    assert await contents(store, s, inside) == numbered("a")
    assert await contents(store, s, after) == numbered("a", "b", "c1", "e")
    assert await contents(store, s, b1) == numbered("a", "b", "c1", "d1")
    assert await contents(store, s, TRUNK) == numbered("a", "b", "c", "d")


async def test_truncate_after_deletes_only_the_branch_own_tail(store: StateStore) -> None:
    s = await session_with(store, "a", "b", "c")
    b1 = await store.fork(s, 2)
    await store.append(s, [user("x"), user("y"), user("z")])
    await store.truncate_after(s, 4)  # the active branch by default
    assert await contents(store, s) == numbered("a", "b", "x", "y")
    await store.truncate_after(s, 4)  # idempotent
    await store.truncate_after(s, 0, branch_id=b1)  # never the inherited prefix
    assert await contents(store, s, b1) == numbered("a", "b")
    assert await contents(store, s, TRUNK) == numbered("a", "b", "c")
    await store.append(s, [user("w")])
    assert await contents(store, s) == numbered("a", "b", "w")
    await store.truncate_after(s, 1, branch_id=TRUNK)
    assert await contents(store, s, TRUNK) == numbered("a")
    (trunk,) = [b for b in await store.list_branches(s) if b.branch_id == TRUNK]
    assert trunk.length == 1
    await store.truncate_after(sid(), 0)  # unknown session: nothing happens
    await store.truncate_after(s, 0, branch_id="nope")  # unknown branch: nothing happens


async def test_truncating_a_parent_keeps_its_children_whole(store: StateStore) -> None:
    s = await session_with(store, "a", "b", "c", "d")
    child = await store.fork(s, 3, branch_id=TRUNK, activate=False)
    await store.append(s, [user("c-own")], branch_id=child)
    grandchild = await store.fork(s, 2, branch_id=child, activate=False)
    await store.truncate_after(s, 1, branch_id=TRUNK)
    assert await contents(store, s, TRUNK) == numbered("a")
    assert await contents(store, s, child) == numbered("a", "b", "c", "c-own")
    assert await contents(store, s, grandchild) == numbered("a", "b")
    await store.append(s, [user("t2")], branch_id=TRUNK)
    assert await contents(store, s, child) == numbered("a", "b", "c", "c-own")


async def test_edit_a_turn_is_fork_then_submit(store: StateStore) -> None:
    """Turn 2 is edited: fork before it, run the new turn; the original stays reachable."""
    s = sid()
    await store.ensure_session(s, "a")
    for n, text in ((1, "first"), (2, "second")):
        reply = ChatMessage(role="assistant", content=f"re: {text}")
        await store.commit_turn(s, [user(text), reply], record(s, f"{s}-t{n}"), fence=1)
    edit = await store.fork(s, 2)
    reply = ChatMessage(role="assistant", content="re: edited")
    await store.commit_turn(s, [user("edited"), reply], record(s, f"{s}-t3"), fence=1)
    assert await contents(store, s) == numbered("first", "re: first", "edited", "re: edited")
    assert [m.turn_id for m in await store.get_messages(s)] == [f"{s}-t1"] * 2 + [f"{s}-t3"] * 2
    assert await contents(store, s, TRUNK) == numbered("first", "re: first", "second", "re: second")
    assert edit in {b.branch_id for b in await store.list_branches(s)}


async def test_a_turn_commits_to_the_branch_it_started_on(store: StateStore) -> None:
    s = await session_with(store, "a")
    started_on = (await store.get_session(s)).active_branch  # type: ignore[union-attr]
    history = await store.get_messages(s, started_on)
    other = await store.fork(s, 0)  # the head moves while the turn runs
    await store.commit_turn(
        s, [user("q"), user("r")], record(s, f"{s}-t"), fence=1, branch_id=started_on
    )
    assert await contents(store, s, started_on) == [
        *[(m.sequence, m.content) for m in history],
        (2, "q"),
        (3, "r"),
    ]
    assert await contents(store, s, other) == []
    with pytest.raises(BranchNotFoundError):
        await store.commit_turn(s, [user("x")], record(s, f"{s}-u"), branch_id="nope")
    assert await store.get_turn(f"{s}-u") is None
