"""Issue 19, item 2: a session's todo list on every state backend (memory, SQLite,
PostgreSQL, Redis), on real servers: written whole, read back in order, kept apart
per session, gone with the session."""

from __future__ import annotations

from reactq.shared.state import StateStore
from reactq.shared.state.todos import TodoItem, TodoStatus
from tests.state_fixtures import sid, store_fixture, url_fixture

__all__ = ["store_fixture", "url_fixture"]


async def test_a_list_is_replaced_whole_and_read_back_in_order(store: StateStore) -> None:
    session, other = sid(), sid()
    assert await store.get_todos(session) == []
    first = [
        TodoItem(id="2", text="write the code"),
        TodoItem(id="1", text="read the spec — ünïcode", status=TodoStatus.IN_PROGRESS),
    ]
    await store.set_todos(session, first)
    assert await store.get_todos(session) == first
    second = [first[1].model_copy(update={"status": TodoStatus.DONE})]
    await store.set_todos(session, second)
    assert await store.get_todos(session) == second
    assert await store.get_todos(other) == []  # another session's list is its own
    await store.set_todos(session, [])
    assert await store.get_todos(session) == []


async def test_the_list_goes_with_its_session(store: StateStore) -> None:
    session = sid()
    await store.ensure_session(session, "planner")
    await store.set_todos(session, [TodoItem(id="a", text="plan")])
    assert await store.delete_session(session) is True
    assert await store.get_todos(session) == []
