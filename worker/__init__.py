"""reactq's worker side: agent definitions and the ReAct kernel.

This package is light on purpose (no Celery import, its names loaded on first
use): agents are defined and run in-process with it; ``reactq.worker.tasks`` adds
the pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reactq.shared.lazy import LazyExports

if TYPE_CHECKING:
    from reactq.worker.agent import (
        AgentLoop,
        AgentRunner,
        LLMClient,
        LLMEndpoint,
        LLMResponse,
        LoopConfig,
        Model,
        OpenAICompatibleClient,
        RateLimit,
        Registry,
        RunResult,
        ScriptedLLM,
        Tool,
        ToolContext,
        ToolMode,
        tool,
    )
    from reactq.worker.definitions import Agent, load_agents

__all__ = [  # noqa: RUF022 - grouped by purpose, as the style guide asks
    # defining agents
    "Agent",
    "LoopConfig",
    "ToolMode",
    "load_agents",
    # tools
    "Registry",
    "Tool",
    "ToolContext",
    "tool",
    # running
    "AgentLoop",
    "AgentRunner",
    "RunResult",
    # models
    "LLMClient",
    "LLMEndpoint",
    "LLMResponse",
    "Model",
    "RateLimit",
    "OpenAICompatibleClient",
    "ScriptedLLM",
]

_EXPORTS = LazyExports(
    __name__,
    {
        "reactq.worker.agent": """
            AgentLoop AgentRunner LLMClient LLMEndpoint LLMResponse LoopConfig Model
            OpenAICompatibleClient RateLimit Registry RunResult ScriptedLLM Tool ToolContext
            ToolMode tool""",
        "reactq.worker.definitions": "Agent load_agents",
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.getattr(name)


def __dir__() -> list[str]:
    return _EXPORTS.dir()
