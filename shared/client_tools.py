"""Client tools: tools a turn's caller declares and runs itself.

A front end (an AG-UI app, an OpenAI client with function tools) can give a turn
tools of its own. The model sees them beside the agent's tools; a call to one parks
the turn exactly as a call waiting for approval does (no worker held), and the
caller's result, given with ``Producer.complete_tool`` (or its front door's own way),
resumes it on any worker with that result as the call's observation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reactq.shared.errors import InvalidTurnError

__all__ = ["CLIENT_TOOL_NAME", "MAX_CLIENT_TOOLS", "ClientTool", "check_client_tools"]

CLIENT_TOOL_NAME = r"^[A-Za-z0-9_-]{1,64}$"
"""A client tool's name: what OpenAI-compatible providers take as a function name."""
MAX_CLIENT_TOOLS = 64
"""How many client tools one turn may declare."""


class ClientTool(BaseModel):
    """A tool the turn's caller runs: its name, what it does, and its arguments'
    JSON Schema, as the model is told."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=CLIENT_TOOL_NAME)
    """The function name the model calls."""
    description: str = Field(default="", max_length=4096)
    """What the tool does, for the model."""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """The arguments' JSON Schema (an object schema)."""

    def openai(self) -> dict[str, Any]:
        """The tool as a Chat Completions ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def check_client_tools(
    tools: Sequence[ClientTool | Mapping[str, Any]] | None,
) -> list[ClientTool]:
    """``tools`` as ClientTools; InvalidTurnError (``field`` ``client_tools``) for one that
    is not a tool (``name``, ``description``, ``parameters``), a name twice, or too many."""
    if not tools:
        return []
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise InvalidTurnError("client_tools must be a list of tools", field="client_tools")
    if len(tools) > MAX_CLIENT_TOOLS:
        raise InvalidTurnError(
            f"{len(tools)} client tools, over the limit of {MAX_CLIENT_TOOLS}",
            field="client_tools",
        )
    found: list[ClientTool] = []
    for index, tool in enumerate(tools):
        try:
            found.append(tool if isinstance(tool, ClientTool) else ClientTool.model_validate(tool))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidTurnError(
                f"client_tools[{index}]: {where or 'the tool'}: {first['msg']}",
                field=f"client_tools.{index}",
            ) from None
    names = [t.name for t in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidTurnError(f"client tools named twice: {twice}", field="client_tools")
    return found
