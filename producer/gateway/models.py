"""Request and response bodies of the gateway (the OpenAPI schemas).

Events and messages are the pydantic models of ``shared/``; these are only the
envelopes around them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reactq.shared.content import ContentPart
from reactq.shared.messages import MAX_SEQUENCE, ChatMessage
from reactq.shared.turns import MultitaskStrategy, TurnStatus

AGENT_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
"""An agent's name."""
TURN_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
"""A turn's id (and a branch's)."""
# ``[0-9]``, not ``\d``: pydantic's regex engine takes any script's digits for ``\d``.
# The pattern is the shape (and what the OpenAPI document shows); the range check
# (each part at most 2**64-1) is ``validate_stream_id``.
STREAM_ID_PATTERN = r"^([0-9]{1,20}(-[0-9]{1,20})?|\$)$"
"""A Redis stream id, or ``$`` (live only)."""
NAMESPACE_PATTERN = r"^[A-Za-z0-9_:@+-]{1,128}(\.[A-Za-z0-9_:@+-]{1,128}){0,7}$"
"""A long-term store namespace, dotted: 1-8 segments."""
KEY_PATTERN = r"^[A-Za-z0-9._:@+-]{1,256}$"
"""A long-term store document's key."""


class TurnCreate(BaseModel):
    """A turn to submit."""

    # The docstrings describe the fields in the OpenAPI document too.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    # Blank text is refused by the producer (422 ``empty_message``, ``body.message``).
    message: str | Annotated[list[ContentPart], Field(min_length=1)]
    """The user's message: not blank, at most REACTQ_MAX_MESSAGE_BYTES bytes of UTF-8
    (else 422 or 413); or content parts in the OpenAI shape, text and images (an http(s)
    URL or a ``data:image/...;base64,`` URL, at most REACTQ_MAX_IMAGE_BYTES each and
    REACTQ_MAX_CONTENT_BYTES in all, else 413; the body itself is bounded by
    REACTQ_MAX_REQUEST_BYTES)."""
    agent: str = Field(pattern=AGENT_PATTERN)
    """The agent that runs it: one a worker of the pool hosts (else 422)."""
    strategy: MultitaskStrategy = MultitaskStrategy.ENQUEUE
    """What to do when the session is busy."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form data attached to the turn: stored on its record, returned by
    ``GET /v1/turns/{id}`` and kept in the audit log."""
    context: dict[str, Any] = Field(default_factory=dict)
    """What the turn's tools, hooks and system prompt may read (never published): at
    most REACTQ_MAX_CONTEXT_BYTES as JSON (else 413)."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Loop knobs this turn changes, among those the agent allows (else 422 naming the
    field)."""
    webhook: str | None = Field(None, max_length=2048)
    """An http(s) URL POSTed (signed) when the turn ends; else the agent's default. A URL
    that is not public is refused (422, ``webhook_refused``)."""


class TurnAccepted(BaseModel):
    """A turn the gateway put on the session's queue."""

    turn_id: str
    """The new turn's id."""
    session_id: str
    """Its session."""
    status: TurnStatus
    """``queued``."""
    events_url: str
    """Where to stream this turn's events (closes after its ``final``)."""
    hint: str | None = None
    """Set when no live worker hosts the turn's agent: the turn waits in the queue until
    one starts (a worker beats every ``REACTQ_HEARTBEAT_SECONDS``)."""


