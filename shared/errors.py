"""The reactq error hierarchy. Every error carries a stable ``code``.

::

    ReactqError                      code
    ├── ConfigError                  config_error
    ├── SchemaVersionError           schema_version
    ├── ServiceUnavailableError      service_unavailable (Redis, the broker or the state
    │                                                   database cannot be reached, refuses
    │                                                   the credentials, or lacks the database)
    │   └── StoreUnavailableError    store_unavailable (the state database did not answer
    │                                                   for REACTQ_STORE_OUTAGE_SECONDS)
    ├── InvalidTurnError             invalid_turn      (caller input; nothing enqueued or read)
    │   ├── InvalidSessionIdError    invalid_session_id
    │   ├── InvalidStreamIdError     invalid_stream_id (also a ValueError: a subscriber's
    │   │                                               ``after`` Redis would refuse)
    │   ├── EmptyMessageError        empty_message
    │   ├── MessageTooLargeError     message_too_large
    │   │   └── ImageTooLargeError   image_too_large   (over REACTQ_MAX_IMAGE_BYTES)
    │   ├── InvalidMessageError      invalid_message   (text UTF-8 cannot carry)
    │   │   └── InvalidImageError    invalid_image     (a content part that is not text
    │   │                                               or a usable image)
    │   ├── InvalidMetadataError     invalid_metadata  (not a JSON object UTF-8 can carry)
    │   ├── InvalidContextError      invalid_context   (the turn's context: not a JSON object)
    │   │   └── ContextTooLargeError context_too_large (over REACTQ_MAX_CONTEXT_BYTES)
    │   ├── InvalidTextError         invalid_text      (other input holding text UTF-8
    │   │                                               cannot carry: a session's metadata,
    │   │                                               a document, a schedule)
    │   ├── OverrideNotAllowedError  override_not_allowed (the agent does not let a turn
    │   │                                               change that field)
    │   ├── InvalidOverrideError     invalid_override  (an allowed field, a value it cannot take)
    │   ├── UnknownAgentError        unknown_agent
    │   ├── AgentMismatchError       agent_mismatch
    │   ├── WebhookRefusedError      webhook_refused   (not http(s), or not a public address)
    │   └── InvalidScheduleError     invalid_schedule  (a cron expression or interval that
    │       │                                           cannot be parsed or never fires)
    │       └── ScheduleTooFrequentError schedule_too_frequent (ticks closer than
    │                                                   REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS)
    ├── TurnRejectedError            turn_rejected     (a strategy refused the turn)
    ├── StaleLeaseError              stale_lease       (a fenced write from an old lease holder)
    ├── TurnCommittedError           turn_committed    (a second commit of a turn: refused, the
    │                                                   turn's messages are stored once)
    ├── LeaseLostError               lease_lost        (the lease could not be renewed; the
    │                                                   turn must not commit)
    ├── EvictedError                 evicted           (a stopping worker gave the turn back)
    ├── SessionNotFoundError         session_not_found (a write to a session the store lacks)
    ├── SessionBusyError             session_busy      (a delete refused: a turn runs; force it)
    ├── ScheduleNotFoundError        schedule_not_found (no such scheduled turn)
    ├── TooManySchedulesError        too_many_schedules (the tenant is at
    │                                                   REACTQ_MAX_SCHEDULES_PER_TENANT)
    ├── InvalidCursorError           invalid_cursor    (also a ValueError: not a listing's cursor)
    ├── InvalidDocumentError         invalid_document  (also a ValueError: a long-term store
    │   │                                               document's key, value or search)
    │   └── InvalidNamespaceError    invalid_namespace (not a tuple of well-formed segments)
    ├── ReadOnlyError                read_only         (a write for a read-only key's turn)
    ├── ApprovalError                approval_error    (a decision on a waiting tool call refused)
    │   ├── ApprovalNotFoundError    approval_not_found (no such turn, or no such waiting call)
    │   ├── ApprovalClosedError      approval_closed   (the turn waits for nothing: finished,
    │   │                                               running or queued)
    │   ├── DecisionConflictError    decision_conflict (the call has a decision already; two
    │   │                                               racing deciders: exactly one wins)
    │   └── InvalidEditError         invalid_edit      (edited arguments the tool's schema
    │                                                   refuses)
    ├── BranchError                  branch_error      (also a ValueError: bad branch id, a fork
    │   │                                               point out of range, a duplicate branch)
    │   └── BranchNotFoundError      branch_not_found  (the session has no such branch)
    ├── LLMError                     llm_error
    │   ├── LLMConnectionError       llm_connection
    │   ├── LLMRateLimitError        llm_rate_limited
    │   ├── LLMServerError           llm_server_error
    │   ├── LLMBadRequestError       llm_bad_request
    │   │   ├── LLMAuthError         llm_auth          (401/403: the key is refused)
    │   │   └── LLMImagesUnsupportedError llm_images_unsupported (a text-only model)
    │   ├── ContextLengthExceededError context_length_exceeded
    │   ├── LLMResponseError         llm_bad_response  (garbage, error envelope, no choices)
    │   │   ├── LLMUndecodableError  llm_undecodable   (a body that is not JSON)
    │   │   ├── LLMErrorEnvelopeError llm_error_envelope (a 200 carrying {"error": ...})
    │   │   └── LLMNoChoicesError    llm_no_choices    (a 200 with no choices)
    │   └── LLMStreamCutError        llm_stream_cut    (the stream ended before it finished)
    ├── MCPError                     mcp_error         (an MCP server could not be reached or
    │                                                   spoke nonsense; a tool error mid-run)
    ├── SkillError                   skill_error       (a skill that is malformed or refused)
    ├── AgentRunError                agent_run_error   (why a run stopped early)
    │   ├── ParserError              parser_error      (JSON/PROSE output unparseable twice)
    │   ├── EmptyResponseError       empty_response    (NATIVE: nothing, twice)
    │   ├── ToolRequiredError        tool_required     (require_tool_before_final: the
    │   │                                               model kept answering without a tool)
    │   ├── InvalidOutputError       invalid_output    (output_type: the final answer did not
    │   │                                               match the schema, twice)
    │   └── BudgetExceededError      budget_exceeded   (max_total_tokens / max_cost)
    │       └── SessionBudgetExceededError session_budget_exceeded (the session's totals are
    │                                               over session_max_cost / _tokens)
    └── ToolError                    tool_error        (a tool signal the model reads; never
        │                                               escapes the loop)
        └── ToolDeniedError          tool_denied       (an intervention or the gate said no)

Subclasses defined beside the code that raises them::

    AgentConfigError     config_error        a ConfigError and a ValueError
                                             (reactq.worker.definitions)
    ToolArgumentsError   invalid_arguments   a ToolError (reactq.worker.agent.tools)
    GuardrailBlockedError guardrail_blocked  an AgentRunError: a guardrail refused the
                                             input or the answer (reactq.worker.agent.guardrails)
    WorkspaceError       workspace_error     a ToolError: a file tool refused a path or a change
                                             (reactq.shared.workspace)
    StaleFileError       stale_file          a WorkspaceError: a write to a file that changed
                                             since the turn read it (reactq.bundles.journal)
    PatchError           patch_error         a WorkspaceError: apply_patch changed nothing
                                             (reactq.bundles.patch)
    DownloadError        download_error      a ToolError: download_file refused or failed
                                             (reactq.bundles.download)
    DelegationRefusedError delegation_refused a ToolError: delegate refused the task
                                             (reactq.worker.agent.delegation)
    SubagentFailedError  subagent_failed     a ToolError: a child turn failed, was cancelled or
                                             over its budget (reactq.worker.agent.delegation)
    UndoError            undo_error          a turn's file changes could not be undone
                                             (reactq.shared.file_undo)
    UndoConflictError    undo_conflict       an UndoError: a file changed after the turn
    AlreadyUndoneError   already_undone      an UndoError: undone once already
    NothingToUndoError   nothing_to_undo     an UndoError: the turn changed no file
    GatewayRequestError  gateway_error       the gateway client: a refusal it could not
                                             map to a class here (reactq.producer.gateway.client)
    GatewayError         gateway_http_error  the gateway's own HTTP answers, server side
                                             (reactq.producer.gateway.errors)

tests/test_error_tree.py checks that every exception the package defines is in
this tree (a few internal control-flow signals excepted, each with its reason),
and that its code is in the registry (``reactq.shared.error_codes``), which says
of every code whether it is worth a retry and what it means: ``error.retryable``
reads it, ``reactq errors`` prints it, docs/errors.md is generated from it.

Errors cross process boundaries (a Celery worker re-creates exceptions from their
args), so every constructor takes the message first and only optional keywords,
and ``__reduce__`` keeps the keywords. No I/O or logging in ``__init__``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from reactq.shared.error_codes import is_retryable


class ReactqError(Exception):
    """Root of every reactq error; ``code`` is stable and machine-readable."""

    code: ClassVar[str] = "reactq_error"

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.details))

    @property
    def retryable(self) -> bool:
        """True when the same request may succeed if made again later (the registry's
        word for this error's code; an unregistered code is not)."""
        return is_retryable(self.code)

    def to_dict(self) -> dict[str, Any]:
        """The error as JSON-able data: code, message and details."""
        return {"code": self.code, "message": self.message, **self.details}


def _rebuild(cls: type[ReactqError], message: str, details: dict[str, Any]) -> ReactqError:
    return cls(message, **details)


class ConfigError(ReactqError):
    """A setting or an agent definition is invalid."""

    code = "config_error"


class SchemaVersionError(ReactqError):
    """A payload or a stored record has a schema version this code does not know."""

    code = "schema_version"


class ServiceUnavailableError(ReactqError):
    """Redis, the broker or the state database could not be used: it does not answer,
    refuses the credentials, or lacks the database.

    The message names the service, its URL (password redacted) and the setting that
    points at it; ``details`` carry them as ``service``, ``url`` and ``setting``.
    """

    code = "service_unavailable"


class StoreUnavailableError(ServiceUnavailableError):
    """The state database did not answer (connection refused, reset, the server
    shutting down) for the whole of a worker's outage budget
    (``REACTQ_STORE_OUTAGE_SECONDS``): the turn goes back to its session's queue, it
    is not failed. ``details`` carry ``waited`` (seconds)."""

    code = "store_unavailable"


class InvalidTurnError(ReactqError):
    """Caller input was refused: a turn, before anything was enqueued, or an id to read
    with (a session's, a stream's)."""

    code = "invalid_turn"


class InvalidSessionIdError(InvalidTurnError):
    """The session id is empty, too long, has characters outside [A-Za-z0-9._:-], or is
    ``.`` or ``..`` (which a URL path cannot hold)."""

    code = "invalid_session_id"


class InvalidStreamIdError(InvalidTurnError, ValueError):
    """A stream id (a subscriber's ``after``, ``Last-Event-ID``) that Redis would refuse:
    not ``<ms>-<seq>`` or ``<ms>`` in ASCII digits, or a part over 2**64-1.

    Also a ValueError, as ``parse_stream_id`` raised before it had a class of its own.
    """

    code = "invalid_stream_id"


class EmptyMessageError(InvalidTurnError):
    """The user message is empty or only whitespace."""

    code = "empty_message"


class MessageTooLargeError(InvalidTurnError):
    """The user message is over the size limit (REACTQ_MAX_MESSAGE_BYTES)."""

    code = "message_too_large"


class InvalidMessageError(InvalidTurnError):
    """The user message is text UTF-8 cannot carry (it holds a lone surrogate)."""

    code = "invalid_message"


class ImageTooLargeError(MessageTooLargeError):
    """An image of the user message is over REACTQ_MAX_IMAGE_BYTES."""

    code = "image_too_large"


class InvalidImageError(InvalidMessageError):
    """A content part of the user message is neither text nor a usable image (not http(s)
    or a base64 data URL of an image type, or a file that cannot be read)."""

    code = "invalid_image"


class InvalidMetadataError(InvalidTurnError):
    """The turn's metadata is not a dict with string keys, or does not serialise to JSON
    (a lone surrogate, a value JSON has no form for, a reference cycle)."""

    code = "invalid_metadata"


class InvalidTextError(InvalidTurnError):
    """Caller input holds text UTF-8 cannot carry (a lone surrogate, which JSON may
    spell): a session's metadata, a long-term store document, a schedule's fields.
    ``details["field"]`` names where (``metadata.tags[2]``)."""

    code = "invalid_text"


class InvalidContextError(InvalidTurnError):
    """The turn's context is not a dict with string keys, or does not serialise to JSON."""

    code = "invalid_context"


class ContextTooLargeError(InvalidContextError):
    """The turn's context is over the size limit (REACTQ_MAX_CONTEXT_BYTES) as JSON."""

    code = "context_too_large"


class OverrideNotAllowedError(InvalidTurnError):
    """A turn asked to override a field its agent does not list in ``overridable``."""

    code = "override_not_allowed"


class InvalidOverrideError(InvalidTurnError):
    """A turn's override names an allowed field with a value that field cannot take."""

    code = "invalid_override"


class UnknownAgentError(InvalidTurnError):
    """No worker has registered the named agent."""

    code = "unknown_agent"


class AgentMismatchError(InvalidTurnError):
    """The session belongs to another agent (a session keeps its first turn's agent)."""

    code = "agent_mismatch"


class WebhookRefusedError(InvalidTurnError):
    """A turn's webhook URL is refused: not http(s), has credentials, does not resolve,
    or reaches an address that is not public (REACTQ_WEBHOOK_ALLOW_HOSTS lifts that)."""

    code = "webhook_refused"


class InvalidScheduleError(InvalidTurnError):
    """A scheduled turn's timing is refused: a cron expression that is not five valid
    fields or never fires, or an interval that is not a whole number of seconds >= 1."""

    code = "invalid_schedule"


class ScheduleTooFrequentError(InvalidScheduleError):
    """A schedule's ticks would come closer together than
    REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS (``every``, or the gap of a cron expression)."""

    code = "schedule_too_frequent"


class TurnRejectedError(ReactqError):
    """The multitask strategy refused the turn (the session was busy)."""

    code = "turn_rejected"


class StaleLeaseError(ReactqError):
    """A write carried a fencing token older than the session's newest one."""

    code = "stale_lease"


class TurnCommittedError(ReactqError):
    """A commit of a turn that already has a committed record: it wrote nothing, so
    a turn's messages are stored at most once (``turn_id`` names it)."""

    code = "turn_committed"


class SessionNotFoundError(ReactqError):
    """The state store has no such session (``ensure_session`` creates one)."""

    code = "session_not_found"


class ScheduleNotFoundError(ReactqError):
    """No scheduled turn has that id (``schedule_id`` names it)."""

    code = "schedule_not_found"


class TooManySchedulesError(ReactqError):
    """The tenant (a scoped key's session prefix, else the whole namespace) already has
    REACTQ_MAX_SCHEDULES_PER_TENANT schedules: one must go before another is added."""

    code = "too_many_schedules"


class SessionBusyError(ReactqError):
    """The session has a turn running (or waiting for a decision): deleting it is refused
    unless forced, which cancels the turn first."""

    code = "session_busy"


class InvalidCursorError(ReactqError, ValueError):
    """A listing's ``cursor`` that no listing handed out."""

    code = "invalid_cursor"


class InvalidDocumentError(ReactqError, ValueError):
    """A long-term store request refused: a malformed key, a value that is not a JSON
    object (or is too large), a malformed search."""

    code = "invalid_document"


class InvalidNamespaceError(InvalidDocumentError):
    """A long-term store namespace that is not 1-8 well-formed segments."""

    code = "invalid_namespace"


class ReadOnlyError(ReactqError):
    """A write on behalf of a read-only API key (``TenantIdentity.read_only``)."""

    code = "read_only"


class BranchError(ReactqError, ValueError):
    """A branch operation was refused: a bad or duplicate branch id, a fork point out of range."""

    code = "branch_error"


class BranchNotFoundError(BranchError):
    """The session has no branch of that id."""

    code = "branch_not_found"


class LLMError(ReactqError):
    """The model endpoint failed; subclasses classify how."""

    code = "llm_error"


class LLMConnectionError(LLMError):
    """The endpoint could not be reached or the connection dropped."""

    code = "llm_connection"


class LLMRateLimitError(LLMError):
    """The endpoint answered 429."""

    code = "llm_rate_limited"


class LLMServerError(LLMError):
    """The endpoint answered 5xx."""

    code = "llm_server_error"


class LLMBadRequestError(LLMError):
    """The endpoint refused the request (4xx other than 429)."""

    code = "llm_bad_request"


class LLMAuthError(LLMBadRequestError):
    """The endpoint refused the credentials (401) or the key's access (403)."""

    code = "llm_auth"


class LLMImagesUnsupportedError(LLMBadRequestError):
    """The model refused the image parts of a message: it reads text only (a 400
    naming images or the content type)."""

    code = "llm_images_unsupported"


class ContextLengthExceededError(LLMError):
    """The conversation no longer fits the model's context window."""

    code = "context_length_exceeded"


class LLMResponseError(LLMError):
    """The endpoint answered something that is not a usable completion."""

    code = "llm_bad_response"


class LLMUndecodableError(LLMResponseError):
    """The endpoint answered a body that is not JSON."""

    code = "llm_undecodable"


class LLMErrorEnvelopeError(LLMResponseError):
    """The endpoint answered 200 with an ``{"error": ...}`` envelope instead of a completion."""

    code = "llm_error_envelope"


class LLMNoChoicesError(LLMResponseError):
    """The endpoint answered 200 with a completion that has no choices."""

    code = "llm_no_choices"


class LLMStreamCutError(LLMConnectionError):
    """A streamed answer stopped before its end (the connection dropped mid-way)."""

    code = "llm_stream_cut"


class MCPError(ReactqError):
    """An MCP server could not be started, reached or understood (transport, handshake)."""

    code = "mcp_error"


class SkillError(ReactqError):
    """A skill directory or its SKILL.md is invalid, or a skill file was refused."""

    code = "skill_error"


class AgentRunError(ReactqError):
    """A run stopped before a final answer for a reason of its own (not the endpoint)."""

    code = "agent_run_error"


class ParserError(AgentRunError):
    """The model's JSON/PROSE output could not be parsed, even after a retry."""

    code = "parser_error"


class EmptyResponseError(AgentRunError):
    """NATIVE mode: the model answered nothing at all, even after a retry."""

    code = "empty_response"


class ToolRequiredError(AgentRunError):
    """``require_tool_before_final``: the model kept answering without calling a tool,
    even after the reminders."""

    code = "tool_required"


class InvalidOutputError(AgentRunError):
    """The agent has an ``output_type`` and the model's final answer did not match it,
    even after a retry that quoted the validation error (status ``invalid_output``).
    ``TurnHandle.output`` raises it too, for a turn that ended without an output."""

    code = "invalid_output"


class BudgetExceededError(AgentRunError):
    """The run used more tokens or money than its budget allows."""

    code = "budget_exceeded"


class SessionBudgetExceededError(BudgetExceededError):
    """The session's committed turns already spent ``session_max_cost`` or
    ``session_max_tokens``: a new turn is refused before any model call."""

    code = "session_budget_exceeded"


class ToolError(ReactqError):
    """Raised by a tool to report a failure the model should read."""

    code = "tool_error"


class ToolDeniedError(ToolError):
    """A before_tool intervention or the approval gate refused the call."""

    code = "tool_denied"


class LeaseLostError(ReactqError):
    """A worker lost a session's lease mid-turn (a newer holder exists, or it could
    not renew in time): it must not commit or end the turn, the new holder owns it."""

    code = "lease_lost"


class ApprovalError(ReactqError):
    """A decision on a tool call waiting for approval was refused."""

    code = "approval_error"


class ApprovalNotFoundError(ApprovalError):
    """No such turn, or the turn has no waiting call with that id."""

    code = "approval_not_found"


class ApprovalClosedError(ApprovalError):
    """The turn is not waiting for a decision (it finished, runs or is queued)."""

    code = "approval_closed"


class DecisionConflictError(ApprovalError):
    """The call was decided already (by another decider, or by the timeout)."""

    code = "decision_conflict"


class InvalidEditError(ApprovalError):
    """An approval's edited arguments are not a JSON object, or the tool's published
    JSON Schema refuses them; ``details`` name the ``call_id`` and, when the schema
    refused them, where (``path``)."""

    code = "invalid_edit"


class EvictedError(ReactqError):
    """A worker shutting down stopped a running turn and gave it back, uncharged,
    for another worker to run."""

    code = "evicted"
