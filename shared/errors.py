"""The reactq error hierarchy. Every error carries a stable ``code``.

::

    ReactqError                      code
    ├── ConfigError                  config_error
    ├── SchemaVersionError           schema_version
    ├── InvalidTurnError             invalid_turn      (caller input; nothing enqueued)
    │   ├── InvalidSessionIdError    invalid_session_id
    │   ├── EmptyMessageError        empty_message
    │   ├── MessageTooLargeError     message_too_large
    │   ├── UnknownAgentError        unknown_agent
    │   └── AgentMismatchError       agent_mismatch
    ├── TurnRejectedError            turn_rejected     (a strategy refused the turn)
    ├── StaleLeaseError              stale_lease       (a fenced write from an old lease holder)
    ├── LeaseLostError               lease_lost        (the lease could not be renewed; the
    │                                                   turn must not commit)
    ├── EvictedError                 evicted           (a stopping worker gave the turn back)
    ├── SessionNotFoundError         session_not_found (a write to a session the store lacks)
    ├── BranchError                  branch_error      (also a ValueError: bad branch id, a fork
    │   │                                               point out of range, a duplicate branch)
    │   └── BranchNotFoundError      branch_not_found  (the session has no such branch)
    ├── LLMError                     llm_error
    │   ├── LLMConnectionError       llm_connection
    │   ├── LLMRateLimitError        llm_rate_limited
    │   ├── LLMServerError           llm_server_error
    │   ├── LLMBadRequestError       llm_bad_request
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
    │   └── BudgetExceededError      budget_exceeded   (max_total_tokens / max_cost)
    └── ToolError                    tool_error        (a tool signal the model reads; never
        │                                               escapes the loop)
        └── ToolDeniedError          tool_denied       (an intervention or the gate said no)

Subclasses defined beside the code that raises them::

    AgentConfigError     config_error        a ConfigError and a ValueError
                                             (reactq.worker.definitions)
    ToolArgumentsError   invalid_arguments   a ToolError (reactq.worker.agent.tools)
    GatewayRequestError  gateway_error       the gateway client: a refusal it could not
                                             map to a class here (reactq.producer.gateway_client)
    GatewayError         gateway_http_error  the gateway's own HTTP answers, server side
                                             (reactq.producer.gateway_errors)

tests/test_error_tree.py checks that every exception the package defines is in
this tree (a few internal control-flow signals excepted, each with its reason).

Errors cross process boundaries (a Celery worker re-creates exceptions from their
args), so every constructor takes the message first and only optional keywords,
and ``__reduce__`` keeps the keywords. No I/O or logging in ``__init__``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ReactqError(Exception):
    """Root of every reactq error; ``code`` is stable and machine-readable."""

    code: ClassVar[str] = "reactq_error"

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.details))

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


class InvalidTurnError(ReactqError):
    """A turn was refused before anything was enqueued."""

    code = "invalid_turn"


class InvalidSessionIdError(InvalidTurnError):
    """The session id is empty, too long, or has characters outside [A-Za-z0-9._:-]."""

    code = "invalid_session_id"


class EmptyMessageError(InvalidTurnError):
    """The user message is empty or only whitespace."""

    code = "empty_message"


class MessageTooLargeError(InvalidTurnError):
    """The user message is over the size limit (REACTQ_MAX_MESSAGE_BYTES)."""

    code = "message_too_large"


class UnknownAgentError(InvalidTurnError):
    """No worker has registered the named agent."""

    code = "unknown_agent"


class AgentMismatchError(InvalidTurnError):
    """The session belongs to another agent (a session keeps its first turn's agent)."""

    code = "agent_mismatch"


class TurnRejectedError(ReactqError):
    """The multitask strategy refused the turn (the session was busy)."""

    code = "turn_rejected"


class StaleLeaseError(ReactqError):
    """A write carried a fencing token older than the session's newest one."""

    code = "stale_lease"


class SessionNotFoundError(ReactqError):
    """The state store has no such session (``ensure_session`` creates one)."""

    code = "session_not_found"


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


class BudgetExceededError(AgentRunError):
    """The run used more tokens or money than its budget allows."""

    code = "budget_exceeded"


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


class EvictedError(ReactqError):
    """A worker shutting down stopped a running turn and gave it back, uncharged,
    for another worker to run."""

    code = "evicted"
