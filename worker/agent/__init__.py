"""The ReAct kernel: loop, runner, LLM clients and tools. Imports no Celery."""

from worker.agent.llm import (
    LLMClient,
    LLMResponse,
    OpenAICompatibleClient,
    ScriptedLLM,
)
from worker.agent.loop import AgentLoop, RunResult, ToolMode
from worker.agent.runner import AgentRunner
from worker.agent.tools import Registry, Tool, ToolArgumentsError, ToolContext, tool

__all__ = [  # noqa: RUF022 - grouped by purpose, as the style guide asks
    # running agents
    "AgentLoop",
    "AgentRunner",
    "RunResult",
    "ToolMode",
    # tools
    "Registry",
    "Tool",
    "ToolArgumentsError",
    "ToolContext",
    "tool",
    # models
    "LLMClient",
    "LLMResponse",
    "OpenAICompatibleClient",
    "ScriptedLLM",
]
