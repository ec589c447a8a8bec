"""An event type is declared once, by its class in shared/events.py: the union is built
from the classes, the renderers draw each from its traits (and an unknown type
generically), the forwarding to parents reads its trait, and docs/events.md and the
page's table are generated from them."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import types
import typing
from typing import Any, ClassVar, Literal

import pytest

from reactq.producer.render import VIEWS, render
from reactq.shared import events
from reactq.shared.events import (
    EVENT_ADAPTER,
    EVENT_CLASSES,
    EVENT_TYPES,
    BaseEvent,
    View,
    parse_event,
)
from reactq.shared.events_doc import DOC_PATH, PAGE_TABLE_PATH, main, page_table
from reactq.shared.events_doc import render as render_doc
from reactq.shared.turns import TurnStatus
from tests.helpers import ROOT

STATIC = ROOT / "producer" / "static"
BUILT_IN_KINDS = {"generic", "hidden", "text"}


class NewFangledEvent(BaseEvent):
    """A type no renderer has a drawing for (it declares no view)."""

    type: Literal["new_fangled"] = "new_fangled"
    answer: int
    words: list[str]


class OddlyDrawnEvent(BaseEvent):
    """A type whose view names a kind the renderers do not know."""

    type: Literal["oddly_drawn"] = "oddly_drawn"
    cli: ClassVar[View] = View("no_such_drawing", "odd")
    page: ClassVar[View] = View("no_such_drawing", "odd")


def _declared(base: type[BaseEvent]) -> list[type[BaseEvent]]:
    found = []
    for cls in base.__subclasses__():
        if "type" in cls.model_fields and not cls.__module__.startswith("tests."):
            found.append(cls)
        found += _declared(cls)
    return found


def _sample(annotation: Any) -> Any:
    """A value the annotation accepts, for a required field."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return typing.get_args(annotation)[0]
    if origin in (typing.Union, types.UnionType):
        return _sample(typing.get_args(annotation)[0])
    if origin is not None:
        return origin()  # list, dict
    if annotation is TurnStatus:
        return TurnStatus.COMPLETED.value
    if annotation is bool:
        return True
    if annotation in (int, float):
        return annotation(3)
    return "x"


def _instance(cls: type[BaseEvent]) -> dict[str, Any]:
    data: dict[str, Any] = {"session_id": "s1", "turn_id": "t_1"}
    for name, field in cls.model_fields.items():
        if field.is_required() and name not in data:
            data[name] = _sample(field.annotation)
    return data


def test_every_event_class_is_in_the_union_and_parses_back() -> None:
    union = typing.get_args(typing.get_args(events.Event)[0])
    assert list(union) == list(EVENT_CLASSES) == _declared(BaseEvent)
    assert len(EVENT_TYPES) == len(EVENT_CLASSES)
    for cls in EVENT_CLASSES:
        event = cls(**_instance(cls))
        assert EVENT_TYPES[cls.event_type()] is cls
        again = parse_event(event.model_dump_json(), event_id="1-1")
        assert type(again) is cls and again.model_dump(exclude={"id"}) == event.model_dump(
            exclude={"id"}
        )
        assert EVENT_ADAPTER.validate_json(event.model_dump_json()) == event


