"""Tools: typed functions the model can call, and the registry that holds them."""

from reactq.worker.agent.tools.base import (
    PromptSection,
    Tool,
    ToolArgumentsError,
    ToolCategory,
    ToolContext,
    tool,
)
from reactq.worker.agent.tools.registry import Registry

__all__ = [  # noqa: RUF022 - grouped by purpose, as the style guide asks
    # defining tools
    "Tool",
    "ToolCategory",
    "ToolContext",
    "PromptSection",
    "tool",
    # errors
    "ToolArgumentsError",
    # collections
    "Registry",
]
