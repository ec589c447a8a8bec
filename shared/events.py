"""The typed event union: the wire contract between workers and subscribers.

Every step of a turn is one event on the session's stream. Each event carries
``id`` (the stream id the bus gave it; None before publishing), ``type``,
``session_id``, ``turn_id``, ``attempt`` (1 for the first run of a turn, n+1 when
a turn is re-run after a lost worker), ``seq`` (the position within one attempt;
the producer's ``queued`` is 0) and ``ts`` (Unix time).

An event type is declared once, by its class below: its fields (the wire format), its
docstring (when it is published) and its traits as class variables: whether a child
turn's copy goes to its parents (``forwarded_to_parents``), whether it ends the turn
(``ends_turn``), and how the CLI and the gateway's page show it (``cli``, ``page``: a
``View``). ``EVENT_CLASSES`` collects the classes and ``Event`` is built from them;
docs/events.md and the page's table (producer/static/events.js) are generated from
them by ``make docs`` (``shared/events_doc.py``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from reactq.shared.errors import SchemaVersionError
from reactq.shared.turns import TurnStatus

EVENT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class View:
    """How a renderer shows one type of event.

    Two kinds every renderer knows: ``generic`` (the default: the type and its fields,
    so a type nobody wrote a drawing for is still seen) and ``hidden`` (no line); and
    ``text``: ``tag``, then ``template`` with each ``{field}`` replaced by the event's.
    Any other kind names a drawing of the renderer's own (``producer/render.py`` for the
    CLI, ``producer/static/app.js`` for the page; a test checks each kind is drawn).
    """

    kind: str = "generic"
    """What draws it."""
    tag: str = ""
    """The line's label."""
    template: str = ""
    """For ``text``: the line after its tag, with ``{field}`` placeholders."""


GENERIC = View()
"""The type and its fields as they are."""
HIDDEN = View("hidden")
"""Not shown."""


class BaseEvent(BaseModel):
    """Fields every event has."""

    model_config = ConfigDict(frozen=True)

    forwarded_to_parents: ClassVar[bool] = True
    """A child turn's event of this type is copied, as a short ``subagent`` event, to
    the session of every turn above it (``worker/delegations.py``)."""
    ends_turn: ClassVar[bool] = False
    """Each turn ends with exactly one event of this type."""
    cli: ClassVar[View] = GENERIC
    """How the CLI (``reactq send``, ``watch``, ``audit``) shows it."""
    page: ClassVar[View] = GENERIC
    """How the gateway's page shows it."""

    v: int = EVENT_SCHEMA_VERSION
    """Schema version of the payload."""
    id: str | None = None
    """The stream id the bus assigned (use it with ``after=`` to resume)."""
    session_id: str
    """The session the event belongs to."""
    turn_id: str
    """The turn the event belongs to."""
    attempt: int = 1
    """Which run of the turn produced it."""
    seq: int = 0
    """Position within the attempt."""
    ts: float = Field(default_factory=time.time)
    """Unix time the event was made."""

    @classmethod
    def event_type(cls) -> str:
        """The ``type`` this class's events carry."""
        return str(cls.model_fields["type"].default)


class QueuedEvent(BaseEvent):
    """The producer accepted the turn and put it on the session's queue."""

    type: Literal["queued"] = "queued"
    cli: ClassVar[View] = View("queued", "queued")
    page: ClassVar[View] = View("queued", "you")
    agent: str
    """The agent that will run it."""
    message: str
    """The user's message."""
    images: list[str] = Field(default_factory=list)
    """The message's images: each one's URL, or for one sent inline its type and size
    (``image/png, 12 KB``); the bytes are never published."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """What the producer attached to the turn (its context is never published)."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """The loop knobs this turn overrides, among those its agent allows."""


class StartedEvent(BaseEvent):
    """A worker took the turn and began (or began again) to run it."""

    type: Literal["started"] = "started"
    cli: ClassVar[View] = View("started", "started")
    page: ClassVar[View] = View("started", "started")
    worker: str = ""
    """Which worker runs it (host and pid)."""
    resumed_from_step: int | None = None
    """This attempt resumes the turn's checkpoint: how many steps it had completed
    (their tools do not run again); None: the turn runs from its start."""
    config_version: str | None = None
    """A hash of the definition of the agent that runs it (``Agent.config_version``)."""


class ThoughtEvent(BaseEvent):
    """Text the model produced alongside tool calls."""

    type: Literal["thought"] = "thought"
    cli: ClassVar[View] = View("text", "thought", "{text}")
    page: ClassVar[View] = View("text", "thought", "{text}")
    text: str
    """The model's words."""


