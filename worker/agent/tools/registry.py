"""Registry: the set of tools one agent offers, by name."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from reactq.shared.catalogue import ToolCategory, categories_of
from reactq.worker.agent.tools.base import PromptSection, Tool, tool

__all__ = ["Registry"]


class Registry:
    """Tools by name; duplicate names are refused.

    ``categories`` (None: all) is the agent's mode: a tool of another category is
    kept aside, never shown to the model, and a call to it is refused
    (``hidden_category`` says why).
    """

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        *,
        categories: Iterable[ToolCategory | str] | None = None,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self._hidden: dict[str, Tool] = {}
        self.categories: frozenset[ToolCategory] | None = categories_of(categories)
        """The categories the model sees (None: every one)."""
        for t in tools:
            self.register(t)

    def register(self, t: Tool | Callable[..., Any]) -> Tool:
        """Add a tool (a plain function is wrapped with ``@tool``); return it."""
        item = t if isinstance(t, Tool) else tool(t)
        if item.name in self._tools or item.name in self._hidden:
            raise ValueError(f"a tool named {item.name!r} is already registered")
        if self.categories is not None and item.category not in self.categories:
            self._hidden[item.name] = item
        else:
            self._tools[item.name] = item
        return item

    def get(self, name: str) -> Tool | None:
        """The tool called ``name`` (among those the model sees), or None."""
        return self._tools.get(name)

    def hidden_category(self, name: str) -> ToolCategory | None:
        """The category of a tool the agent's mode keeps from the model, or None."""
        found = self._hidden.get(name)
        return found.category if found is not None else None

    @property
    def names(self) -> list[str]:
        """Tool names in registration order."""
        return list(self._tools)

    def openai_tools(self) -> list[dict[str, Any]]:
        """Every tool in the Chat Completions ``tools`` format."""
        return [t.openai_schema() for t in self._tools.values()]

    def prompt_sections(self) -> list[PromptSection]:
        """The tools' system-prompt sections, each once (tools of a bundle share one)."""
        out: list[PromptSection] = []
        for t in self._tools.values():
            if t.prompt_section is not None and t.prompt_section not in out:
                out.append(t.prompt_section)
        return out

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __repr__(self) -> str:
        return f"Registry({self.names!r})"
