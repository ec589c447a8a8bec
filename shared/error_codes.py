"""The error registry: every code reactq reports, whether it is worth a retry, and what
it means, in one line.

The codes come from four places: exceptions (``ReactqError.code``, drawn in
``reactq.shared.errors``), the ``tool_failed`` events a failed tool call publishes
(the model reads ``[code] error``), the turn endings the worker publishes itself
(``reactq.shared.protocol.endings.Failure``), and the gateway's HTTP error bodies.
``ReactqError.retryable`` and the model client's ``RetryPolicy`` read ``retryable``
here; ``reactq errors`` prints the registry and docs/errors.md is generated from it
(``make docs``). tests/test_error_tree.py fails when an exception's code is missing.

``retryable`` means the same request may succeed if made again later, unchanged: a
dropped connection, a rate limit, a busy session. A refusal that would come back
the same (bad input, a refused key, a context that does not fit) is not.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ERROR_CODES", "KINDS", "ErrorCode", "error_code", "is_retryable"]


@dataclass(frozen=True, slots=True)
class ErrorCode:
    """One registered code."""

    code: str
    """The stable code, as on errors, events and HTTP bodies."""
    kind: str
    """Where it shows up: one of ``KINDS``."""
    retryable: bool
    """True when the same request may succeed if made again later."""
    meaning: str
    """What it means, in one line."""


KINDS = {
    "request": "a caller's request refused (Producer, CLI, gateway)",
    "service": "the infrastructure reactq runs on",
    "protocol": "the session protocol, between workers",
    "model": "the model endpoint (`error` events, a turn's `final`)",
    "run": "why a run stopped early (`error` events, a turn's `final`)",
    "tool": "a failed tool call (`tool_failed` events; the model reads `[code] error`)",
    "turn": "a turn the worker ended itself (`error` events)",
    "gateway": "the HTTP gateway's error bodies",
}
"""Each kind of code, and where codes of that kind show up."""


def _codes(kind: str, *rows: tuple[str, bool, str]) -> list[ErrorCode]:
    return [ErrorCode(code, kind, retryable, meaning) for code, retryable, meaning in rows]


ERROR_CODES: tuple[ErrorCode, ...] = (
    *_codes(
        "request",
        ("reactq_error", False, "An error of reactq with no more specific code."),
        ("config_error", False, "A setting or an agent definition is invalid."),
        ("schema_version", False, "A payload has a schema version this reactq cannot read."),
        ("invalid_turn", False, "Caller input was refused; nothing was enqueued or read."),
        ("invalid_session_id", False, "The session id is empty, too long or has bad characters."),
        ("invalid_stream_id", False, "A stream id (after=, Last-Event-ID) Redis would refuse."),
        ("empty_message", False, "The user message is empty or only whitespace."),
        ("message_too_large", False, "The user message is over REACTQ_MAX_MESSAGE_BYTES."),
        ("invalid_message", False, "The user message holds text UTF-8 cannot carry."),
        ("image_too_large", False, "An image of the user message is over REACTQ_MAX_IMAGE_BYTES."),
        ("invalid_image", False, "A content part is neither text nor a usable image."),
        ("invalid_metadata", False, "The turn's metadata is not a JSON object UTF-8 can carry."),
        ("invalid_context", False, "The turn's context is not a JSON object UTF-8 can carry."),
        ("invalid_text", False, "Caller input holds text UTF-8 cannot carry (a lone surrogate)."),
        ("context_too_large", False, "The turn's context is over REACTQ_MAX_CONTEXT_BYTES."),
        ("override_not_allowed", False, "The agent does not let a turn override that field."),
        ("invalid_override", False, "An override's value is not one its field can take."),
        ("unknown_agent", False, "No worker hosts the named agent."),
        ("agent_mismatch", False, "The session belongs to another agent."),
        ("webhook_refused", False, "The webhook URL is not http(s) or not a public address."),
        ("invalid_schedule", False, "A schedule's cron expression or interval is refused."),
        (
            "schedule_too_frequent",
            False,
            "A schedule would fire more often than REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS.",
        ),
        (
            "too_many_schedules",
            False,
            "The tenant has REACTQ_MAX_SCHEDULES_PER_TENANT schedules: remove one first.",
        ),
        ("turn_rejected", True, "The reject strategy refused the turn: the session was busy."),
        ("session_not_found", False, "The state store has no such session."),
        ("schedule_not_found", False, "No scheduled turn has that id."),
        ("session_busy", True, "A turn of the session runs: deleting it needs force (cancels it)."),
        ("undo_error", False, "A turn's file changes could not be undone; nothing was reverted."),
        ("undo_conflict", False, "A file the turn changed has changed since: nothing undone."),
        ("already_undone", False, "The turn's file changes were undone already."),
        ("nothing_to_undo", False, "The turn changed no file (or no such turn)."),
        ("invalid_cursor", False, "The cursor is not one a listing handed out."),
        ("invalid_document", False, "A store document's key, value or search is malformed."),
        ("invalid_namespace", False, "A store namespace is not 1-8 segments of [A-Za-z0-9_:@+-]."),
        ("branch_error", False, "A branch operation was refused (bad id, fork point, duplicate)."),
        ("branch_not_found", False, "The session has no branch of that id."),
        ("approval_error", False, "A decision on a waiting tool call was refused."),
        ("approval_not_found", False, "No such turn, or it waits for no call of that id."),
        ("approval_closed", False, "The turn waits for no decision (finished, running, queued)."),
        ("decision_conflict", False, "The call was decided already (by another, or a timeout)."),
        (
            "invalid_edit",
            False,
            "A decision's edited arguments are not an object the tool's schema accepts.",
        ),
        ("gateway_error", False, "The gateway refused a request the client could not classify."),
    ),
    *_codes(
        "service",
        ("service_unavailable", True, "Redis, the broker or the state database cannot be used."),
        (
            "store_unavailable",
            True,
            "The state database did not answer for REACTQ_STORE_OUTAGE_SECONDS; the turn is "
            "given back to its queue.",
        ),
        ("mcp_error", True, "An MCP server could not be started, reached or understood."),
        ("skill_error", False, "A skill directory or its SKILL.md is invalid, or a file refused."),
    ),
    *_codes(
        "protocol",
        ("stale_lease", False, "A fenced write came from a worker whose lease is not newest."),
        ("turn_committed", False, "The turn was committed already; the second commit wrote none."),
        ("lease_lost", False, "A worker lost a session's lease mid-turn; the new holder owns it."),
        ("evicted", True, "A stopping worker gave the turn back for another worker to run."),
    ),
    *_codes(
        "model",
        ("llm_error", False, "The model endpoint failed in a way with no more specific code."),
        ("llm_connection", True, "The endpoint could not be reached, or the connection dropped."),
        ("llm_stream_cut", True, "A streamed answer stopped before its end."),
        ("llm_rate_limited", True, "The endpoint answered 429: too many requests or tokens."),
        ("llm_server_error", True, "The endpoint answered 5xx."),
        ("llm_bad_request", False, "The endpoint refused the request (a 4xx other than 429)."),
        ("llm_auth", False, "The endpoint refused the API key (401) or its access (403)."),
        ("llm_images_unsupported", False, "The model refused the message's images: text only."),
        ("context_length_exceeded", False, "The conversation no longer fits the model's window."),
        ("llm_bad_response", False, "The endpoint answered something that is not a completion."),
        ("llm_undecodable", False, "The endpoint answered a body that is not JSON."),
        ("llm_error_envelope", False, "The endpoint answered 200 with an error envelope."),
        ("llm_no_choices", False, "The endpoint answered a completion with no choices."),
    ),
    *_codes(
        "run",
        ("agent_run_error", False, "A run stopped before a final answer for a reason of its own."),
        ("parser_error", False, "JSON/PROSE mode: the answer could not be parsed, twice."),
        ("empty_response", False, "NATIVE mode: the model answered nothing, twice."),
        ("tool_required", False, "The model kept answering without the tool it must call first."),
        ("budget_exceeded", False, "The turn spent its token or cost budget."),
        ("session_budget_exceeded", False, "The session is over its token or cost budget."),
        ("invalid_output", False, "The final answer did not match the output schema, twice."),
        ("guardrail_blocked", False, "A guardrail refused the turn's input or its answer."),
    ),
    *_codes(
        "tool",
        ("tool_error", False, "The tool raised; the model reads the error."),
        (
            "tool_storage_error",
            False,
            "The tool failed on a storage error; the model reads no more (the worker logs it).",
        ),
        ("tool_timeout", True, "The tool ran past its timeout and was cancelled."),
        (
            "tool_denied",
            False,
            "A person, the approval gate, an intervention or the agent's tool categories "
            "refused the call.",
        ),
        ("unknown_tool", False, "The model called a tool the agent does not have."),
        ("invalid_arguments", False, "The arguments are not JSON, not an object, or not valid."),
        ("truncated_arguments", True, "The arguments were cut off by the output token limit."),
        ("workspace_error", False, "A file tool refused a path or a change."),
        ("stale_file", False, "A write to a file changed since the turn read it: re-read it."),
        ("patch_error", False, "apply_patch changed nothing: the patch does not apply."),
        ("download_error", False, "download_file refused the URL or the download failed."),
        ("memory_error", False, "A memory tool had no namespace for the turn, or was refused."),
        ("sandbox_error", False, "run_code / run_file could not start the code."),
        ("image_error", False, "image_info / analyze_image refused the file or its answer."),
        (
            "delegation_refused",
            False,
            "delegate refused the task: not a subagent, too deep, a cycle, or a batch too big.",
        ),
        ("subagent_failed", False, "A child turn ended failed, cancelled or over its budget."),
    ),
    *_codes(
        "turn",
        ("worker_error", True, "The infrastructure around the run failed (the store, the bus)."),
        ("max_attempts", False, "The turn was lost with its worker max_attempts times."),
        ("interrupted", False, "A newer turn interrupted this one; its steps so far were kept."),
    ),
    *_codes(
        "gateway",
        ("gateway_http_error", False, "An error the gateway answers over HTTP (server side)."),
        ("unauthorized", False, "The request has no valid API key."),
        ("read_only", False, "The API key is read-only: it may not write."),
        ("invalid_json", False, "The request body is not JSON."),
        ("invalid_request", False, "A field of the request is missing or invalid."),
        ("turn_not_found", False, "No such turn."),
        ("document_not_found", False, "No such document in the long-term store."),
        ("turn_finished", False, "The turn has finished already: there is nothing to cancel."),
        ("not_found", False, "No such route."),
        ("method_not_allowed", False, "The route does not take this method."),
        ("not_implemented", False, "The gateway does not support this request."),
        ("unavailable", True, "Redis does not answer."),
        ("request_timeout", True, "The request head did not arrive in time."),
        ("http_error", False, "Another HTTP error of the gateway's framework."),
        ("internal_error", False, "The gateway failed; its log says why."),
    ),
)
"""Every code, grouped by kind."""

_BY_CODE = {entry.code: entry for entry in ERROR_CODES}


def error_code(code: str) -> ErrorCode:
    """The registry's entry for ``code``; KeyError names an unregistered one."""
    try:
        return _BY_CODE[code]
    except KeyError:
        raise KeyError(f"{code!r} is not a registered error code") from None


def is_retryable(code: str) -> bool:
    """True when ``code`` is registered as worth a retry."""
    entry = _BY_CODE.get(code)
    return entry is not None and entry.retryable