class DeltaEvent(BaseEvent):
    """A coalesced piece of model output while it streams."""

    type: Literal["delta"] = "delta"
    # Token streams and usage are not progress: a parent is not told of them.
    forwarded_to_parents: ClassVar[bool] = False
    cli: ClassVar[View] = HIDDEN
    page: ClassVar[View] = HIDDEN
    text: str
    """The new text since the previous delta."""


class ReasoningEvent(BaseEvent):
    """Reasoning text the model produced before its answer (``reasoning_content`` /
    ``reasoning``): coalesced pieces while it streams, else the whole of it."""

    type: Literal["reasoning"] = "reasoning"
    forwarded_to_parents: ClassVar[bool] = False
    cli: ClassVar[View] = HIDDEN
    page: ClassVar[View] = HIDDEN
    text: str
    """The new reasoning text since the previous one."""


class ModelFallbackEvent(BaseEvent):
    """The model failed, and the turn goes on with the next of the agent's
    ``fallback_models`` (for the rest of the turn)."""

    type: Literal["model_fallback"] = "model_fallback"
    cli: ClassVar[View] = HIDDEN
    page: ClassVar[View] = HIDDEN
    from_model: str
    """The model that failed."""
    to_model: str
    """The model the turn goes on with."""
    code: str
    """Why: the error code of the failure (``reactq errors``)."""
    message: str = ""
    """The failure, as the client reported it."""


class RateLimitedEvent(BaseEvent):
    """The turn waits for the pool's shared rate limit before its next model call
    (once per wait, however often the worker looks again)."""

    type: Literal["rate_limited"] = "rate_limited"
    cli: ClassVar[View] = HIDDEN
    page: ClassVar[View] = HIDDEN
    model: str
    """The model whose budget is spent."""
    wait: float
    """Seconds the budget said to wait (it may grant earlier or later as others draw)."""
    limit: str = "requests"
    """Which budget: ``requests`` or ``tokens`` per minute, or ``provider`` (its own
    ``x-ratelimit-*`` headers said nothing is left)."""


class ActionEvent(BaseEvent):
    """The model called a tool."""

    type: Literal["action"] = "action"
    cli: ClassVar[View] = View("call", "action")
    page: ClassVar[View] = View("call", "tool call")
    tool: str
    """The tool's name."""
    args: Any = None
    """The decoded arguments (the raw text when they were not valid JSON)."""
    call_id: str = ""
    """The provider's call id."""


class ToolProgressEvent(BaseEvent):
    """A running tool said how far it got (``ToolContext.progress``, a sandboxed run's
    output, an MCP server's progress notifications): at most a few per second per call,
    the latest kept when they come faster. Published as it happens, while the step's
    other results wait for its checkpoint, so its ``seq`` may come after theirs."""

    type: Literal["tool_progress"] = "tool_progress"
    cli: ClassVar[View] = View("progress", "progress")
    page: ClassVar[View] = View("progress", "progress")
    tool: str
    """The tool's name."""
    call_id: str = ""
    """The call it reports on."""
    message: str = ""
    """What the tool says (a sandboxed run: its latest output line)."""
    fraction: float | None = None
    """How much is done, 0 to 1, when the tool knows."""
    data: dict[str, Any] | None = None
    """Anything else the tool reports (a sandboxed run: ``{"output": the new output}``)."""


class ObservationEvent(BaseEvent):
    """A tool returned; its result goes back to the model."""

    type: Literal["observation"] = "observation"
    cli: ClassVar[View] = View("text", "result", "{tool} -> {output}")
    page: ClassVar[View] = View("result", "result")
    tool: str
    """The tool's name."""
    call_id: str = ""
    """The call it answers."""
    output: str
    """The result as the model reads it."""


