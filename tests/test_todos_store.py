"""Issue 19, item 2: a session's todo list on every state backend (memory, SQLite,
PostgreSQL, Redis), on real servers: written whole, read back in order, kept apart
per session, gone with the session."""

from __future__ import annotations

import pytest

from reactq.shared.errors import StaleLeaseError
from reactq.shared.state import StateStore
from reactq.shared.state.todo_store import TodoItem, TodoStatus
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


async def test_a_write_with_a_stale_fence_is_refused_and_writes_nothing(
    store: StateStore,
) -> None:
    session = sid()
    await store.ensure_session(session, "planner")
    await store.claim(session, 5)  # the lease's newest holder has token 5
    kept = [TodoItem(id="a", text="the holder's plan")]
    await store.set_todos(session, kept, fence=5)
    assert await store.get_todos(session) == kept
    with pytest.raises(StaleLeaseError, match="stale"):
        await store.set_todos(session, [TodoItem(id="b", text="a lost holder's")], fence=4)
    with pytest.raises(StaleLeaseError):
        await store.set_todos(session, [], fence=4)  # nor may it clear the list
    assert await store.get_todos(session) == kept
    # The holder with the newest token still writes; unfenced writes (no lease) too.
    await store.set_todos(session, [], fence=6)
    assert await store.get_todos(session) == []
    await store.set_todos(session, kept)
    assert await store.get_todos(session) == kept


async def test_update_todos_from_a_worker_that_lost_the_lease_is_a_tool_error(
    store: StateStore,
) -> None:
    from reactq.bundles import todo_tools
    from reactq.shared.errors import ToolError
    from reactq.worker.agent.tools import ToolContext

    update = {t.name: t for t in todo_tools()}["update_todos"]
    session = sid()
    await store.ensure_session(session, "planner")
    await store.claim(session, 2)
    holder = ToolContext(session_id=session, turn_id="t_new", store=store, fence=2)
    await update.call({"todos": [{"id": "1", "text": "the holder's"}]}, holder)
    lost = ToolContext(session_id=session, turn_id="t_old", store=store, fence=1)
    with pytest.raises(ToolError, match="no longer holds the lease of session"):
        await update.call({"todos": [{"id": "1", "text": "overwritten"}]}, lost)
    assert [i.text for i in await store.get_todos(session)] == ["the holder's"]
