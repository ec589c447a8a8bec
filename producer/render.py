"""Readable one-line renderings of events for the terminal.

Each event class says how the CLI shows it (its ``cli`` view, ``shared/events.py``):
``hidden``, ``text`` (a tag and a template of its fields), ``generic`` (the type and
its fields as compact JSON: the default, so a type without a drawing is still seen),
or one of the drawings in ``VIEWS`` below.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from reactq.shared.events import (
    ActionEvent,
    ApprovalDecidedEvent,
    ApprovalRequestedEvent,
    BaseEvent,
    FileChangeEvent,
    FinalEvent,
    QueuedEvent,
    StartedEvent,
    SubagentEvent,
    TodosEvent,
    ToolProgressEvent,
    TurnsLeftOutEvent,
    UsageEvent,
)

__all__ = ["VIEWS", "render", "turn_tag", "when"]


def when(ts: float | None) -> str:
    """A Unix time as the CLI prints it (UTC, to the second); ``-`` for None."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call(tool: str, args: Any) -> str:
    if isinstance(args, dict):
        inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
        return f"{tool}({inner})"
    return f"{tool}({_short(args, 200)})"


def turn_tag(turn_id: str) -> str:
    """A turn id short enough to start every line with (``t_4dd0c2``): the full id
    begins with it, as the turn's ``queued`` line shows."""
    return turn_id[:8]


def _queued(event: QueuedEvent) -> str:
    images = "".join(f" [image: {image}]" for image in event.images)
    return f"{event.turn_id} for agent {event.agent}: {_short(event.message)}{images}"


def _started(event: StartedEvent) -> str:
    line = f"attempt {event.attempt} on {event.worker or 'a worker'}"
    if event.resumed_from_step is not None:
        line += f", resuming after step {event.resumed_from_step}"
    return line


def _action(event: ActionEvent) -> str:
    return _call(event.tool, event.args)


def _file(event: FileChangeEvent) -> str:
    where = f"{event.from_path} -> {event.path}" if event.from_path else event.path
    size = "" if event.kind == "deleted" else f" ({event.size:,} bytes)"
    return f"{event.kind} {where}{size}"


def _todos(event: TodosEvent) -> str:
    marks = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]"}
    items = [f"{marks.get(str(i.get('status')), '[?]')} {i.get('text')}" for i in event.items]
    return "; ".join(items) or "(empty)"


def _approval(event: ApprovalRequestedEvent) -> str:
    waiting = "; ".join(
        f"{_call(c['tool'], c['arguments'])} (call {c['call_id']})" for c in event.calls
    )
    ids = [str(c["call_id"]) for c in event.calls]
    # The command to copy, once per waiting call (the turn resumes when all are decided).
    commands = "; ".join(f"reactq approve|deny {event.turn_id} {i}" for i in ids)
    return f"{waiting}: {commands}"


def _decision(event: ApprovalDecidedEvent) -> str:
    verdict = "approved" if event.approved else "denied"
    why = f": {_short(event.reason)}" if event.reason else ""
    edited = f", to run with {_short(json.dumps(event.arguments))}" if event.arguments else ""
    return f"call {event.call_id} {verdict} by {event.by}{edited}{why}"


def _progress(event: ToolProgressEvent) -> str:
    done = f" ({event.fraction:.0%})" if event.fraction is not None else ""
    return f"{event.tool}: {_short(event.message)}{done}"


def _gauge(event: UsageEvent) -> str | None:
    if not event.context_window:
        return None  # a usage without a context gauge is not worth a line
    return (
        f"{event.context_percent}% of {event.context_window:,} tokens "
        f"({event.context_tokens or 0:,} in the request)"
    )


def _left_out(event: TurnsLeftOutEvent) -> str:
    return (
        f"left out the {len(event.turn_ids)} oldest turns (messages "
        f"{event.from_sequence}-{event.up_to_sequence}): no summary, {event.reason}"
    )


def _tree(event: SubagentEvent) -> str:
    # A child turn's progress, indented by its depth: the tree reads top down.
    status = f" [{event.status}]" if event.status else ""
    text = f" {_short(event.text)}" if event.text else ""
    return f"{'  ' * event.depth}└ {event.agent} {event.event}{status}{text}"


def _answer(event: FinalEvent) -> str:
    # Endings the protocol writes start with their status ("cancelled: ..."), which the
    # [status] label already says.
    return f"[{event.status}] {event.text.removeprefix(f'{event.status}: ')}"


VIEWS: dict[str, Callable[[Any], str | None]] = {
    "queued": _queued,
    "started": _started,
    "call": _action,
    "file": _file,
    "todos": _todos,
    "approval": _approval,
    "decision": _decision,
    "gauge": _gauge,
    "progress": _progress,
    "left_out": _left_out,
    "tree": _tree,
    "answer": _answer,
}
"""The CLI's own drawings, by the view kind an event class names: each gives the line
after the view's tag (None: no line)."""

BASE_FIELDS = frozenset(BaseEvent.model_fields) | {"type"}
"""The fields every event has, which a generic line leaves out."""


def _generic(event: BaseEvent) -> str:
    fields = {k: v for k, v in event.model_dump(mode="json").items() if k not in BASE_FIELDS}
    kind = getattr(event, "type", type(event).__name__)
    return f"[{kind}] {json.dumps(fields, ensure_ascii=False, separators=(',', ':'))}"


def render(event: BaseEvent, *, show_session: bool = False, show_turn: bool = False) -> str | None:
    """One line for a person, or None for events not worth a line (deltas, a usage
    without a context gauge).

    ``show_session`` and ``show_turn`` start the line with the session id and the
    turn's tag, for output where several sessions or turns interleave.
    """
    prefix = f"[{event.session_id}] " if show_session else ""
    if show_turn:
        prefix += f"{turn_tag(event.turn_id)} "
    view = type(event).cli
    if view.kind == "hidden":
        return None
    if view.kind == "text":
        values = {k: _short(v) if isinstance(v, str) else v for k, v in dict(event).items()}
        text: str | None = view.template.format_map(values)
    elif view.kind in VIEWS:
        text = VIEWS[view.kind](event)
    else:  # generic, or a kind this CLI has no drawing for
        return prefix + _generic(event)
    if text is None:
        return None
    return prefix + (f"{view.tag:<10} {text}" if view.tag else text)
