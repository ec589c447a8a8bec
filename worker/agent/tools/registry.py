"""Registry: the set of tools one agent offers, by name."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from reactq.worker.agent.tools.base import Tool, tool

__all__ = ["Registry"]


class Registry:
    """Tools by name; duplicate names are refused."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, t: Tool | Callable[..., Any]) -> Tool:
        """Add a tool (a plain function is wrapped with ``@tool``); return it."""
        item = t if isinstance(t, Tool) else tool(t)
        if item.name in self._tools:
            raise ValueError(f"a tool named {item.name!r} is already registered")
        self._tools[item.name] = item
        return item

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        """Tool names in registration order."""
        return list(self._tools)

    def openai_tools(self) -> list[dict[str, Any]]:
        """Every tool in the Chat Completions ``tools`` format."""
        return [t.openai_schema() for t in self._tools.values()]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __repr__(self) -> str:
        return f"Registry({self.names!r})"