class ToolFailedEvent(BaseEvent):
    """A tool call failed; the error goes back to the model and the run goes on."""

    type: Literal["tool_failed"] = "tool_failed"
    cli: ClassVar[View] = View("text", "tool error", "{tool}: {error}")
    page: ClassVar[View] = View("text", "tool error", "{tool}: {error}")
    tool: str
    """The tool's name (as the model spelled it)."""
    call_id: str = ""
    """The call it answers."""
    error: str
    """What the model reads."""
    code: str = "tool_error"
    """Why: tool_error, tool_timeout, tool_denied, unknown_tool, ... (docs/errors.md)."""


class FileChangeEvent(BaseEvent):
    """A file tool changed a file of the session's workspace (or undo put one back)."""

    type: Literal["file_change"] = "file_change"
    cli: ClassVar[View] = View("file", "file")
    page: ClassVar[View] = View("file", "file")
    path: str
    """The file, relative to the workspace (a move's new path)."""
    kind: Literal["created", "modified", "deleted", "moved"]
    """What happened to it."""
    size: int = 0
    """Its size in bytes afterwards (0 when deleted)."""
    from_path: str | None = None
    """A move's old path."""
    diff: str = ""
    """A short unified diff of a text file (cut, and empty for a binary file)."""


class TodosEvent(BaseEvent):
    """The session's todo list changed (``reactq.bundles.todos``): the whole list after
    the change."""

    type: Literal["todos"] = "todos"
    cli: ClassVar[View] = View("todos", "todos")
    page: ClassVar[View] = View("todos", "todos")
    items: list[dict[str, Any]] = Field(default_factory=list)
    """Every item, in order: ``{"id", "text", "status"}`` (pending, in_progress, done)."""


class UsageEvent(BaseEvent):
    """Token usage of one model call."""

    type: Literal["usage"] = "usage"
    forwarded_to_parents: ClassVar[bool] = False
    cli: ClassVar[View] = View("gauge", "context")
    page: ClassVar[View] = View("gauge", "context")
    model: str | None = None
    """The model that was called (a turn may move to a fallback model)."""
    prompt_tokens: int = 0
    """Tokens sent."""
    completion_tokens: int = 0
    """Tokens generated."""
    total_tokens: int = 0
    """Their sum."""
    cost: float | None = None
    """What the call cost, when the loop has a price table for the model."""
    finish_reason: str | None = None
    """Why the model stopped (stop, tool_calls, length, ...)."""
    truncated: bool = False
    """True when the generation was cut off by the token cap (finish_reason ``length``)."""
    context_tokens: int | None = None
    """Tokens of the request in the model's window (the provider's count, else the estimate)."""
    context_window: int | None = None
    """The model's context window in tokens (``Agent(context_window=...)`` or the table's)."""
    context_percent: float | None = None
    """``context_tokens`` as a percentage of ``context_window`` (one decimal)."""


class CompactedEvent(BaseEvent):
    """The oldest part of the conversation was summarised before a model call; the
    summary is committed with the turn, and the model reads from it on."""

    type: Literal["compacted"] = "compacted"
    cli: ClassVar[View] = HIDDEN
    page: ClassVar[View] = HIDDEN
    summarised_messages: int
    """How many messages the summary stands for (an earlier summary counts as one)."""
    up_to_sequence: int
    """The last message of the branch it stands for (messages 1..up_to_sequence)."""
    tokens_before: int
    """The request's estimated tokens before the compaction."""
    tokens_after: int
    """Its estimated tokens with the summary instead."""
    model: str
    """The model that wrote the summary."""


