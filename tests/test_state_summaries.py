"""The compaction-summary contract: a summary is a message of its branch that says
which messages it stands for; every backend keeps that, forks inherit it by position,
and the full history stays readable. Run against every backend on real servers."""

from __future__ import annotations

from reactq.shared.messages import ChatMessage
from reactq.shared.state import StateStore
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
    assert [m.summary_of for m in start.messages] == [None, None, None, 2, None]
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