def test_the_type_checkers_spelling_of_the_union_names_every_class() -> None:
    # A type checker reads the union under TYPE_CHECKING (it cannot read one built at
    # run time): it must name the same classes.
    tree = ast.parse((ROOT / "shared" / "events.py").read_text(encoding="utf-8"))
    (guarded,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    assigned = guarded.body[0]
    assert isinstance(assigned, ast.Assign)
    spelled = {n.id for n in ast.walk(assigned.value) if isinstance(n, ast.Name)}
    missing = {cls.__name__ for cls in EVENT_CLASSES} - spelled
    assert not missing, f"add {sorted(missing)} to the TYPE_CHECKING union in shared/events.py"
    assert spelled <= {cls.__name__ for cls in EVENT_CLASSES}


def test_the_wire_format_is_the_same() -> None:
    # The traits are class variables: no event carries them.
    event = parse_event(
        {"type": "final", "session_id": "s", "turn_id": "t", "text": "ok", "status": "completed"}
    )
    dumped = json.loads(event.model_dump_json())
    assert not {"cli", "page", "forwarded_to_parents", "ends_turn"} & set(dumped)
    assert dumped["type"] == "final" and type(event).ends_turn


def test_only_token_streams_usage_and_forwarded_copies_stay_with_the_child() -> None:
    kept = {cls.event_type() for cls in EVENT_CLASSES if not cls.forwarded_to_parents}
    assert kept == {"delta", "reasoning", "usage", "subagent"}
    assert [cls.event_type() for cls in EVENT_CLASSES if cls.ends_turn] == ["final"]


def test_every_cli_view_is_drawn_and_its_template_names_its_fields() -> None:
    for cls in EVENT_CLASSES:
        for view in (cls.cli, cls.page):
            assert view.kind in BUILT_IN_KINDS or view.template == "", cls
            if view.kind == "text":
                view.template.format_map(dict(cls(**_instance(cls))))
        assert cls.cli.kind in BUILT_IN_KINDS | set(VIEWS), cls


def test_the_cli_shows_a_type_it_has_no_drawing_for_generically() -> None:
    event = NewFangledEvent(session_id="s1", turn_id="t_4dd0c2ab", answer=42, words=["a", "é"])
    assert render(event) == '[new_fangled] {"answer":42,"words":["a","é"]}'
    assert render(event, show_session=True, show_turn=True) == (
        '[s1] t_4dd0c2 [new_fangled] {"answer":42,"words":["a","é"]}'
    )
    odd = OddlyDrawnEvent(session_id="s1", turn_id="t_1")
    assert render(odd) == "[oddly_drawn] {}"


def test_the_cli_draws_each_known_type_from_its_view() -> None:
    base = {"session_id": "s1", "turn_id": "t_1"}
    thought = events.ThoughtEvent(**base, text="hmm " * 100)
    assert render(thought) == "thought    " + ("hmm " * 100)[:299] + "…"
    failed = events.ToolFailedEvent(**base, tool="lookup", error="no such key")
    assert render(failed) == "tool error lookup: no such key"
    assert render(events.DeltaEvent(**base, text="d")) is None
    assert render(events.UsageEvent(**base)) is None


def test_the_events_reference_and_the_pages_table_are_up_to_date() -> None:
    assert DOC_PATH.read_text(encoding="utf-8") == render_doc(), (
        "docs/events.md is out of date: run `make docs`"
    )
    assert PAGE_TABLE_PATH.read_text(encoding="utf-8") == page_table(), (
        "producer/static/events.js is out of date: run `make docs`"
    )
    assert main(["--check"]) == 0


def test_the_reference_lists_every_type_and_every_status() -> None:
    text = render_doc()
    for cls in EVENT_CLASSES:
        assert f"| [`{cls.event_type()}`](#{cls.event_type()}) |" in text
        assert f"\n### {cls.event_type()}\n" in text
    statuses = text.split("\n## Turn statuses\n")[1].splitlines()
    for status in TurnStatus:
        row = next(line for line in statuses if line.startswith(f"| `{status.value}` |"))
        final = "yes" if status.is_final else "no"
        assert row.startswith(f"| `{status.value}` | {final} | ") and not row.endswith("|  |")
    assert "| `blocked` | yes | A guardrail refused" in text


def _page(evs: list[BaseEvent], tmp_path: Any) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed (apt-get install -y nodejs)")
    data = tmp_path / "events.json"
    data.write_text(json.dumps([e.model_dump(mode="json") for e in evs]), encoding="utf-8")
    script = ROOT / "tests" / "page_in_node.js"
    args = [node, str(script), str(STATIC / "events.js"), str(STATIC / "app.js"), str(data)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def test_the_page_draws_from_its_table_and_shows_an_unknown_type_generically(
    tmp_path: Any,
) -> None:
    base = {"session_id": "s1", "turn_id": "t_1", "id": "1-0"}
    page = _page(
        [
            events.ThoughtEvent(**base, text="hmm"),
            events.DeltaEvent(**base, text="not shown"),
            events.ToolFailedEvent(**base, tool="lookup", error="no such key"),
            NewFangledEvent(**base, answer=42, words=["a"]),
            OddlyDrawnEvent(**base),
        ],
        tmp_path,
    )
    assert page["rows"] == [
        {"cls": "ev thought", "tag": "thought", "text": "hmm"},
        {"cls": "ev tool_failed", "tag": "tool error", "text": "lookup: no such key"},
        {"cls": "ev generic", "tag": "new_fangled", "text": '{"answer":42,"words":["a"]}'},
        {"cls": "ev generic", "tag": "oddly_drawn", "text": "{}"},
    ]
    # Every kind the table names is a drawing of the page's.
    assert set(page["kinds"]) <= set(page["views"])
    assert set(page["kinds"]) == {cls.page.kind for cls in EVENT_CLASSES}
    assert not page["debug"], "window.reactqDebug is only for a page opened with ?debug"
