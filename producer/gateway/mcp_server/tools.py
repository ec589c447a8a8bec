"""The hosted agents as MCP tools: which ones a key sees, each one's schemas, and a call's
arguments checked.

A tool is named after its agent; its description is the agent's (``Agent(description=
...)``), its input is ``message`` (required), ``session_id`` (to continue a session) and
``context`` (the turn's context, for the agent's tools), and an agent with an
``output_type`` declares that schema as the tool's ``outputSchema``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp_types import Tool, ToolAnnotations

from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
from reactq.shared.catalogue import AgentInfo, AgentTools
from reactq.shared.errors import InvalidTurnError, UnknownAgentError
from reactq.shared.turns import SESSION_ID_RE

__all__ = [
    "INPUT_SCHEMA",
    "CallArguments",
    "ToolInputError",
    "arguments_of",
    "tool_of",
    "visible_agents",
]

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {
            "type": "string",
            "minLength": 1,
            "description": "What to ask the agent: the turn's user message.",
        },
        "session_id": {
            "type": "string",
            "pattern": SESSION_ID_RE.pattern,
            "description": "Continue this session (a previous call's session_id); "
            "omit it to start a new one.",
        },
        "context": {
            "type": "object",
            "description": "Data for the agent's tools (the turn's context); never shown "
            "to the model.",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}
"""Every tool's ``inputSchema``."""


class ToolInputError(InvalidTurnError, ValueError):
    """A call's arguments do not fit ``INPUT_SCHEMA`` (answered as a tool error): caller
    input refused before a turn is enqueued."""


@dataclass(frozen=True)
class CallArguments:
    """A call's arguments, checked."""

    message: str
    """The turn's message."""
    session_id: str | None
    """The session to continue (None: a new one)."""
    context: dict[str, Any] | None
    """The turn's context."""


def arguments_of(raw: dict[str, Any] | None) -> CallArguments:
    """``raw`` (a call's ``arguments``) checked against ``INPUT_SCHEMA``;
    ToolInputError says what is wrong."""
    args = raw or {}
    unknown = sorted(set(args) - set(INPUT_SCHEMA["properties"]))
    if unknown:
        raise ToolInputError(
            f"unknown argument {unknown[0][:60]!r}: the tool takes message, session_id, context"
        )
    message = args.get("message")
    if not isinstance(message, str) or not message.strip():
        raise ToolInputError("'message' is required: a non-empty string")
    session_id = args.get("session_id")
    if session_id is not None and (
        not isinstance(session_id, str) or not SESSION_ID_RE.fullmatch(session_id)
    ):
        raise ToolInputError(
            "'session_id' must be 1-128 of [A-Za-z0-9._:-] (not '.' or '..'): "
            "a previous call's session_id"
        )
    context = args.get("context")
    if context is not None and not isinstance(context, dict):
        raise ToolInputError("'context' must be a JSON object")
    return CallArguments(message, session_id, context)


def tool_of(catalogue: AgentTools) -> Tool:
    """The MCP tool of an agent's catalogue."""
    description = catalogue.description or f"Ask the reactq agent {catalogue.agent!r}."
    return Tool(
        name=catalogue.agent,
        description=description,
        input_schema=INPUT_SCHEMA,
        output_schema=catalogue.output_schema,
        # A turn changes the session it runs in, and a model's answer is not repeatable.
        annotations=ToolAnnotations(
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=True,
        ),
    )


def _newest(agents: list[AgentInfo]) -> dict[str, AgentInfo]:
    """One entry per live agent name: its most recently announced definition."""
    found: dict[str, AgentInfo] = {}
    for info in agents:
        if not info.live:
            continue
        kept = found.get(info.name)
        if kept is None or (info.last_seen or 0) > (kept.last_seen or 0):
            found[info.name] = info
    return found


async def visible_agents(gateway: Gateway, scope: KeyScope | None) -> list[AgentTools]:
    """The catalogues of the live agents ``scope`` may run, by name (its tools)."""
    names = sorted(
        name
        for name in _newest(await gateway.producer.agents())
        if scope is None or scope.may_run(name)
    )
    found = []
    for name in names:
        try:
            found.append(await gateway.producer.agent_tools(name))
        except UnknownAgentError:
            continue  # announced without a catalogue (an old worker): not callable here
    return found
