"""The todo list: a per-session plan the agent keeps and works against.

``todo_tools()`` gives an agent two META tools::

    from reactq.bundles import todo_tools

    agent = Agent(name="coder", tools=[*file_tools(), *todo_tools()])

``update_todos`` writes the list (the whole of it, or updates to some items by id)
and ``list_todos`` reads it. The list lives in the state store (``StateStore.get_todos``
/ ``set_todos``, fenced by the session's lease: a worker that lost it gets a tool error
and writes nothing), so whichever worker runs the session's next turn sees it, and the
current list is added to the system prompt of every model call of the session's
turns. Each change is published as a ``todos`` event with the whole list.

Items come from the model: one that is not an object with a usable ``id`` and
``text`` (or a known ``status``) is dropped with a log line, and the tool's answer
names it; the rest of the call still applies, and the turn goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field, ValidationError

from reactq.shared.errors import StaleLeaseError, ToolError
from reactq.shared.events import TodosEvent
from reactq.shared.state.todo_store import MAX_TODOS, TodoItem, TodoStatus, TodoStore
from reactq.worker.agent.tools import Tool, ToolCategory, ToolContext

__all__ = ["todo_section", "todo_tools"]

log = logging.getLogger("reactq.bundles")

_MARKS = {TodoStatus.PENDING: "[ ]", TodoStatus.IN_PROGRESS: "[~]", TodoStatus.DONE: "[x]"}
_ITEM_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "A short id, unique in the list (1, 2, a-b)."},
        "text": {"type": "string", "description": "What to do."},
        "status": {"type": "string", "enum": [s.value for s in TodoStatus]},
    },
    "required": ["id"],
}

UPDATE_DESCRIPTION = (
    "Plan your work as a todo list, kept for the whole session. Give `todos` to replace "
    "the list (each item: id, text, status pending/in_progress/done), or `updates` to "
    "change some items by id (give status and/or text; an unknown id with text adds an "
    "item). Keep one item in_progress at a time and mark items done as you finish them."
)


def _list_of_items(description: str) -> Callable[[dict[str, Any]], None]:
    """The schema the model sees: an array of items. Each item is checked by the tool,
    not by the schema's validator, so that a malformed one is dropped, not the call."""

    def shape(schema: dict[str, Any]) -> None:
        schema.clear()
        schema.update(type="array", items=_ITEM_SCHEMA, description=description)

    return shape


def _store(ctx: ToolContext) -> TodoStore:
    if ctx.store is None:
        raise ToolError("the todo list needs the session's state store; this run has none")
    return ctx.store


def render(items: list[TodoItem]) -> str:
    """A list as the model reads it: one ``[x] id: text`` line an item."""
    if not items:
        return "The todo list is empty."
    return "\n".join(f"{_MARKS[item.status]} {item.id}: {item.text}" for item in items)


async def todo_section(ctx: ToolContext) -> str | None:
    """The system prompt's todo section for the turn's session (None: no list)."""
    if ctx.store is None or not ctx.session_id:
        return None
    items = await ctx.store.get_todos(ctx.session_id)
    if not items:
        return None
    return (
        "# Your todo list\n"
        "The plan you keep with update_todos ([ ] pending, [~] in progress, [x] done):\n"
        + render(items)
    )


def _describe(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 80 else text[:77] + "..."


def _whole(raw: list[Any], dropped: list[str]) -> list[TodoItem]:
    """The valid items of a whole new list, each id once, at most MAX_TODOS."""
    out: list[TodoItem] = []
    seen: set[str] = set()
    for entry in raw:
        try:
            item = TodoItem.model_validate(entry)
        except ValidationError as exc:
            dropped.append(f"{_describe(entry)} ({exc.errors()[0]['msg']})")
            continue
        if item.id in seen:
            dropped.append(f"{_describe(entry)} (id {item.id!r} given twice)")
            continue
        seen.add(item.id)
        out.append(item)
    return out


def _updated(items: list[TodoItem], raw: list[Any], dropped: list[str]) -> list[TodoItem]:
    """``items`` with each update applied by id (an unknown id with text is added)."""
    by_id = {item.id: index for index, item in enumerate(items)}
    out = list(items)
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            dropped.append(f"{_describe(entry)} (an update needs an id)")
            continue
        index = by_id.get(entry["id"])
        try:
            if index is None:
                item = TodoItem.model_validate(entry)
                by_id[item.id] = len(out)
                out.append(item)
            else:
                out[index] = TodoItem.model_validate({**out[index].model_dump(), **entry})
        except ValidationError as exc:
            dropped.append(f"{_describe(entry)} ({exc.errors()[0]['msg']})")
    return out


async def update_todos(
    ctx: ToolContext,
    todos: Annotated[
        list[Any] | None, Field(json_schema_extra=_list_of_items("The whole new list."))
    ] = None,
    updates: Annotated[
        list[Any] | None, Field(json_schema_extra=_list_of_items("Changes to items by id."))
    ] = None,
) -> str:
    """Write the session's todo list: the whole of it, or updates to some items."""
    if todos is None and updates is None:
        raise ToolError("give `todos` (the whole list) or `updates` (changes by id)")
    store = _store(ctx)
    before = await store.get_todos(ctx.session_id)
    dropped: list[str] = []
    items = _whole(todos, dropped) if todos is not None else list(before)
    if updates is not None:
        items = _updated(items, updates, dropped)
    if len(items) > MAX_TODOS:
        dropped.extend(f"{item.id!r} (over {MAX_TODOS} items)" for item in items[MAX_TODOS:])
        items = items[:MAX_TODOS]
    for why in dropped:
        log.warning("update_todos dropped a malformed item of session %s: %s", ctx.session_id, why)
    if items != before:
        try:
            await store.set_todos(ctx.session_id, items, fence=ctx.fence)
        except StaleLeaseError:
            # Another worker holds the session now and runs this turn on: its list wins.
            raise ToolError(
                "the todo list was not written: this worker no longer holds the lease of "
                f"session {ctx.session_id} (another worker runs it now)"
            ) from None
        if ctx.emitter is not None:
            await ctx.emitter.emit(
                TodosEvent, items=[item.model_dump(mode="json") for item in items]
            )
    answer = render(items)
    if dropped:
        answer += "\n\nDropped (malformed): " + "; ".join(dropped)
    return answer


async def list_todos(ctx: ToolContext) -> str:
    """Read the session's todo list."""
    return render(await _store(ctx).get_todos(ctx.session_id))


def todo_tools() -> list[Tool]:
    """``update_todos`` and ``list_todos``, for ``Agent(tools=[...])``: META tools that
    also put the current list in the system prompt of every model call."""
    return [
        Tool(
            update_todos,
            name="update_todos",
            description=UPDATE_DESCRIPTION,
            category=ToolCategory.META,
            prompt_section=todo_section,
        ),
        Tool(
            list_todos,
            name="list_todos",
            description="Read your todo list for this session.",
            category=ToolCategory.META,
            prompt_section=todo_section,
        ),
    ]
