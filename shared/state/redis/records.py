"""How the Redis backend's records are written and read: JSON with a schema version
(``v``), text a UTF-8 codec refuses stored escaped (``shared/state/text.py``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from reactq.shared.errors import BranchNotFoundError, SchemaVersionError, SessionNotFoundError
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.state.base import SessionInfo, TurnRecord
from reactq.shared.state.text import dec, dump_extra, dump_parts, enc, load_extra, load_parts
from reactq.shared.turns import TurnStatus

RECORD_VERSION = 1
"""Schema version of every record this store writes."""


def texts(reply: Sequence[Any]) -> list[str]:
    """A script's reply as text."""
    return [x.decode() if isinstance(x, bytes) else str(x) for x in reply]


def raise_for(session_id: str, reply: list[str]) -> None:
    """Raise the error a script's reply names (a session or branch missing), if any."""
    if reply[0] == "no_session":
        raise SessionNotFoundError(f"no session {session_id!r} in the store")
    if reply[0] == "no_branch":
        raise BranchNotFoundError(
            f"session {session_id!r} has no branch {reply[1]!r}",
            session_id=session_id,
            branch_id=reply[1],
        )


def dump(data: dict[str, Any]) -> str:
    """A record as compact JSON (ASCII: escapes survive every client)."""
    return json.dumps(data, ensure_ascii=True, separators=(",", ":"))


def load(raw: bytes | str, what: str) -> dict[str, Any]:
    """A stored record, refused (SchemaVersionError) when newer than this reactq reads."""
    data: dict[str, Any] = json.loads(raw)
    version = data.get("v", RECORD_VERSION)
    if version > RECORD_VERSION:
        raise SchemaVersionError(
            f"a stored {what} has schema version {version}; this reactq reads up to "
            f"{RECORD_VERSION}: upgrade reactq",
            version=version,
        )
    return data


def turn_record(raw: bytes | str) -> TurnRecord:
    """A stored turn record."""
    data = load(raw, "turn record")
    return TurnRecord(
        turn_id=data["turn_id"],
        session_id=data["session_id"],
        status=TurnStatus(data["status"]),
        attempt=data["attempt"],
        final_text=dec(data["final_text"]),
        error=dec(data["error"]),
        created_at=data["created_at"],
        # Records written before these fields existed lack them.
        metadata=data.get("metadata") or {},
        config_version=data.get("config_version"),
        usage=data.get("usage") or {},
        cost=data.get("cost"),
    )


def text(value: bytes | str) -> str:
    """A reply's value as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def member(created_at: float, session_id: str) -> str:
    """A session's entry in the listing's index: its creation time, fixed width, so
    the members' byte order is the listing's order (newest last)."""
    return f"{created_at:017.6f}|{session_id}"


def dump_record(record: TurnRecord) -> str:
    """A turn record as stored."""
    data = record.model_dump(mode="json")
    data.update(final_text=enc(record.final_text), error=enc(record.error))
    return dump({"v": RECORD_VERSION, **data})


def dump_message(message: ChatMessage, turn_id: str | None, now: float) -> str:
    """A message as stored, its turn ``turn_id`` unless it names one."""
    return dump(
        {
            "v": RECORD_VERSION,
            "role": message.role,
            "content": enc(message.content),
            "name": enc(message.name),
            "tool_calls": None
            if message.tool_calls is None
            else enc(json.dumps([c.model_dump() for c in message.tool_calls], ensure_ascii=False)),
            "tool_call_id": enc(message.tool_call_id),
            "turn_id": message.turn_id or turn_id,
            "created_at": now,
            "reasoning": enc(message.reasoning),
            "extra": dump_extra(message.extra),
            # Only on summaries: ordinary messages stay as they were stored before.
            **({"summary_of": message.summary_of} if message.summary_of is not None else {}),
            **({"parts": dump_parts(message.parts)} if message.parts else {}),
        }
    )


_MARK_MAX = 10**10 - 1


def summary_marks(messages: Sequence[ChatMessage]) -> str:
    """The summaries among ``messages`` as ``state_write.lua`` lists them: 20 digits
    each, the message's index from 1 and its ``summary_of`` (clamped to the width)."""
    return "".join(
        f"{index:010d}{min(max(m.summary_of, 0), _MARK_MAX):010d}"
        for index, m in enumerate(messages, 1)
        if m.summary_of is not None
    )


def message_of(raw: bytes | str, sequence: int) -> ChatMessage:
    """A stored message, at ``sequence``."""
    data = load(raw, "message")
    calls = dec(data.get("tool_calls"))
    return ChatMessage(
        role=data["role"],
        content=dec(data.get("content")),
        parts=load_parts(data.get("parts")),
        name=dec(data.get("name")),
        tool_calls=None
        if calls is None
        else [ToolCall.model_validate(c) for c in json.loads(calls)],
        tool_call_id=dec(data.get("tool_call_id")),
        reasoning=dec(data.get("reasoning")),
        extra=load_extra(data.get("extra")),
        turn_id=data.get("turn_id"),
        sequence=sequence,
        summary_of=data.get("summary_of"),
    )


def session_info(session_id: str, row: Sequence[Any]) -> SessionInfo:
    """A session's state hash fields (``v, agent, active, fence, created_at``)."""
    version, agent, active, fence, created = (
        x.decode() if isinstance(x, bytes) else x for x in row
    )
    if int(version) > RECORD_VERSION:
        raise SchemaVersionError(
            f"session {session_id!r} has schema version {version}; this reactq reads up to "
            f"{RECORD_VERSION}: upgrade reactq",
            version=int(version),
        )
    return SessionInfo(
        session_id=session_id,
        agent=agent,
        active_branch=active,
        fence=int(fence),
        created_at=float(created),
    )
