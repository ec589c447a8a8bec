"""@tool schemas, validation, ToolContext injection, and the Registry."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from reactq.worker.agent.tools import Registry, Tool, ToolArgumentsError, ToolContext, tool


class Point(BaseModel):
    x: float
    y: float


@tool
def plain(city: str, days: int = 3) -> str:
    """Forecast for a city.

    This paragraph is not part of the description.

    Args:
        city: The city's name.
        days: How many days ahead.
    """
    return f"{city}:{days}"


def test_schema_from_type_hints_and_docstring() -> None:
    assert isinstance(plain, Tool)
    assert plain.name == "plain"
    assert plain.description == "Forecast for a city."
    assert plain.parameters == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "city": {"type": "string", "description": "The city's name."},
            "days": {"type": "integer", "default": 3, "description": "How many days ahead."},
        },
        "required": ["city"],
    }
    assert plain.openai_schema() == {
        "type": "function",
        "function": {
            "name": "plain",
            "description": "Forecast for a city.",
            "parameters": plain.parameters,
        },
    }


def test_rich_types_overrides_and_awkward_parameter_names() -> None:
    @tool(name="rich-tool", description="Overridden.", timeout=2.5)
    async def rich(
        point: Point,
        unit: Literal["c", "f"] = "c",
        tags: list[str] | None = None,
        note: Annotated[str, Field(description="A note.")] = "",
        schema: int = 0,  # shadows BaseModel.schema: must still work
        title: str = "",  # a property called "title" must survive title stripping
    ) -> dict[str, object]:
        return {"point": point, "unit": unit, "tags": tags, "schema": schema, "title": title}

    assert (rich.name, rich.description, rich.timeout) == ("rich-tool", "Overridden.", 2.5)
    props = rich.parameters["properties"]
    assert set(props) == {"point", "unit", "tags", "note", "schema", "title"}
    assert props["unit"]["enum"] == ["c", "f"]
    assert props["note"]["description"] == "A note."
    assert props["point"] == {"$ref": "#/$defs/Point"}
    assert "title" not in rich.parameters["$defs"]["Point"]
    assert rich.parameters["required"] == ["point"]

    result = asyncio.run(rich.call({"point": {"x": 1, "y": "2"}, "schema": "7", "title": "t"}))
    assert result["point"] == Point(x=1, y=2)  # nested models arrive as objects
    assert (result["schema"], result["title"], result["unit"]) == (7, "t", "c")


async def test_context_is_injected_and_hidden_from_the_model() -> None:
    seen: list[ToolContext] = []

    @tool
    async def remember(key: str, ctx: ToolContext) -> str:
        seen.append(ctx)
        return key

    @tool
    def optional_ctx(ctx: ToolContext | None = None) -> str:
        return ctx.turn_id if ctx else "none"

    assert "ctx" not in remember.parameters["properties"]
    assert optional_ctx.parameters["properties"] == {}
    assert await remember.call({"key": "k"}, ToolContext("s1", "t1", 2)) == "k"
    assert seen == [ToolContext(session_id="s1", turn_id="t1", attempt=2)]
    assert await optional_ctx.call({}, ToolContext(turn_id="t9")) == "t9"


async def test_invalid_arguments_are_refused_before_the_call() -> None:
    calls: list[object] = []

    @tool
    def count(n: int) -> int:
        calls.append(n)
        return n

    with pytest.raises(ToolArgumentsError) as missing:
        await count.call({})
    assert "n: Field required" in missing.value.message
    assert missing.value.code == "invalid_arguments"
    with pytest.raises(ToolArgumentsError, match="valid integer"):
        await count.call({"n": "many"})
    with pytest.raises(ToolArgumentsError, match="bogus: Extra inputs"):
        await count.call({"n": 1, "bogus": True})
    assert calls == []
    assert await count.call({"n": "4"}) == 4  # lax coercion, as pydantic does


async def test_sync_tools_run_off_the_event_loop() -> None:
    @tool
    def where() -> str:
        return threading.current_thread().name

    assert await where.call({}) != threading.current_thread().name
    assert where() == threading.current_thread().name  # calling the Tool directly still works


def test_bad_definitions_fail_at_decoration() -> None:
    with pytest.raises(ValueError, match=r"\*args/\*\*kwargs"):

        @tool
        def variadic(*args: int) -> None: ...

    with pytest.raises(ValueError, match="invalid"):
        tool(name="has space")(lambda: None)
    with pytest.raises(ValueError, match="timeout"):
        tool(name="ok", timeout=0)(lambda: None)


def test_registry() -> None:
    def helper(q: str) -> str:
        """Look something up."""
        return q

    registry = Registry([plain])
    wrapped = registry.register(helper)  # a plain function is wrapped
    assert isinstance(wrapped, Tool) and wrapped.description == "Look something up."
    assert len(registry) == 2 and "plain" in registry and "nope" not in registry
    assert registry.get("helper") is wrapped and registry.get("nope") is None
    assert registry.names == ["plain", "helper"]
    assert [t["function"]["name"] for t in registry.openai_tools()] == ["plain", "helper"]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(plain)
    with pytest.raises(ValueError, match="already registered"):
        Registry([plain, plain])
    assert Registry().openai_tools() == []


def test_an_unresolvable_return_annotation_does_not_matter() -> None:
    @tool
    def local(n: int) -> NotDefinedAnywhere:  # type: ignore[name-defined]  # noqa: F821
        """Returns something."""
        return n

    assert local.parameters["properties"] == {"n": {"type": "integer"}}
    assert asyncio.run(local.call({"n": "3"})) == 3
