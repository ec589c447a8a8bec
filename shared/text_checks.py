"""Text that cannot be stored: finding it (to refuse it) and repairing it (U+FFFD).

UTF-8 cannot carry a lone surrogate (``"\\ud800"``, which JSON may spell and a model or a
tool may produce), and PostgreSQL's text refuses NUL. Such text is dealt with where it
enters (docs/architecture.md, "Text that cannot be stored"): a caller's input is refused
(``unencodable_at`` names the place), what a model or a tool produced is repaired
(``repair_text``, ``repair_json``), so nothing downstream (a store, a stream, the next
request to the model, an HTTP answer) meets it.

The walkers are iterative: a JSON value may nest deeper than Python's recursion limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_JSON_DEPTH",
    "REPLACEMENT",
    "is_storable",
    "nesting_over",
    "repair_json",
    "repair_text",
    "unencodable_at",
]

REPLACEMENT = "\ufffd"
"""What a lone surrogate or a NUL becomes."""

MAX_JSON_DEPTH = 64
"""How deep a caller's JSON value (metadata, context, a document) may nest. Deeper
values are refused where they enter: pydantic serialises at most 254 levels, so a
stored value near that depth would turn every listing that shows it into a 500."""

_UNSAFE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def is_storable(text: str) -> bool:
    """True when ``text`` holds no surrogate code point and no NUL."""
    return not _bad(text, nul=True)


def repair_text(text: str, *, nul: bool = True) -> str:
    """``text`` with each lone surrogate (and, with ``nul``, each NUL) replaced by U+FFFD.

    A surrogate pair written as two code points (a UTF-16 view, or an escaped pair split
    across stream chunks and joined) becomes the one character it spells.
    """
    if not text.isascii() and _SURROGATE.search(text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.replace("\x00", REPLACEMENT) if nul and "\x00" in text else text


def repair_json(value: Any, *, nul: bool = True) -> Any:
    """``value`` (decoded JSON: dicts, lists, scalars) with every str key and value
    repaired (``repair_text``); containers that needed no repair are returned as they
    are, others are copied."""

    def _fix(item: Any) -> Any:
        return repair_text(item, nul=nul) if isinstance(item, str) else item

    if isinstance(value, str):
        return _fix(value)
    if not isinstance(value, dict | list) or unencodable_at(value, nul=nul) is None:
        return value
    root: Any = dict(value) if isinstance(value, dict) else list(value)
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            items = list(node.items())
            node.clear()
            for key, item in items:
                if isinstance(item, dict | list):
                    item = dict(item) if isinstance(item, dict) else list(item)
                    stack.append(item)
                node[_fix(key)] = _fix(item)
        else:
            for index, item in enumerate(node):
                if isinstance(item, dict | list):
                    node[index] = item = dict(item) if isinstance(item, dict) else list(item)
                    stack.append(item)
                else:
                    node[index] = _fix(item)
    return root


def _bad(text: str, nul: bool) -> bool:
    if text.isascii():
        return nul and "\x00" in text
    return bool((_UNSAFE if nul else _SURROGATE).search(text))


def unencodable_at(value: Any, where: str = "", *, nul: bool = False) -> str | None:
    """Where in ``value`` (decoded JSON) the first text UTF-8 cannot carry is: a dotted
    path from ``where`` (``metadata.tags[2]``; a key at fault is named as the place it
    would be), or None when there is none. ``nul`` counts NUL as such text too.

    A surrogate pair as two code points counts: a valid pair in JSON text
    (``"\\ud83d\\ude00"``) decodes to the one character, so only a lone half gets here.
    """
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if _bad(node, nul):
                return path
        elif isinstance(node, Mapping):
            found: list[tuple[Any, str]] = []
            for key, item in node.items():
                name = f"{path}.{key}" if path else str(key)
                if isinstance(key, str) and _bad(key, nul):
                    return repair_text(name)
                found.append((item, name))
            stack.extend(reversed(found))
        elif isinstance(node, list | tuple):
            stack.extend((item, f"{path}[{i}]") for i, item in reversed(list(enumerate(node))))
    return None


def nesting_over(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when ``value`` (decoded JSON) nests objects and arrays deeper than ``limit``."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            items: Any = node.values()
        elif isinstance(node, list | tuple):
            items = node
        else:
            continue
        if depth >= limit:
            return True
        stack.extend(
            (item, depth + 1) for item in items if isinstance(item, Mapping | list | tuple)
        )
    return False
