"""What every backend's ``list_sessions`` and ``update_metadata`` share.

Sessions are listed newest first by ``(created_at, session_id)``, a key that never
changes, so a cursor (the key of a page's last session) pages through a listing
without skipping or repeating a session however many are written meanwhile. A
backend reads sessions in that order, in batches after a key, and ``collect``
applies the filters and cuts the page.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from reactq.shared.errors import InvalidCursorError, InvalidMetadataError
from reactq.shared.state.base import SessionPage, SessionRecord

MAX_LIMIT = 1000
"""The largest page ``list_sessions`` returns."""

Key = tuple[float, str]
"""A session's place in a listing: (created_at, session_id), newest first."""


def key_of(session: SessionRecord) -> Key:
    """The session's place in a listing."""
    return (session.created_at, session.session_id)


def encode_cursor(key: Key) -> str:
    """An opaque cursor for the sessions after ``key``."""
    raw = json.dumps([repr(key[0]), key[1]], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> Key | None:
    """The key a cursor stands for (None for None); InvalidCursorError if it is not one."""
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, session_id = json.loads(raw)
        if not isinstance(session_id, str) or not isinstance(created, str):
            raise ValueError(cursor)
        return (float(created), session_id)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidCursorError(
            f"cursor {cursor[:40]!r} is not one a listing handed out: pass a page's next_cursor"
        ) from None


def check_limit(limit: int) -> int:
    """``limit`` if 1..MAX_LIMIT, else ValueError."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")
    return limit


def check_metadata(patch: object) -> dict[str, Any]:
    """``patch`` as JSON reads it back (a dict: tuples become lists) if it is a JSON
    object (string keys, values JSON can carry), else InvalidMetadataError."""
    if not isinstance(patch, Mapping) or not all(isinstance(k, str) for k in patch):
        raise InvalidMetadataError("metadata must be a JSON object: a dict with string keys")
    try:
        copy: dict[str, Any] = json.loads(dump_value(dict(patch)))
    except (ValueError, TypeError, RecursionError) as exc:
        raise InvalidMetadataError(f"metadata cannot be stored as JSON: {exc}"[:300]) from None
    return copy


def merged(current: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` with ``patch`` applied: a None value removes its key."""
    out = dict(current)
    for name, value in patch.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def dump_value(value: Any) -> str:
    """A metadata value as stored JSON text (ASCII, so any text round-trips)."""
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def selects(
    session: SessionRecord,
    agent: str | None,
    metadata: Mapping[str, Any] | None,
    updated_since: float | None,
) -> bool:
    """Whether the filters of ``list_sessions`` keep ``session``."""
    if agent is not None and session.agent != agent:
        return False
    if updated_since is not None and session.updated_at < updated_since:
        return False
    return all(
        name in session.metadata and session.metadata[name] == value
        for name, value in (metadata or {}).items()
    )


async def collect(
    newest_first: AsyncIterator[SessionRecord],
    *,
    agent: str | None,
    metadata: Mapping[str, Any] | None,
    updated_since: float | None,
    limit: int,
) -> SessionPage:
    """The page of ``limit`` sessions the filters keep from ``newest_first`` (the
    sessions after the cursor, in listing order)."""
    page: list[SessionRecord] = []
    async for session in newest_first:
        if not selects(session, agent, metadata, updated_since):
            continue
        if len(page) == limit:
            return SessionPage(sessions=page, next_cursor=encode_cursor(key_of(page[-1])))
        page.append(session)
    return SessionPage(sessions=page)