class TurnsLeftOutEvent(BaseEvent):
    """No summary could be written (the summary call failed), so the oldest whole turns
    were left out of this turn's requests: they stay in the history, and a later turn
    summarises them once the summary call works again."""

    type: Literal["turns_left_out"] = "turns_left_out"
    cli: ClassVar[View] = View("left_out", "context")
    page: ClassVar[View] = View("left_out", "context")
    turn_ids: list[str] = Field(default_factory=list)
    """The turns left out, oldest first (each with its message, steps and answer)."""
    messages: int
    """How many messages they hold (an earlier summary is never left out)."""
    from_sequence: int
    """The first message of the branch left out."""
    up_to_sequence: int
    """The last one (messages from_sequence..up_to_sequence)."""
    tokens_before: int
    """The request's estimated tokens with them."""
    tokens_after: int
    """Its estimated tokens without them (under the policy's ``compact_at`` when it can)."""
    reason: str
    """Why no summary stands for them: the summary call's error code."""
    model: str
    """The model the summary was asked of."""


class GuardrailEvent(BaseEvent):
    """One guardrail's verdict on the turn's input or its final answer."""

    type: Literal["guardrail"] = "guardrail"
    cli: ClassVar[View] = HIDDEN
    page: ClassVar[View] = HIDDEN
    name: str
    """The guardrail's name."""
    stage: Literal["input", "output"]
    """What it judged: the user message or the final answer."""
    allowed: bool
    """False: the guardrail blocked it (the turn ends with status ``blocked``)."""
    reason: str | None = None
    """Why, as the guardrail said (or what failed)."""
    duration: float = 0.0
    """Seconds the guardrail took."""
    failed: Literal["error", "timeout"] | None = None
    """Set when the guardrail raised or ran out of time: ``allowed`` is then its
    fail-open (True) or fail-closed (False) setting."""
    original: str | None = None
    """The blocked answer, on the audit log's copy only: never on the stream."""


class ErrorEvent(BaseEvent):
    """Something went wrong; a ``final`` follows."""

    type: Literal["error"] = "error"
    cli: ClassVar[View] = View("text", "error", "{code}: {message}")
    page: ClassVar[View] = View("text", "error", "{code}: {message}")
    code: str
    """The stable error code (see shared/errors.py)."""
    message: str
    """A human-readable explanation."""
    context: dict[str, Any] = Field(default_factory=dict)
    """Details that help tell what happened."""


class ApprovalRequestedEvent(BaseEvent):
    """The turn waits for a person: tool calls that need approval. No worker holds
    the turn while it waits; it resumes once every call has a decision."""

    type: Literal["approval_requested"] = "approval_requested"
    cli: ClassVar[View] = View("approval", "approval?")
    page: ClassVar[View] = View("approval", "needs you")
    calls: list[dict[str, Any]]
    """Every waiting call: ``{"call_id", "tool", "arguments"}``."""
    expires_at: float | None = None
    """Unix time at which an undecided call counts as denied ("no decision in time")."""


class ApprovalDecidedEvent(BaseEvent):
    """A decision on one waiting call: who made it, and what it was."""

    type: Literal["approval_decided"] = "approval_decided"
    cli: ClassVar[View] = View("decision", "decided")
    page: ClassVar[View] = View("decision")
    call_id: str
    """The call decided."""
    approved: bool
    """True: the call runs; False: the model reads a denial carrying ``reason``."""
    reason: str | None = None
    """The note of an approval, or why it was denied."""
    by: str = ""
    """Who decided (the deciding client's name; ``reactq:timeout`` for an expiry)."""
    arguments: dict[str, Any] | None = None
    """The arguments the approved call runs with, when the decider changed the model's
    (None: the model's own)."""


class SubagentEvent(BaseEvent):
    """An event of a child turn, forwarded to its parent's session (``turn_id`` is the
    parent's): a subscriber of the parent sees the whole tree live. The child's own
    session keeps its full stream."""

    type: Literal["subagent"] = "subagent"
    # It reached every session above from the turn that published it.
    forwarded_to_parents: ClassVar[bool] = False
    cli: ClassVar[View] = View("tree")
    page: ClassVar[View] = View("tree")
    child_session_id: str
    """The child's session (subscribe to it for every event in full)."""
    child_turn_id: str
    """The child turn."""
    agent: str
    """The child's agent."""
    event: str
    """The child event's type (``started``, ``action``, ``final``, ...)."""
    text: str | None = None
    """What it says, cut to a few hundred characters (a tool's name, an answer, ...)."""
    status: str | None = None
    """The child's status, on its ``final``."""
    depth: int = 1
    """How deep the child is under the session's own turn (1: a direct child)."""


