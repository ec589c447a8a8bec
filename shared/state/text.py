"""How stored text survives drivers and codecs that refuse some code points.

Text SQL drivers refuse: NUL (PostgreSQL) and lone surrogates (UTF-8), which a
model or a tool can produce. Such a value, or one that starts with the marker, is
stored as the marker followed by its escaped form (``\\ud800``, the way JSON
spells it); everything else is stored as it is. Every backend uses this, so a
surrogate pair written as two code points is not merged into one character
(which a plain JSON round trip would do).
"""

from __future__ import annotations

import json
import re
from typing import Any

MARK = "\ue000"
_UNSAFE = re.compile("[\x00\ud800-\udfff]")


def enc(value: str | None) -> str | None:
    """A text value as stored (escaped only if a driver would refuse it)."""
    if value is None or not (value.startswith(MARK) or _UNSAFE.search(value)):
        return value
    return MARK + value.encode("unicode_escape").decode("ascii")


def dec(value: str | None) -> str | None:
    """The text value ``enc`` stored."""
    if value is None or not value.startswith(MARK):
        return value
    return value[1:].encode("ascii").decode("unicode_escape")


def dump_extra(extra: dict[str, Any] | None) -> str | None:
    """A message's unknown provider fields as the stored JSON text."""
    return None if not extra else enc(json.dumps(extra, ensure_ascii=False, default=str))


def load_extra(raw: str | None) -> dict[str, Any] | None:
    """The fields ``dump_extra`` stored."""
    text = dec(raw)
    return None if text is None else dict(json.loads(text))


def dump_parts(parts: list[Any] | None) -> str | None:
    """A message's content parts (pydantic models) as the stored JSON text."""
    if not parts:
        return None
    return enc(json.dumps([p.model_dump(exclude_none=True) for p in parts], ensure_ascii=False))


def load_parts(raw: str | None) -> list[Any] | None:
    """The content parts ``dump_parts`` stored, as JSON data (ChatMessage validates them)."""
    text = dec(raw)
    return None if text is None else list(json.loads(text))
