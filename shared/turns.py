"""Turns: what a producer submits and how far it has got."""

from __future__ import annotations

import json
import re
import time
import uuid
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reactq.shared.errors import (
    EmptyMessageError,
    InvalidSessionIdError,
    MessageTooLargeError,
    SchemaVersionError,
)

TURN_SCHEMA_VERSION = 1
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class TurnStatus(StrEnum):
    """Where a turn is; the last six are final."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    MAX_ITERATIONS = "max_iterations"
    ERROR = "error"
    CANCELLED = "cancelled"
    REJECTED = "rejected"
    BUDGET_EXCEEDED = "budget_exceeded"

    @property
    def is_final(self) -> bool:
        """True once the turn can no longer change."""
        return self not in (TurnStatus.QUEUED, TurnStatus.RUNNING)


class MultitaskStrategy(StrEnum):
    """What a new turn does when its session already has one running or pending."""

    ENQUEUE = "enqueue"
    REJECT = "reject"
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"


def new_turn_id() -> str:
    """A fresh, sortable-enough, unique turn id."""
    return f"t_{uuid.uuid4().hex}"


def validate_session_id(session_id: object) -> str:
    """Return the session id, or raise InvalidSessionIdError saying what is wrong."""
    if not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id):
        shown = repr(session_id)[:60]
        raise InvalidSessionIdError(
            f"invalid session id {shown}: use 1-128 characters from [A-Za-z0-9._:-]",
            session_id=str(session_id)[:128],
        )
    return session_id


def validate_message(message: object, max_bytes: int) -> str:
    """Return the message, or raise EmptyMessageError / MessageTooLargeError."""
    if not isinstance(message, str) or not message.strip():
        raise EmptyMessageError("the message is empty: send some text")
    size = len(message.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise MessageTooLargeError(
            f"the message is {size} bytes, over the limit of {max_bytes} "
            "(REACTQ_MAX_MESSAGE_BYTES)",
            size=size,
            limit=max_bytes,
        )
    return message


class TurnRequest(BaseModel):
    """A turn as it travels from the producer to a worker (the pending list entry)."""

    model_config = ConfigDict(frozen=True)

    v: Literal[1] = 1
    """Schema version of this payload."""
    turn_id: str = Field(default_factory=new_turn_id)
    """Unique id of the turn."""
    session_id: str
    """The conversation it belongs to."""
    agent: str
    """The agent that runs it."""
    message: str
    """The user's message."""
    strategy: MultitaskStrategy = MultitaskStrategy.ENQUEUE
    """What to do when the session is busy."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form data the producer attached."""
    submitted_at: float = Field(default_factory=time.time)
    """Unix time of submission."""

    @classmethod
    def parse(cls, raw: str | bytes) -> TurnRequest:
        """Parse a wire payload, refusing an unknown schema version clearly."""
        data = json.loads(raw)
        if isinstance(data, dict) and data.get("v") not in (None, TURN_SCHEMA_VERSION):
            raise SchemaVersionError(
                f"turn payload has schema version {data.get('v')!r}; "
                f"this reactq reads version {TURN_SCHEMA_VERSION}"
            )
        return cls.model_validate(data)
