"""Chat messages as stored in the state store and sent to the model."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reactq.shared.content import ContentPart

Role = Literal["system", "user", "assistant", "tool"]

MAX_SEQUENCE = 2**31 - 1
"""The largest position a message can have in its branch: the SQL column is a 32-bit
INTEGER, so a fork point or a cut beyond it is refused before it reaches a database."""


class ToolCall(BaseModel):
    """One function call requested by the model."""

    model_config = ConfigDict(frozen=True)

    id: str
    """The provider's call id; the tool result refers to it."""
    name: str
    """The tool's name."""
    arguments: str = "{}"
    """The arguments as the JSON text the model produced (may be invalid JSON)."""


class ChatMessage(BaseModel):
    """One message of a conversation."""

    model_config = ConfigDict(frozen=True)

    role: Role
    """Who wrote it."""
    content: str | None = None
    """Its text; None for an assistant message that only calls tools."""
    parts: list[ContentPart] | None = None
    """A user message sent as content parts (text and images): sent to the model in
    their place of ``content``, which holds their text."""
    name: str | None = None
    """The tool name, for a tool result."""
    tool_calls: list[ToolCall] | None = None
    """The calls an assistant message makes."""
    tool_call_id: str | None = None
    """The call a tool result answers."""
    reasoning: str | None = None
    """An assistant message's reasoning text, as the provider sent it (``reasoning_content``
    or ``reasoning``); replayed as ``reasoning_content`` with its tool calls."""
    extra: dict[str, Any] | None = None
    """Fields of the provider's message reactq does not know, kept as sent (never replayed)."""
    turn_id: str | None = Field(default=None, exclude=True)
    """The turn that produced it (stored, never sent to the model)."""
    sequence: int | None = Field(default=None, exclude=True)
    """Its 1-based position in its branch's history, as read from a store (never sent)."""
    summary_of: int | None = Field(default=None, exclude=True)
    """Set on a compaction summary: it stands for messages 1..summary_of of its branch,
    and the model reads the branch from the latest summary on (stored, never sent)."""

    def to_openai(self, *, reasoning: bool = True) -> dict[str, Any]:
        """The message in the Chat Completions wire format.

        The reasoning of an assistant message that calls tools goes back with it as
        ``reasoning_content`` (providers that think with tools need it to go on; without
        tool calls none asks for it), unless ``reasoning`` is False.
        """
        content: Any = self.content
        if self.parts:
            content = [part.model_dump(exclude_none=True) for part in self.parts]
        out: dict[str, Any] = {"role": self.role, "content": content}
        if self.name is not None and self.role == "tool":
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
            if reasoning and self.reasoning:
                out["reasoning_content"] = self.reasoning
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out