class FinalEvent(BaseEvent):
    """The turn ended; exactly one per turn."""

    type: Literal["final"] = "final"
    ends_turn: ClassVar[bool] = True
    cli: ClassVar[View] = View("answer", "final")
    page: ClassVar[View] = View("answer", "answer")
    text: str
    """The answer the user sees (a fallback message when the run failed)."""
    status: TurnStatus
    """How it ended."""
    usage: dict[str, int] = Field(default_factory=dict)
    """Cumulative token usage of the turn."""
    cost: float | None = None
    """Cumulative cost of the turn, when a price table is configured."""
    code: str | None = None
    """Why a run ended in error or over budget (an error code: ``reactq errors``)."""
    config_version: str | None = None
    """A hash of the definition of the agent that answered (None: no worker ran it)."""
    output: dict[str, Any] | None = None
    """The validated structured answer (a JSON object) of an agent with an ``output_type``;
    ``text`` then holds it as JSON. None otherwise, and for a turn that did not complete."""
    subagents: list[dict[str, Any]] | None = None
    """One entry per child turn the turn delegated to (``Agent(subagents=...)``): its
    ``agent``, ``session_id``, ``turn_id``, ``status``, ``usage`` and ``cost``, which
    ``usage`` and ``cost`` above include. None when it delegated nothing."""


def _declared(base: type[BaseEvent]) -> list[type[BaseEvent]]:
    """Every class under ``base`` with a ``type`` of its own, in the order declared."""
    found = []
    for cls in base.__subclasses__():
        if "type" in cls.model_fields:
            found.append(cls)
        found += _declared(cls)
    return found


EVENT_CLASSES: tuple[type[BaseEvent], ...] = tuple(_declared(BaseEvent))
"""Every event class, in the order declared: the registry the union, the docs and the
renderers read."""
EVENT_TYPES: dict[str, type[BaseEvent]] = {cls.event_type(): cls for cls in EVENT_CLASSES}
"""Each event class by its ``type``."""
if len(EVENT_TYPES) != len(EVENT_CLASSES):
    raise TypeError("two event classes declare the same type")

if TYPE_CHECKING:
    # A type checker cannot read a union built at run time; this spelling of it lets
    # ``event.type`` narrow an ``Event``, and tests/test_events.py fails when it misses
    # a class of EVENT_CLASSES.
    _AnyEvent = (
        QueuedEvent
        | StartedEvent
        | ThoughtEvent
        | DeltaEvent
        | ReasoningEvent
        | ModelFallbackEvent
        | RateLimitedEvent
        | ActionEvent
        | ToolProgressEvent
        | ObservationEvent
        | ToolFailedEvent
        | FileChangeEvent
        | TodosEvent
        | UsageEvent
        | CompactedEvent
        | TurnsLeftOutEvent
        | GuardrailEvent
        | ErrorEvent
        | ApprovalRequestedEvent
        | ApprovalDecidedEvent
        | SubagentEvent
        | FinalEvent
    )
else:
    _AnyEvent = Union[EVENT_CLASSES]  # noqa: UP007

Event = Annotated[_AnyEvent, Field(discriminator="type")]
"""Any event; ``type`` tells which."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(raw: str | bytes | dict[str, Any], event_id: str | None = None) -> Event:
    """Parse one event from JSON (or a dict), refusing an unknown schema version."""
    data = json.loads(raw) if isinstance(raw, str | bytes) else dict(raw)
    if data.get("v", EVENT_SCHEMA_VERSION) != EVENT_SCHEMA_VERSION:
        raise SchemaVersionError(
            f"event has schema version {data.get('v')!r}; "
            f"this reactq reads version {EVENT_SCHEMA_VERSION}"
        )
    if event_id is not None:
        data["id"] = event_id
    return EVENT_ADAPTER.validate_python(data)
