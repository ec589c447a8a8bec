"""Chat messages as stored in the state store and sent to the model."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant", "tool"]


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
    name: str | None = None
    """The tool name, for a tool result."""
    tool_calls: list[ToolCall] | None = None
    """The calls an assistant message makes."""
    tool_call_id: str | None = None
    """The call a tool result answers."""
    turn_id: str | None = Field(default=None, exclude=True)
    """The turn that produced it (stored, never sent to the model)."""
    sequence: int | None = Field(default=None, exclude=True)
    """Its 1-based position in its branch's history, as read from a store (never sent)."""

    def to_openai(self) -> dict[str, Any]:
        """The message in the Chat Completions wire format."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
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
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out
