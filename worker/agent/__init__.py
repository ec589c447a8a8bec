"""The ReAct kernel: loop, runner, LLM clients and tools. Imports no Celery.

Its names load on first use: importing the package (or one of its modules) does not
import the ``openai`` SDK or the state store until something needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reactq.shared.lazy import LazyExports

if TYPE_CHECKING:
    from reactq.worker.agent.cancel import CancelHandle
    from reactq.worker.agent.config import LoopConfig
    from reactq.worker.agent.context_policy import ContextPolicy
    from reactq.worker.agent.interventions import (
        BeforeToolFallback,
        DenyToolCall,
        Hooks,
        Interventions,
        ReplaceToolArgs,
        ToolCallInfo,
        ToolDecision,
        ToolGate,
    )
    from reactq.worker.agent.llm import (
        LLMClient,
        LLMResponse,
        OpenAICompatibleClient,
        ScriptedLLM,
    )
    from reactq.worker.agent.llm.base import RequestOptions
    from reactq.worker.agent.llm.endpoint import ClientFactory, LLMEndpoint, Model, RateLimit
    from reactq.worker.agent.llm.retry import RetryPolicy
    from reactq.worker.agent.loop import AgentLoop, RunResult, ToolMode
    from reactq.worker.agent.parsers import JsonParser, ParsedStep, Parser, ProseParser
    from reactq.worker.agent.runner import AgentRunner
    from reactq.worker.agent.tools import Registry, Tool, ToolArgumentsError, ToolContext, tool
    from reactq.worker.agent.usage import ModelPrice

__all__ = [  # noqa: RUF022 - grouped by purpose, as the style guide asks
    # running agents
    "AgentLoop",
    "AgentRunner",
    "CancelHandle",
    "LoopConfig",
    "ContextPolicy",
    "RunResult",
    "ToolMode",
    # text tool modes
    "JsonParser",
    "ParsedStep",
    "Parser",
    "ProseParser",
    # tools
    "Registry",
    "Tool",
    "ToolArgumentsError",
    "ToolContext",
    "tool",
    # interventions, approvals, hooks
    "BeforeToolFallback",
    "DenyToolCall",
    "Hooks",
    "Interventions",
    "ReplaceToolArgs",
    "ToolCallInfo",
    "ToolDecision",
    "ToolGate",
    # models, usage
    "ClientFactory",
    "LLMClient",
    "LLMEndpoint",
    "LLMResponse",
    "Model",
    "RateLimit",
    "ModelPrice",
    "OpenAICompatibleClient",
    "RequestOptions",
    "RetryPolicy",
    "ScriptedLLM",
]

_EXPORTS = LazyExports(
    __name__,
    {
        "reactq.worker.agent.cancel": "CancelHandle",
        "reactq.worker.agent.config": "LoopConfig",
        "reactq.worker.agent.context_policy": "ContextPolicy",
        "reactq.worker.agent.interventions": """
            BeforeToolFallback DenyToolCall Hooks Interventions ReplaceToolArgs ToolCallInfo
            ToolDecision ToolGate""",
        "reactq.worker.agent.llm": "LLMClient LLMResponse OpenAICompatibleClient ScriptedLLM",
        "reactq.worker.agent.llm.base": "RequestOptions",
        "reactq.worker.agent.llm.endpoint": "ClientFactory LLMEndpoint Model RateLimit",
        "reactq.worker.agent.llm.retry": "RetryPolicy",
        "reactq.worker.agent.loop": "AgentLoop RunResult ToolMode",
        "reactq.worker.agent.parsers": "JsonParser ParsedStep Parser ProseParser",
        "reactq.worker.agent.runner": "AgentRunner",
        "reactq.worker.agent.tools": "Registry Tool ToolArgumentsError ToolContext tool",
        "reactq.worker.agent.usage": "ModelPrice",
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.getattr(name)


def __dir__() -> list[str]:
    return _EXPORTS.dir()
