"""Render ``docs/events.md`` and the page's view table from the event classes.

Each event's row comes from its class in ``shared/events.py``: its ``type``, its
docstring (when it is published), its fields with their annotations and docstrings,
and its traits; the turn statuses from ``TurnStatus``. The page's table
(``producer/static/events.js``, read by ``app.js``) holds each type's ``page`` view.
Tests compare both files with what this renders. Regenerate with ``make docs`` or
``python -m reactq.shared.events_doc --write``.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path

from pydantic_core import PydanticUndefined

from reactq.shared.config_doc import doc_command
from reactq.shared.events import EVENT_CLASSES, BaseEvent
from reactq.shared.turns import TurnStatus

__all__ = ["DOC_PATH", "PAGE_TABLE_PATH", "attribute_docs", "page_table", "render"]

_ROOT = Path(__file__).resolve().parent.parent
DOC_PATH = _ROOT / "docs" / "events.md"
PAGE_TABLE_PATH = _ROOT / "producer" / "static" / "events.js"

HEADER = """\
# Events

<!-- Generated from shared/events.py by `make docs`; do not edit by hand. -->

Every step of a turn is one event on its session's stream, as JSON (`reactq watch
--json`, the gateway's `/v1/sessions/{id}/events`, `Producer.subscribe`). Each is
declared once, by its class in `shared/events.py` (`reactq.Event` is their union):
its fields, when it is published, and its traits. *Forwarded*: a child turn's event
of that type also reaches the session of every turn above it, as a short `subagent`
event. *Ends the turn*: each turn ends with exactly one of them.
"""


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings under a class's attributes (the string after each assignment),
    read from its source: the meaning of each field, or of each member of an enum."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for stmt, after in itertools.pairwise(body):
        target: ast.expr | None = None
        if isinstance(stmt, ast.AnnAssign):
            target = stmt.target
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
        if not (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)):
            continue
        if isinstance(target, ast.Name) and isinstance(after.value.value, str):
            docs[target.id] = inspect.cleandoc(after.value.value)
    return docs


def _default(cls: type[BaseEvent], name: str) -> str:
    field = cls.model_fields[name]
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if name == "ts":
        return "now"
    return f"`{json.dumps(value, default=str)}`"


def _fields_table(cls: type[BaseEvent], names: list[str]) -> list[str]:
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if isinstance(klass, type) and issubclass(klass, BaseEvent):
            docs.update(attribute_docs(klass))
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name in names:
        annotation = cls.model_fields[name].annotation
        shown = _annotation(cls, name) or getattr(annotation, "__name__", str(annotation))
        rows.append(
            f"| `{name}` | `{_one_line(shown)}` | {_default(cls, name)} "
            f"| {_one_line(docs.get(name))} |"
        )
    return rows


def _annotation(cls: type, name: str) -> str | None:
    for klass in cls.__mro__:
        found = getattr(klass, "__annotations__", {}).get(name)
        if found is not None:
            return str(found)
    return None


def _own_fields(cls: type[BaseEvent]) -> list[str]:
    return [n for n in cls.model_fields if n not in BaseEvent.model_fields and n != "type"]


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def render() -> str:
    """The whole reference, as markdown."""
    out = [HEADER, "## Event types", ""]
    out += [
        "| type | published when | fields | forwarded | ends the turn |",
        "|---|---|---|---|---|",
    ]
    for cls in EVENT_CLASSES:
        fields = ", ".join(f"`{n}`" for n in _own_fields(cls)) or "-"
        out.append(
            f"| [`{cls.event_type()}`](#{cls.event_type()}) | {_one_line(cls.__doc__)} "
            f"| {fields} | {_yes(cls.forwarded_to_parents)} | {_yes(cls.ends_turn)} |"
        )
    out += ["", "## Fields every event has", ""]
    out += _fields_table(BaseEvent, list(BaseEvent.model_fields))
    out += ["", "## Each event's fields"]
    for cls in EVENT_CLASSES:
        out += ["", f"### {cls.event_type()}", ""]
        out += [f"`{cls.__name__}`: {_one_line(cls.__doc__)}", ""]
        own = _own_fields(cls)
        out += _fields_table(cls, own) if own else ["No fields beyond those every event has."]
    out += ["", "## Turn statuses", ""]
    out += [
        "Where a turn is (`TurnStatus`); a `final` event's `status` is one of the final ones.",
        "",
        "| status | final | meaning |",
        "|---|---|---|",
    ]
    meanings = attribute_docs(TurnStatus)
    for status in TurnStatus:
        meaning = _one_line(meanings.get(status.name))
        out.append(f"| `{status.value}` | {_yes(status.is_final)} | {meaning} |")
    return "\n".join(out) + "\n"


def page_table() -> str:
    """``producer/static/events.js``: each event type's ``page`` view, and the fields
    every event has (which the page's generic line leaves out)."""
    views = ",\n".join(
        f"  {json.dumps(cls.event_type())}: {json.dumps(asdict(cls.page))}" for cls in EVENT_CLASSES
    )
    base = json.dumps([*BaseEvent.model_fields, "type"])
    return (
        "// Generated from shared/events.py by `make docs`; do not edit by hand.\n"
        "// How the page shows each event type (its class's `page` view; app.js draws it).\n"
        '"use strict";\n'
        f"const EVENT_VIEWS = {{\n{views},\n}};\n"
        f"const EVENT_BASE_FIELDS = {base};\n"
    )


def main(argv: list[str] | None = None) -> int:
    """``--write`` docs/events.md and the page's table, ``--check`` them, else print them."""
    prog = "python -m reactq.shared.events_doc"
    doc = doc_command(argv, prog=prog, path=DOC_PATH, text=render())
    table = doc_command(argv, prog=prog, path=PAGE_TABLE_PATH, text=page_table())
    return doc or table


if __name__ == "__main__":
    sys.exit(main())
