"""The compaction-summary contract: a summary is a message of its branch that says
which messages it stands for; every backend keeps that, forks inherit it by position,
and the full history stays readable. Run against every backend on real servers."""

from __future__ import annotations

from reactq.shared.messages import ChatMessage
from reactq.shared.state import StateStore, TurnStart
from reactq.worker.agent.context_policy import model_view
from tests.state_fixtures import (  # noqa: F401 - the fixtures register by import
    record,
    sid,
    store_fixture,
    url_fixture,
    user,
)


def summary(text: str, upto: int) -> ChatMessage:
    return ChatMessage(role="user", content=text, summary_of=upto)


async def test_a_summary_keeps_what_it_stands_for(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    await store.append(s, [user("fact: the code is 42"), user("two"), user("three")])
    await store.commit_turn(s, [summary("S: code 42", 2), user("four")], record(s, f"t-{s}"))
    history = await store.get_messages(s)
    assert [(m.sequence, m.summary_of) for m in history] == [
        (1, None),
        (2, None),
        (3, None),
        (4, 2),
        (5, None),
    ]
    start = await store.begin_turn(s, "a")
    # A turn's read starts after what the latest summary stands for.
    assert [m.summary_of for m in start.messages] == [None, 2, None]
    # The model reads from the latest summary on: it, then what it does not stand for.
    assert [m.content for m in model_view(start.messages)] == ["S: code 42", "three", "four"]


async def test_forks_before_and_after_a_summary(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    await store.append(s, [user("one"), user("two"), summary("S", 2), user("three")])
    before = await store.fork(s, 2, new_branch_id="before", activate=False)
    after = await store.fork(s, 3, new_branch_id="after", activate=False)
    seen_before = await store.get_messages(s, before)
    assert [m.summary_of for m in seen_before] == [None, None]
    assert [m.content for m in model_view(seen_before)] == ["one", "two"]
    seen_after = await store.get_messages(s, after)
    assert [m.content for m in model_view(seen_after)] == ["S"]
    # Truncating the parent copies the inherited summary into the child, marker and all.
    await store.truncate_after(s, 1)
    assert [m.summary_of for m in await store.get_messages(s, after)] == [None, None, 2]


# --- a turn's read starts at the latest summary ------------------------------------


def seen(start: TurnStart) -> list[tuple[int | None, str | None]]:
    return [(m.sequence, m.content) for m in start.messages]


async def test_a_turn_reads_from_the_latest_summary_on(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    await store.append(s, [user(f"m{i}") for i in range(1, 6)])
    await store.commit_turn(s, [summary("S1", 2), user("m7")], record(s, f"t1-{s}"))
    # S1 stands for 1..2: the read starts at 3, the first message it does not stand for.
    start = await store.begin_turn(s, "a")
    assert seen(start) == [(3, "m3"), (4, "m4"), (5, "m5"), (6, "S1"), (7, "m7")]
    await store.commit_turn(s, [user("m8"), summary("S2", 5), user("m10")], record(s, f"t2-{s}"))
    start = await store.begin_turn(s, "a")
    assert seen(start) == [(6, "S1"), (7, "m7"), (8, "m8"), (9, "S2"), (10, "m10")]
    # The model reads the latest summary and what it does not stand for (S1 is in S2).
    assert [m.content for m in model_view(start.messages)] == ["S2", "m7", "m8", "m10"]
    # history, forks and the audit still see every message.
    assert len(await store.get_messages(s)) == 10


async def test_a_turn_without_a_summary_reads_the_whole_branch(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    await store.append(s, [user("one"), user("two")])
    assert seen(await store.begin_turn(s, "a")) == [(1, "one"), (2, "two")]


async def test_a_forks_read_starts_at_the_latest_summary_it_sees(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    await store.append(s, [user("m1"), user("m2"), user("m3"), summary("S1", 2), user("m5")])
    before = await store.fork(s, 3, new_branch_id="before", activate=False)
    after = await store.fork(s, 5, new_branch_id="after", activate=False)
    # The trunk summarises again past both fork points: neither fork sees that summary.
    await store.append(s, [user("m6"), summary("S2", 5), user("m8")], branch_id="trunk")
    assert seen(await store.begin_turn(s, "a", branch_id=before)) == [
        (1, "m1"),
        (2, "m2"),
        (3, "m3"),
    ]
    assert seen(await store.begin_turn(s, "a", branch_id=after)) == [
        (3, "m3"),
        (4, "S1"),
        (5, "m5"),
    ]
    assert seen(await store.begin_turn(s, "a", branch_id="trunk")) == [
        (6, "m6"),
        (7, "S2"),
        (8, "m8"),
    ]
    # A fork's own summary wins over the ones it inherits.
    await store.append(s, [user("m6b"), summary("S2b", 4), user("m8b")], branch_id=after)
    assert seen(await store.begin_turn(s, "a", branch_id=after)) == [
        (5, "m5"),
        (6, "m6b"),
        (7, "S2b"),
        (8, "m8b"),
    ]
    # A fork of a fork, past the summary it inherits from the trunk.
    deeper = await store.fork(s, 6, branch_id=after, new_branch_id="deeper", activate=False)
    assert seen(await store.begin_turn(s, "a", branch_id=deeper)) == [
        (3, "m3"),
        (4, "S1"),
        (5, "m5"),
        (6, "m6b"),
    ]


async def test_truncation_moves_a_turns_read_with_the_summaries(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    await store.append(s, [user("m1"), user("m2"), summary("S1", 1), user("m4")])
    await store.append(s, [summary("S2", 3), user("m6")])
    child = await store.fork(s, 6, new_branch_id="child", activate=False)
    # Cutting the trunk after 2 copies 3..6 (both summaries) into the child.
    await store.truncate_after(s, 2)
    assert seen(await store.begin_turn(s, "a", branch_id="trunk")) == [(1, "m1"), (2, "m2")]
    assert seen(await store.begin_turn(s, "a", branch_id=child)) == [
        (4, "m4"),
        (5, "S2"),
        (6, "m6"),
    ]
    # Cutting the child's S2 off: its read starts at S1 again.
    await store.truncate_after(s, 4, branch_id=child)
    assert seen(await store.begin_turn(s, "a", branch_id=child)) == [
        (2, "m2"),
        (3, "S1"),
        (4, "m4"),
    ]
    # A summary written after a cut counts again.
    await store.append(s, [summary("S3", 2), user("m6c")], branch_id=child)
    assert seen(await store.begin_turn(s, "a", branch_id=child)) == [
        (3, "S1"),
        (4, "m4"),
        (5, "S3"),
        (6, "m6c"),
    ]


async def test_a_summary_that_claims_too_much_is_still_read(store: StateStore) -> None:
    s = sid()
    await store.ensure_session(s, "a")
    await store.append(s, [user("m1"), user("m2"), summary("S", 99)])
    assert seen(await store.begin_turn(s, "a")) == [(3, "S")]
