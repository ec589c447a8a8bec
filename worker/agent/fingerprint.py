"""A definition's fingerprint: a short hash that changes when the definition does.

Every worker computes the same hash for the same agent definition, so values are
described by what they are, never by where they live: a function by its module and
qualified name, an object by its class and its public attributes, never a memory
address. A change inside a function's body does not change its fingerprint; a
change of the agent's settings, tools (names, schemas, flags) or prompts does.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["describe", "fingerprint"]

_DEPTH = 6


def describe(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-able data stable across processes."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return describe(value.value, depth)
    if depth >= _DEPTH:
        return _name(value)
    if isinstance(value, Mapping):
        return {str(k): describe(v, depth + 1) for k, v in sorted(value.items(), key=_key)}
    if isinstance(value, set | frozenset):
        return sorted((describe(v, depth + 1) for v in value), key=repr)
    if isinstance(value, list | tuple):
        return [describe(v, depth + 1) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.repr}
        return {"__type__": _name(value), **describe(fields, depth + 1)}
    if callable(value) and hasattr(value, "__qualname__"):
        return _name(value)
    return {"__type__": _name(value), **_public(value, depth)}


def fingerprint(value: Any) -> str:
    """A 12-hex-digit hash of ``describe(value)``."""
    text = json.dumps(describe(value), sort_keys=True, default=repr, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _key(item: tuple[Any, Any]) -> str:
    return str(item[0])


def _name(value: Any) -> str:
    target = value if callable(value) and hasattr(value, "__qualname__") else type(value)
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', '?')}"


def _public(value: Any, depth: int) -> dict[str, Any]:
    attrs = getattr(value, "__dict__", None)
    if not isinstance(attrs, dict):
        return {}
    return {
        k: describe(v, depth + 1)
        for k, v in sorted(attrs.items())
        if not k.startswith("_") and not callable(v)
    }
