"""The ReAct kernel: loop, runner, LLM clients and tools. Imports no Celery."""

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
