"""Readable one-line renderings of events for the terminal."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from reactq.shared.events import Event


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


def render(event: Event, *, show_session: bool = False, show_turn: bool = False) -> str | None:
    """One line for a person, or None for events not worth a line (deltas, a usage
    without a context gauge).

    ``show_session`` and ``show_turn`` start the line with the session id and the
    turn's tag, for output where several sessions or turns interleave.
    """
    prefix = f"[{event.session_id}] " if show_session else ""
    if show_turn:
        prefix += f"{turn_tag(event.turn_id)} "
    match event.type:
        case "queued":
            line = f"queued     {event.turn_id} for agent {event.agent}: {_short(event.message)}"
            line += "".join(f" [image: {image}]" for image in event.images)
        case "started":
            line = f"started    attempt {event.attempt} on {event.worker or 'a worker'}"
            if event.resumed_from_step is not None:
                line += f", resuming after step {event.resumed_from_step}"
        case "thought":
            line = f"thought    {_short(event.text)}"
        case "action":
            line = f"action     {_call(event.tool, event.args)}"
        case "observation":
            line = f"result     {event.tool} -> {_short(event.output)}"
        case "tool_failed":
            line = f"tool error {event.tool}: {_short(event.error)}"
        case "file_change":
            where = f"{event.from_path} -> {event.path}" if event.from_path else event.path
            size = "" if event.kind == "deleted" else f" ({event.size:,} bytes)"
            line = f"file       {event.kind} {where}{size}"
        case "todos":
            marks = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]"}
            items = [
                f"{marks.get(str(item.get('status')), '[?]')} {item.get('text')}"
                for item in event.items
            ]
            line = f"todos      {'; '.join(items) or '(empty)'}"
        case "error":
            line = f"error      {event.code}: {_short(event.message)}"
        case "approval_requested":
            waiting = "; ".join(
                f"{_call(c['tool'], c['arguments'])} (call {c['call_id']})" for c in event.calls
            )
            line = f"approval?  {waiting}: reactq approve|deny {event.turn_id} CALL"
        case "approval_decided":
            verdict = "approved" if event.approved else "denied"
            why = f": {_short(event.reason)}" if event.reason else ""
            line = f"decided    call {event.call_id} {verdict} by {event.by}{why}"
        case "usage" if event.context_window:
            line = (
                f"context    {event.context_percent}% of {event.context_window:,} tokens "
                f"({event.context_tokens or 0:,} in the request)"
            )
        case "turns_left_out":
            line = (
                f"context    left out the {len(event.turn_ids)} oldest turns (messages "
                f"{event.from_sequence}-{event.up_to_sequence}): no summary, {event.reason}"
            )
        case "subagent":
            # A child turn's progress, indented by its depth: the tree reads top down.
            status = f" [{event.status}]" if event.status else ""
            text = f" {_short(event.text)}" if event.text else ""
            line = f"{'  ' * event.depth}└ {event.agent} {event.event}{status}{text}"
        case "final":
            # Endings the protocol writes start with their status ("cancelled: ..."),
            # which the [status] label already says.
            text = event.text.removeprefix(f"{event.status}: ")
            line = f"final      [{event.status}] {text}"
        case _:
            return None
    return prefix + line
