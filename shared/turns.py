"""Turns: what a producer submits and how far it has got."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reactq.shared.client_tools import MAX_CLIENT_TOOLS, ClientTool
from reactq.shared.content import ContentPart, ImagePart, TextPart, parse_parts, parts_text
from reactq.shared.errors import (
    EmptyMessageError,
    ImageTooLargeError,
    InvalidSessionIdError,
    InvalidTurnError,
    MessageTooLargeError,
    SchemaVersionError,
)
from reactq.shared.tenancy import TenantIdentity

TURN_SCHEMA_VERSION = 1
# 1-128 of [A-Za-z0-9._:-], but not "." or "..": in a URL path those are dot segments,
# which clients normalise away (/v1/sessions/./events becomes /v1/sessions/events, a
# 404). Spelled without look-ahead so that one pattern also serves the gateway (Rust's
# regex crate) and its OpenAPI document (ECMA-262), where ``$`` is the end of the text;
# Python's ``$`` also matches before a final newline, so match with ``fullmatch``.
SESSION_ID_RE = re.compile(
    r"^(?:[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}"
    r"|\.[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,126}"
    r"|\.\.[A-Za-z0-9._:-]{1,126})$"
)


class TurnStatus(StrEnum):
    """Where a turn is; all but the first three are final."""

    QUEUED = "queued"
    """Accepted: it waits on its session's queue for a worker."""
    RUNNING = "running"
    """A worker runs it."""
    AWAITING_APPROVAL = "awaiting_approval"
    """Parked: tool calls wait for a person's decision; no worker holds the turn."""
    AWAITING_CHILDREN = "awaiting_children"
    """Parked: the turn waits for the child turns it delegated to; no worker holds it."""
    COMPLETED = "completed"
    """The agent answered."""
    MAX_ITERATIONS = "max_iterations"
    """The loop reached the agent's ``max_iterations`` steps without an answer."""
    ERROR = "error"
    """The run failed; the final's ``code`` says why (``reactq errors``)."""
    CANCELLED = "cancelled"
    """Cancelled by a client, or interrupted by a newer turn of its session."""
    REJECTED = "rejected"
    """Refused before it ran (the session was busy under the ``reject`` strategy, or
    belongs to another agent)."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """The turn's or the session's token or cost budget ran out."""
    INVALID_OUTPUT = "invalid_output"
    """The final answer did not match the agent's ``output_type``, twice."""
    BLOCKED = "blocked"
    """A guardrail refused the input (nothing reached the model) or the answer (replaced
    by the guardrail's refusal)."""

    @property
    def is_final(self) -> bool:
        """True once the turn can no longer change."""
        return self not in (
            TurnStatus.QUEUED,
            TurnStatus.RUNNING,
            TurnStatus.AWAITING_APPROVAL,
            TurnStatus.AWAITING_CHILDREN,
        )


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
    if not isinstance(session_id, str) or not SESSION_ID_RE.fullmatch(session_id):
        shown = repr(session_id)[:60]
        raise InvalidSessionIdError(
            f"invalid session id {shown}: use 1-128 characters from [A-Za-z0-9._:-] "
            "(not '.' or '..')",
            session_id=str(session_id)[:128],
        )
    return session_id


TURN_ID_RE = re.compile(r"t_[A-Za-z0-9_-]{1,126}", re.ASCII)
"""A turn id, whole (match with ``fullmatch``): ``t_`` then 1-126 URL-safe ASCII
characters, so at most 128 characters and never a ``|`` (the running slot's
separator). The claim script checks the same rule (``protocol/running_slot.lua``,
``valid_turn_id``)."""


def validate_turn_id(turn_id: object) -> str:
    """Return the turn id, or raise InvalidTurnError if it does not match TURN_ID_RE."""
    if not isinstance(turn_id, str) or TURN_ID_RE.fullmatch(turn_id) is None:
        raise InvalidTurnError(
            f"invalid turn id {repr(turn_id)[:60]}: use t_ and 1-126 characters from [A-Za-z0-9_-]",
            turn_id=str(turn_id)[:128],
        )
    return turn_id


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


def check_message(
    message: str | Sequence[Any], max_text_bytes: int, max_image_bytes: int, max_total_bytes: int
) -> tuple[str, list[TextPart | ImagePart] | None]:
    """The message's text and parts (None for a plain string), or raise:
    EmptyMessageError (no text and no image), MessageTooLargeError (the text over
    ``max_text_bytes``, or the parts as sent over ``max_total_bytes``),
    ImageTooLargeError (an inline image over ``max_image_bytes``) or InvalidImageError."""
    if isinstance(message, str):
        return validate_message(message, max_text_bytes), None
    if not isinstance(message, Sequence):
        raise EmptyMessageError("the message must be text or a list of content parts")
    parts = parse_parts(message)
    text = parts_text(parts)
    images = [p for p in parts if isinstance(p, ImagePart)]
    if not images or text.strip():
        validate_message(text, max_text_bytes)
    for index, image in enumerate(images, 1):
        size = image.size
        if size is not None and size > max_image_bytes:
            raise ImageTooLargeError(
                f"image {index} is {size} bytes, over the limit of {max_image_bytes} "
                "(REACTQ_MAX_IMAGE_BYTES)",
                size=size,
                limit=max_image_bytes,
            )
    total = sum(len(p.model_dump_json(exclude_none=True)) for p in parts)
    if total > max_total_bytes:
        raise MessageTooLargeError(
            f"the message with its images is {total} bytes, over the limit of "
            f"{max_total_bytes} (REACTQ_MAX_CONTENT_BYTES)",
            size=total,
            limit=max_total_bytes,
        )
    return text, parts


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
    """The user's message (the text of its parts, when it has parts)."""
    parts: list[ContentPart] | None = None
    """The message as content parts (text and images), when it was sent so."""
    strategy: MultitaskStrategy = MultitaskStrategy.ENQUEUE
    """What to do when the session is busy."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form data the producer attached (stored on the turn's record, shown by its
    status and kept in the audit log)."""
    context: dict[str, Any] = Field(default_factory=dict)
    """What the turn's tools, hooks, policies and system prompt may read (``ToolContext.
    context``); travels with the turn only, never published in an event."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Loop knobs this turn changes, among those its agent allows (``overridable``)."""
    submitted_at: float = Field(default_factory=time.time)
    """Unix time of submission."""
    webhook: bool | None = None
    """Whether the producer registered a webhook for the turn: the worker looks its
    record up when the turn ends only if so (None, from a producer before 0.2.0: it
    looks), saving every other turn a Redis round trip."""
    client_tools: list[ClientTool] = Field(default_factory=list, max_length=MAX_CLIENT_TOOLS)
    """Tools the caller runs itself (``shared/client_tools.py``): a call to one parks the
    turn until the caller gives its result (``Producer.complete_tool``)."""
    tenant: TenantIdentity | None = None
    """Who the turn acts for: the API key the gateway stamped on it, or what a (trusted)
    Python producer passed; None: nobody in particular (a gateway without keys, a
    producer that named none, a payload from before 0.2.0). A field of its own, so no
    ``metadata`` can set it (``shared/tenancy.py``); the worker hands it to every tool
    call (``ToolContext.tenant``)."""

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
