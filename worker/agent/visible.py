"""What a person should see of a model's answer while it streams: ``DeltaBuffer``
coalesces the pieces into ``delta`` events, ``VisibleText`` keeps the protocol out.

In the JSON and PROSE modes the model writes a protocol (a JSON envelope, ReAct
blocks); only the final answer's text is for people. ``VisibleText`` is fed the
streamed pieces of one model call and returns the new text of the final answer
they reveal: nothing for a tool call, thoughts or the envelope around the answer.
What it has let through is always a prefix of what the parser will return as the
answer, so the rest can be sent once the answer is parsed.
"""

from __future__ import annotations

import json
import re
import time

from reactq.shared.bus import TurnEmitter
from reactq.shared.events import DeltaEvent, ReasoningEvent

__all__ = ["DeltaBuffer", "VisibleText"]

_JSON_ACTION = re.compile(r'"action"\s*:\s*"(tool|final)"')
_JSON_ANSWER = re.compile(r'"answer"\s*:\s*"')
# The parser's markers (parsers.py), a copied "Assistant:" label before one included.
_PROSE_MARKER = re.compile(
    r"^[ \t]*(?:Assistant[ \t]*:[ \t]*)?"
    r"(Thought|Action|Action Input|Observation|Final Answer)[ \t]*:",
    re.M | re.I,
)
_PROSE_KEYWORDS = ("thought", "action", "action input", "observation", "final answer")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class VisibleText:
    """Filters one streamed model call of a text mode (``json`` or ``prose``)."""

    def __init__(self, mode: str) -> None:
        self.json = mode == "json"
        self.text = ""
        self.shown = ""

    def feed(self, piece: str) -> str:
        """Take one streamed piece; return the answer text it newly reveals ("" if none)."""
        self.text += piece
        visible = _json_answer(self.text) if self.json else _prose_answer(self.text)
        # Never take back what was shown: a later piece only ever extends it.
        if len(visible) <= len(self.shown) or not visible.startswith(self.shown):
            return ""
        new, self.shown = visible[len(self.shown) :], visible
        return new

    def rest(self, answer: str) -> str:
        """The part of the parsed ``answer`` not shown yet ("" when what was shown
        is not a prefix of it: nothing is sent twice)."""
        return answer[len(self.shown) :] if answer.startswith(self.shown) else ""


def _json_answer(text: str) -> str:
    """The decoded part of a final envelope's ``answer`` string so far."""
    action = _JSON_ACTION.search(text)
    if action is None or action.group(1) != "final":
        return ""
    start = _JSON_ANSWER.search(text)
    if start is None:
        return ""
    out: list[str] = []
    index, end = start.end(), len(text)
    while index < end:
        char = text[index]
        if char == '"':
            break
        if char != "\\":
            out.append(char)
            index += 1
            continue
        if index + 1 >= end:
            break  # an escape cut by the chunking: wait for the rest
        kind = text[index + 1]
        if kind == "u":
            if index + 6 > end:
                break
            try:
                out.append(json.loads(f'"{text[index : index + 6]}"'))
            except ValueError:
                break  # half a surrogate pair, or not hex: the parser decides
            index += 6
            continue
        out.append(_ESCAPES.get(kind, kind))
        index += 2
    return "".join(out)


def _prose_answer(text: str) -> str:
    """The text after ``Final Answer:`` so far, when it comes before any ``Action:``."""
    final = None
    for match in _PROSE_MARKER.finditer(text):
        key = match.group(1).lower()
        if final is not None:
            return text[final : match.start()].strip()  # the answer's section ended
        if key == "action":
            return ""
        if key == "final answer":
            final = match.end()
    if final is None:
        return ""
    answer = text[final:].lstrip()
    # Hold back a last line that may become a marker, and trailing blanks the parser strips.
    head, newline, last = answer.rpartition("\n")
    if newline and _may_become_marker(last):
        answer = head
    return answer.rstrip()


def _may_become_marker(line: str) -> bool:
    stripped = line.lstrip().lower()
    return any(keyword.startswith(stripped) for keyword in _PROSE_KEYWORDS)


class DeltaBuffer:
    """Coalesces streamed text into ``delta`` events: at most one per ``interval`` seconds.

    With ``visible`` (the text modes), only the final answer's text goes out;
    ``event`` is the event type to publish (``ReasoningEvent`` for reasoning text).
    """

    __slots__ = ("buffer", "emitter", "event", "interval", "last", "received", "visible")

    def __init__(
        self,
        emitter: TurnEmitter,
        interval: float,
        visible: VisibleText | None = None,
        event: type[DeltaEvent | ReasoningEvent] = DeltaEvent,
    ) -> None:
        self.emitter = emitter
        self.event = event
        self.interval = interval
        self.visible = visible
        self.buffer: list[str] = []
        self.last = time.monotonic()
        self.received = False
        """True once a piece arrived (it may have been shown)."""

    async def add(self, text: str) -> None:
        """Take one streamed piece (what ``visible`` lets through of it)."""
        self.received = True
        if self.visible is not None:
            text = self.visible.feed(text)
            if not text:
                return
        self.buffer.append(text)
        if time.monotonic() - self.last >= self.interval:
            await self.flush()

    async def flush(self) -> None:
        """Publish what is gathered, as one ``delta`` event."""
        if self.buffer:
            text, self.buffer = "".join(self.buffer), []
            await self.emitter.emit(self.event, text=text)
        self.last = time.monotonic()
