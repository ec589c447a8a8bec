"""Tool results as the model reads them, and keeping a long run under its context budget."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic import BaseModel

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "OBSERVATION_PREFIX",
    "UNPRINTABLE_RESULT",
    "arguments_too_deep",
    "fit_context",
    "format_tool_result",
    "safe_text",
    "shrink_text",
    "tool_error_text",
]

MAX_ARGUMENT_DEPTH = 64
OBSERVATION_PREFIX = "Observation"
UNPRINTABLE_RESULT = "The tool returned a value that cannot be shown as text."


def safe_text(text: str) -> str:
    """``text`` with lone surrogates escaped (``\\ud800``): UTF-8 cannot carry them."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def format_tool_result(result: Any) -> str:
    """A tool's return value as the model reads it.

    A str as is; anything else as JSON (non-ASCII kept literal); else its repr;
    else a fixed sentence. Lone surrogates are escaped, never sent raw.
    """
    if isinstance(result, str):
        return safe_text(result)
    try:
        text = json.dumps(result, ensure_ascii=False, default=_jsonable)
    except Exception:  # circular references, odd keys, a __str__ that raises
        try:
            text = repr(result)
        except Exception:  # a broken __repr__ must not fail the call
            return UNPRINTABLE_RESULT
    return safe_text(text)


def tool_error_text(code: str, error: str) -> str:
    """A failed call's result as the model reads it: its code first, then the error
    (``[tool_timeout] the tool timed out after 5 s``), so the model can tell a retry
    worth making (a timeout) from one that is not (invalid arguments)."""
    return f"[{code}] {error}"


def _jsonable(value: Any) -> Any:
    """JSON for what ``json`` cannot encode: models and dataclasses by field, else str."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def arguments_too_deep(text: str, limit: int = MAX_ARGUMENT_DEPTH) -> bool:
    """True when JSON ``text`` nests objects/arrays deeper than ``limit`` (checked undecoded).

    Decoding a hostile, deeply nested document costs stack and time; this scan
    is linear and allocates nothing.
    """
    if text.count("{") + text.count("[") <= limit:  # the common case: cannot be too deep
        return False
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
            if depth > limit:
                return True
        elif char in "}]":
            depth -= 1
    return False


def shrink_text(text: str, keep: int) -> str:
    """``text`` cut to about ``keep`` characters: its head and tail, with a marker between."""
    if len(text) <= keep:
        return text
    head = keep * 2 // 3
    tail = keep - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:] if tail else ''}"


def fit_context(
    wire: list[dict[str, Any]], budget: int, *, protect: int, keep: int = 400
) -> list[dict[str, Any]]:
    """Shrink the oldest tool results (head+tail) until ``wire`` fits ``budget`` characters.

    The last ``protect`` messages (the step the model is answering) are never
    touched; a shrunk message is a copy, so the stored history keeps the full text.
    """
    total = sum(len(m.get("content") or "") for m in wire)
    if total <= budget:
        return wire
    out = list(wire)
    for index in range(max(0, len(out) - protect)):
        message = out[index]
        content = message.get("content") or ""
        role = message.get("role")
        # Text modes return observations as user messages that start "Observation".
        if role != "tool" and not (role == "user" and content.startswith(OBSERVATION_PREFIX)):
            continue
        if len(content) <= keep:
            continue
        shrunk = shrink_text(content, keep)
        total -= len(content) - len(shrunk)
        out[index] = {**message, "content": shrunk}
        if total <= budget:
            break
    return out