class CallResult(BaseModel):
    """A waiting call's result, given in place of running it."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    result: Any = None
    """The observation: text, or JSON data the model reads as JSON."""
    error: str | None = Field(None, min_length=1, max_length=16_000)
    """Instead of ``result``: the error the call failed with (a tool error)."""
    by: str | None = Field(None, min_length=1, max_length=200)
    """On whose behalf (kept after the API key's name, as for decisions)."""


class DecisionsRequest(BaseModel):
    """Decisions on a turn's waiting tool calls, all recorded or none."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    decisions: dict[str, bool | str] = Field(min_length=1)
    """``{call_id: true}`` approves, ``false`` denies, a string denies with that reason."""
    notes: dict[str, str] = Field(default_factory=dict)
    """An optional note per approved call."""
    arguments: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """``{call_id: {...}}``: the arguments an approved call runs with instead of the
    model's, checked against the tool's JSON Schema (422 ``invalid_edit`` otherwise)."""
    by: str | None = Field(None, min_length=1, max_length=200)
    """On whose behalf the caller decides. The recorded decider is the API key's
    name, with this after it (``ops for alice``); without keys (loopback) it is this,
    or ``gateway``."""


class DecisionMade(BaseModel):
    """One decision as recorded."""

    call_id: str
    """The call."""
    approved: bool
    """Whether it runs."""
    reason: str | None = None
    """The approval's note, or why it was denied."""
    by: str
    """Who decided."""
    arguments: dict[str, Any] | None = None
    """The arguments the call runs with, when the decision changed them."""


class DecisionsAccepted(BaseModel):
    """What a decisions request recorded."""

    turn_id: str
    """The turn."""
    session_id: str
    """Its session."""
    decided: list[DecisionMade]
    """The decisions recorded."""
    ready: bool
    """True when every waiting call has a decision: the turn resumes on a free worker."""


class CancelAccepted(BaseModel):
    """What a cancellation request did."""

    turn_id: str
    """The turn."""
    session_id: str
    """Its session."""
    outcome: Literal["cancelled", "cancelling", "already_finished"]
    """``cancelled`` (it was still queued), ``cancelling`` (it stops at its next step)
    or ``already_finished`` (nothing to do)."""
    status: TurnStatus | None = None
    """The turn's status after the request, when known."""


class FieldError(BaseModel):
    """One problem with one input field."""

    field: str
    """Where: ``body.message``, ``path.session_id``, ``query.after``…"""
    reason: str
    """What is wrong with it."""


class ErrorBody(BaseModel):
    """Every error the gateway answers."""

    code: str
    """Stable and machine-readable (see shared/errors.py)."""
    message: str
    """For a person."""
    field: str | None = None
    """The input field at fault, when one is."""
    errors: list[FieldError] = Field(default_factory=list)
    """Every field at fault, for invalid input."""
    turn_id: str | None = None
    """The refused turn, when a strategy rejected it (its final says ``rejected``)."""


class SessionMessage(ChatMessage):
    """One message of a session's conversation, where it sits and who wrote it."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    turn_id: str | None = None
    """The turn that wrote it (None for a message stored outside a turn)."""
    sequence: int | None = None
    """Its 1-based position in the branch's history."""

    @classmethod
    def of(cls, message: ChatMessage) -> SessionMessage:
        """``message`` with its ``turn_id`` and ``sequence`` shown."""
        return cls(**dict(message))


class Health(BaseModel):
    """The process answers."""

    status: Literal["ok"] = "ok"
    """Always ``ok``."""


class Readiness(BaseModel):
    """Whether the services the gateway needs answer."""

    status: Literal["ready", "unavailable"]
    """``ready`` when every check passed."""
    checks: dict[str, str]
    """Service -> ``ok`` or what went wrong."""


BRANCH_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
"""A branch's id."""


class SessionSummary(BaseModel):
    """A session as a listing shows it."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    session_id: str
    """The session."""
    agent: str
    """The agent its turns run on."""
    active_branch: str
    """The branch new turns run on."""
    created_at: float
    """Unix time the store created it."""
    updated_at: float
    """Unix time of its last write."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """What the application attached to it."""


class SessionList(BaseModel):
    """One page of sessions, newest first."""

    sessions: list[SessionSummary]
    """This page."""
    next_cursor: str | None = None
    """Pass it as ``cursor`` for the next page; null on the last one."""


class MetadataPatch(BaseModel):
    """A change to a session's metadata."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    metadata: dict[str, Any]
    """Keys to set; a key set to null is removed; keys not named stay as they are."""


class ForkRequest(BaseModel):
    """A branch to start."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    from_sequence: int = Field(ge=0, le=MAX_SEQUENCE)
    """Keep messages 1..from_sequence of the source branch (0: an empty branch)."""
    branch: str | None = Field(None, pattern=BRANCH_PATTERN)
    """The branch to fork (default: the active one)."""
    name: str | None = Field(None, pattern=BRANCH_PATTERN)
    """The new branch's id (default: generated)."""
    activate: bool = True
    """Make it the active branch, so the next turn runs on it."""


class SwitchRequest(BaseModel):
    """The branch to make active."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    branch: str = Field(pattern=BRANCH_PATTERN)
    """A branch of the session."""


class TruncateRequest(BaseModel):
    """Where to cut a branch."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    after: int = Field(ge=0, le=MAX_SEQUENCE)
    """Delete the branch's own messages after this sequence."""
    branch: str | None = Field(None, pattern=BRANCH_PATTERN)
    """The branch (default: the active one)."""


class Truncated(BaseModel):
    """A branch after a cut."""

    session_id: str
    """The session."""
    branch_id: str
    """The branch cut."""
    length: int
    """Messages in its history now."""
