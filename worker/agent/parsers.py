"""Parsers for the text tool modes: a JSON envelope, or ReAct prose blocks.

Both return a ``ParsedStep`` (a final answer, or one tool call) and raise
``ParserError`` when the text holds neither. Both have a recovery pass: a valid
``{...}`` object inside surrounding chatter (a code fence, a preamble) is found
and used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from reactq.shared.errors import ParserError

__all__ = ["JsonParser", "ParsedStep", "Parser", "ProseParser", "find_json_object"]

_DECODER = json.JSONDecoder()

EMPTY_ANSWER = (
    "the answer was empty (an answer that starts with an Observation is cut off there: "
    "only the tool writes its result)"
)


@dataclass(frozen=True)
class ParsedStep:
    """What one model answer asks for: ``final`` text, or a ``tool`` with ``args``."""

    final: str | None = None
    """The final answer, when the model is done."""
    tool: str | None = None
    """The tool to call, when it is not."""
    args: dict[str, Any] = field(default_factory=dict)
    """The call's arguments."""
    thought: str | None = None
    """The reasoning the model wrote alongside, if any."""


@runtime_checkable
class Parser(Protocol):
    """Turns a model's text into a ParsedStep; raises ParserError when it cannot."""

    def parse(self, text: str) -> ParsedStep:
        """Parse one answer."""
        ...


def find_json_object(text: str, accept: Any = None) -> dict[str, Any] | None:
    """The first ``{...}`` in ``text`` that decodes to an object (and that ``accept`` takes)."""
    start = text.find("{")
    while start != -1:
        try:
            value, _ = _DECODER.raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, dict) and (accept is None or accept(value)):
            return value
        start = text.find("{", start + 1)
    return None


def _is_envelope(value: dict[str, Any]) -> bool:
    return value.get("action") in ("tool", "final") or _loose_call(value) is not None


def _loose_call(value: dict[str, Any]) -> tuple[str, Any] | None:
    """(tool, args) of a call written in a shape other than the taught one, or None.

    Small models mix up the envelope: the tool's name in ``"action"``
    (``{"action": "get_weather", "args": {...}}``, with or without ``"tool"``), or
    the function-calling shape they were trained on (``{"name": ..., "arguments":
    ...}``). Each is read as the call it plainly is; ``"final"`` never is one.
    """
    action, tool, args = value.get("action"), value.get("tool"), value.get("args")
    if action == "final":
        return None
    if isinstance(tool, str) and tool and isinstance(args, dict):
        return tool, args
    if isinstance(action, str) and action and action != "tool" and isinstance(args, dict):
        return action, args
    name, arguments = value.get("name"), value.get("arguments")
    if isinstance(name, str) and name and isinstance(arguments, dict | str):
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                return None
        return (name, arguments) if isinstance(arguments, dict) else None
    return None


class JsonParser:
    """``{"action": "tool", "tool": ..., "args": {...}}`` or ``{"action": "final", "answer": ...}``.

    An optional ``"thought"`` field is reported as the model's reasoning. The first
    envelope in the text wins: a call followed by an invented result and answer is
    the call. A call in a mixed-up shape is read as the call (``_loose_call``).
    """

    def parse(self, text: str) -> ParsedStep:
        """Parse one answer (the whole text first, then any envelope inside it)."""
        stripped = text.strip()
        if not stripped:
            raise ParserError(EMPTY_ANSWER)
        envelope: Any = None
        try:
            envelope = json.loads(stripped)
        except ValueError:
            pass
        if not (isinstance(envelope, dict) and _is_envelope(envelope)):
            envelope = find_json_object(text, _is_envelope)
        if envelope is None:
            raise ParserError(
                "the answer is not a JSON envelope: expected "
                '{"action": "tool", "tool": ..., "args": {...}} or '
                '{"action": "final", "answer": ...}'
            )
        thought = envelope.get("thought")
        thought = thought if isinstance(thought, str) and thought.strip() else None
        loose = _loose_call(envelope) if envelope.get("action") != "tool" else None
        if loose is not None:
            return ParsedStep(tool=loose[0], args=loose[1], thought=thought)
        if envelope["action"] == "final":
            answer = envelope.get("answer")
            if answer is None:
                raise ParserError('a "final" envelope needs an "answer"')
            text_answer = answer if isinstance(answer, str) else json.dumps(answer)
            return ParsedStep(final=text_answer, thought=thought)
        name = envelope.get("tool")
        if not isinstance(name, str) or not name:
            raise ParserError('a "tool" envelope needs a "tool" name')
        args = envelope.get("args", {})
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise ParserError('"args" must be a JSON object')
        return ParsedStep(tool=name, args=args, thought=thought)


# A role label before a marker ("Assistant: Action: ...") is the worked example's,
# copied: the marker still counts.
_PROSE_MARKERS = re.compile(
    r"^[ \t]*(?:Assistant[ \t]*:[ \t]*)?"
    r"(Thought|Action|Action Input|Observation|Final Answer)[ \t]*:",
    re.M | re.I,
)


class ProseParser:
    """ReAct blocks: ``Thought:`` / ``Action:`` / ``Action Input:``, or ``Final Answer:``.

    Whichever of Action and Final Answer comes first wins: text the model wrote
    after an action (an imagined Observation) is never trusted.
    """

    def parse(self, text: str) -> ParsedStep:
        """Parse one answer."""
        if not text.strip():
            raise ParserError(EMPTY_ANSWER)
        sections: dict[str, str] = {}
        order: list[str] = []
        matches = list(_PROSE_MARKERS.finditer(text))
        for index, match in enumerate(matches):
            key = match.group(1).lower()
            end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
            if key not in sections:
                sections[key] = text[match.end() : end].strip()
                order.append(key)
        thought = sections.get("thought") or None
        first = next((k for k in order if k in ("action", "final answer")), None)
        if first == "final answer":
            return ParsedStep(final=sections["final answer"], thought=thought)
        if first != "action":
            raise ParserError(
                "the answer has neither an 'Action:' nor a 'Final Answer:' line; "
                "use Thought:/Action:/Action Input: or Thought:/Final Answer:"
            )
        name = (
            sections["action"].splitlines()[0].strip().strip("`").strip()
            if sections["action"]
            else ""
        )
        if not name:
            raise ParserError("'Action:' names no tool")
        raw = sections.get("action input", "").strip()
        return ParsedStep(tool=name, args=_prose_args(raw), thought=thought)


def _prose_args(raw: str) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        value = find_json_object(raw)  # recovery: inside a code fence or prose
    if not isinstance(value, dict):
        raise ParserError('\'Action Input:\' must be a JSON object, e.g. {"city": "Paris"}')
    return value
