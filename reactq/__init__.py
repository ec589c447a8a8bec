"""reactq: ReAct agents as a horizontally scaled Celery worker pool.

Every public name is importable from here (``from reactq import Agent, tool,
Producer``); docs/api.md lists them by group and says which modules are
implementation detail. Each name is imported on first use, so importing
``reactq`` (or any module under it, which imports this package first) costs only
what that name or module needs: ``from reactq import Agent`` loads no Celery, no
SQLAlchemy and no openai SDK. The optional extras load on first use and fail with an
ImportError naming the extra: ``MCPClient`` and ``MCPProvider`` need
``reactq[mcp]``; ``GatewayClient``, ``GatewayRequestError`` and ``create_app``
need ``reactq[gateway]``. They are imported by name, not by ``from reactq import *``
(they are not in ``__all__``), so a star import works without any extra. Fakes for
your own tests live in ``reactq.testing``.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from reactq.shared.lazy import LazyExports

if TYPE_CHECKING:  # what ``__getattr__`` imports on first use, spelled out for type checkers
    from reactq.producer.client import Producer
    from reactq.producer.documents import Document, DocumentPage
    from reactq.producer.handles import TurnHandle
    from reactq.producer.sessions import SessionDeleted, SessionDetail
    from reactq.producer.sync import SyncProducer, SyncTurnHandle
    from reactq.producer.turn_lookup import TurnInfo
    from reactq.shared.catalogue import AgentInfo, AgentTools, ToolCategory, ToolInfo
    from reactq.shared.content import ContentPart, ImagePart, TextPart
    from reactq.shared.errors import (
        AgentMismatchError,
        AgentRunError,
        ApprovalClosedError,
        ApprovalError,
        ApprovalNotFoundError,
        BranchError,
        BranchNotFoundError,
        BudgetExceededError,
        ConfigError,
        ContextLengthExceededError,
        ContextTooLargeError,
        DecisionConflictError,
        EmptyMessageError,
        EmptyResponseError,
        ImageTooLargeError,
        InvalidContextError,
        InvalidCursorError,
        InvalidDocumentError,
        InvalidEditError,
        InvalidImageError,
        InvalidMessageError,
        InvalidMetadataError,
        InvalidNamespaceError,
        InvalidOutputError,
        InvalidOverrideError,
        InvalidScheduleError,
        InvalidSessionIdError,
        InvalidStreamIdError,
        InvalidTextError,
        InvalidTurnError,
        LLMAuthError,
        LLMBadRequestError,
        LLMConnectionError,
        LLMError,
        LLMErrorEnvelopeError,
        LLMImagesUnsupportedError,
        LLMNoChoicesError,
        LLMRateLimitError,
        LLMResponseError,
        LLMServerError,
        LLMStreamCutError,
        LLMUndecodableError,
        MCPError,
        MessageTooLargeError,
        OverrideNotAllowedError,
        ParserError,
        ReactqError,
        ReadOnlyError,
        ScheduleNotFoundError,
        ScheduleTooFrequentError,
        SchemaVersionError,
        ServiceUnavailableError,
        SessionBudgetExceededError,
        SessionBusyError,
        SessionNotFoundError,
        SkillError,
        StaleLeaseError,
        ToolDeniedError,
        ToolError,
        ToolRequiredError,
        TooManySchedulesError,
        TurnCommittedError,
        TurnRejectedError,
        UnknownAgentError,
        WebhookRefusedError,
    )
    from reactq.shared.events import (
        ActionEvent,
        ApprovalDecidedEvent,
        ApprovalRequestedEvent,
        BaseEvent,
        CompactedEvent,
        DeltaEvent,
        ErrorEvent,
        Event,
        FileChangeEvent,
        FinalEvent,
        GuardrailEvent,
        ModelFallbackEvent,
        ObservationEvent,
        QueuedEvent,
        RateLimitedEvent,
        ReasoningEvent,
        StartedEvent,
        SubagentEvent,
        ThoughtEvent,
        TodosEvent,
        ToolFailedEvent,
        ToolProgressEvent,
        TurnsLeftOutEvent,
        UsageEvent,
        parse_event,
    )
    from reactq.shared.file_undo import (
        AlreadyUndoneError,
        NothingToUndoError,
        UndoConflictError,
        UndoError,
        UndoReport,
    )
    from reactq.shared.messages import ChatMessage, ToolCall
    from reactq.shared.protocol.approvals import DecideOutcome, PendingApproval
    from reactq.shared.protocol.outcomes import CancelResult
    from reactq.shared.schedules import Schedule
    from reactq.shared.settings import Settings
    from reactq.shared.state.base import SessionUsage
    from reactq.shared.state.todo_store import TodoItem
    from reactq.shared.tenancy import TenantIdentity
    from reactq.shared.turns import MultitaskStrategy, TurnStatus
    from reactq.worker.agent import (
        AgentLoop,
        AgentRunner,
        BeforeToolFallback,
        CancelHandle,
        ClientFactory,
        ContextPolicy,
        DenyToolCall,
        Hooks,
        Interventions,
        LLMClient,
        LLMEndpoint,
        LLMResponse,
        LoopConfig,
        Model,
        ModelPrice,
        OpenAICompatibleClient,
        RateLimit,
        Registry,
        ReplaceToolArgs,
        RequestOptions,
        RetryPolicy,
        RunResult,
        Tool,
        ToolArgumentsError,
        ToolCallInfo,
        ToolContext,
        ToolDecision,
        ToolGate,
        ToolMode,
        tool,
    )
    from reactq.worker.agent.config import ApprovalPolicy
    from reactq.worker.agent.delegation import Subagent
    from reactq.worker.agent.guardrails import Guardrail, GuardrailBlockedError, GuardrailResult
    from reactq.worker.definitions import Agent, AgentConfigError, load_agents

    __version__: str

if TYPE_CHECKING:  # re-exported by name (``as``), outside ``__all__``: see the docstring
    from reactq.producer.gateway import create_app as create_app
    from reactq.producer.gateway.client import GatewayClient as GatewayClient
    from reactq.producer.gateway.client import GatewayRequestError as GatewayRequestError
    from reactq.worker.agent.mcp import MCPClient as MCPClient
    from reactq.worker.agent.mcp import MCPProvider as MCPProvider


__all__ = [  # noqa: RUF022 - grouped by purpose, as the style guide asks
    "__version__",
    # defining agents
    "Agent",
    "LoopConfig",
    "ContextPolicy",
    "ToolMode",
    "ApprovalPolicy",
    "Guardrail",
    "GuardrailResult",
    "Subagent",
    "load_agents",
    # tools
    "Registry",
    "Tool",
    "ToolCategory",
    "ToolContext",
    "tool",
    # the tool catalogue
    "AgentInfo",
    "AgentTools",
    "ToolInfo",
    # interventions, the approval gate, hooks
    "BeforeToolFallback",
    "DenyToolCall",
    "Interventions",
    "ReplaceToolArgs",
    "ToolCallInfo",
    "ToolDecision",
    "ToolGate",
    "Hooks",
    # MCP servers' tools (the mcp extra)
    # models and cost
    "LLMClient",
    "LLMResponse",
    "Model",
    "LLMEndpoint",
    "ClientFactory",
    "RateLimit",
    "ModelPrice",
    "OpenAICompatibleClient",
    "RequestOptions",
    "RetryPolicy",
    # running a turn in-process
    "AgentLoop",
    "AgentRunner",
    "CancelHandle",
    "RunResult",
    # producing turns, reading events
    "CancelResult",
    "UndoReport",
    "TodoItem",
    "DecideOutcome",
    "Document",
    "DocumentPage",
    "MultitaskStrategy",
    "PendingApproval",
    "Producer",
    "Schedule",
    "TenantIdentity",
    "SessionDeleted",
    "SessionDetail",
    "SessionUsage",
    "SyncProducer",
    "SyncTurnHandle",
    "TurnHandle",
    "TurnInfo",
    "TurnStatus",
    # over HTTP (the gateway extra)
    # configuration
    "Settings",
    # events and messages
    "Event",
    "BaseEvent",
    "QueuedEvent",
    "StartedEvent",
    "ThoughtEvent",
    "DeltaEvent",
    "ReasoningEvent",
    "ActionEvent",
    "ToolProgressEvent",
    "ObservationEvent",
    "ToolFailedEvent",
    "FileChangeEvent",
    "TodosEvent",
    "UsageEvent",
    "ModelFallbackEvent",
    "RateLimitedEvent",
    "CompactedEvent",
    "TurnsLeftOutEvent",
    "GuardrailEvent",
    "ErrorEvent",
    "ApprovalRequestedEvent",
    "ApprovalDecidedEvent",
    "SubagentEvent",
    "FinalEvent",
    "parse_event",
    "ChatMessage",
    "ToolCall",
    "TextPart",
    "ImagePart",
    "ContentPart",
    # errors (the tree is drawn in reactq.shared.errors)
    "ReactqError",
    "ConfigError",
    "AgentConfigError",
    "SchemaVersionError",
    "ServiceUnavailableError",
    "InvalidTurnError",
    "InvalidSessionIdError",
    "InvalidStreamIdError",
    "EmptyMessageError",
    "MessageTooLargeError",
    "InvalidMessageError",
    "ImageTooLargeError",
    "InvalidImageError",
    "InvalidMetadataError",
    "InvalidContextError",
    "InvalidTextError",
    "ContextTooLargeError",
    "OverrideNotAllowedError",
    "InvalidOverrideError",
    "UnknownAgentError",
    "AgentMismatchError",
    "WebhookRefusedError",
    "InvalidScheduleError",
    "ScheduleTooFrequentError",
    "TurnRejectedError",
    "StaleLeaseError",
    "TurnCommittedError",
    "SessionNotFoundError",
    "ScheduleNotFoundError",
    "TooManySchedulesError",
    "SessionBusyError",
    "InvalidCursorError",
    "InvalidDocumentError",
    "InvalidNamespaceError",
    "ReadOnlyError",
    "ApprovalError",
    "ApprovalNotFoundError",
    "ApprovalClosedError",
    "DecisionConflictError",
    "InvalidEditError",
    "BranchError",
    "BranchNotFoundError",
    "LLMError",
    "LLMConnectionError",
    "LLMRateLimitError",
    "LLMServerError",
    "LLMBadRequestError",
    "LLMAuthError",
    "LLMImagesUnsupportedError",
    "ContextLengthExceededError",
    "LLMResponseError",
    "LLMUndecodableError",
    "LLMErrorEnvelopeError",
    "LLMNoChoicesError",
    "LLMStreamCutError",
    "MCPError",
    "SkillError",
    "AgentRunError",
    "ParserError",
    "EmptyResponseError",
    "ToolRequiredError",
    "InvalidOutputError",
    "GuardrailBlockedError",
    "BudgetExceededError",
    "SessionBudgetExceededError",
    "UndoError",
    "UndoConflictError",
    "AlreadyUndoneError",
    "NothingToUndoError",
    # signals a tool raises for the model to read (they never reach a caller)
    "ToolError",
    "ToolDeniedError",
    "ToolArgumentsError",
]

# Where each public name lives: imported the first time it is looked up, so that
# ``import reactq.shared.events`` (which imports this package first) stays light.
_EXPORTS = LazyExports(
    __name__,
    {
        "reactq.producer.client": "Producer",
        "reactq.producer.documents": "Document DocumentPage",
        "reactq.producer.handles": "TurnHandle",
        "reactq.producer.sessions": "SessionDeleted SessionDetail",
        "reactq.producer.sync": "SyncProducer SyncTurnHandle",
        "reactq.producer.turn_lookup": "TurnInfo",
        "reactq.shared.catalogue": "AgentInfo AgentTools ToolCategory ToolInfo",
        "reactq.shared.content": "ContentPart ImagePart TextPart",
        "reactq.shared.errors": """
            AgentMismatchError AgentRunError ApprovalClosedError ApprovalError ApprovalNotFoundError
            BranchError BranchNotFoundError BudgetExceededError ConfigError
            ContextLengthExceededError ContextTooLargeError DecisionConflictError EmptyMessageError
            EmptyResponseError ImageTooLargeError InvalidContextError InvalidCursorError
            InvalidDocumentError InvalidEditError InvalidImageError InvalidMessageError
            InvalidMetadataError
            InvalidNamespaceError InvalidOutputError InvalidOverrideError InvalidScheduleError
            InvalidSessionIdError InvalidStreamIdError InvalidTextError InvalidTurnError
            LLMAuthError LLMBadRequestError LLMConnectionError LLMError LLMErrorEnvelopeError
            LLMImagesUnsupportedError LLMNoChoicesError LLMRateLimitError LLMResponseError
            LLMServerError LLMStreamCutError LLMUndecodableError MCPError MessageTooLargeError
            OverrideNotAllowedError ParserError ReactqError ReadOnlyError ScheduleNotFoundError
            ScheduleTooFrequentError SchemaVersionError ServiceUnavailableError
            SessionBudgetExceededError SessionBusyError SessionNotFoundError SkillError
            StaleLeaseError ToolDeniedError ToolError ToolRequiredError TooManySchedulesError
            TurnCommittedError TurnRejectedError UnknownAgentError WebhookRefusedError""",
        "reactq.shared.events": """
            ActionEvent ApprovalDecidedEvent ApprovalRequestedEvent BaseEvent CompactedEvent
            DeltaEvent ErrorEvent Event FileChangeEvent FinalEvent GuardrailEvent ModelFallbackEvent
            ObservationEvent QueuedEvent RateLimitedEvent ReasoningEvent StartedEvent SubagentEvent
            ThoughtEvent TodosEvent ToolFailedEvent ToolProgressEvent TurnsLeftOutEvent UsageEvent
            parse_event""",
        "reactq.shared.file_undo": """
            AlreadyUndoneError NothingToUndoError UndoConflictError UndoError UndoReport""",
        "reactq.shared.messages": "ChatMessage ToolCall",
        "reactq.shared.protocol.approvals": "DecideOutcome PendingApproval",
        "reactq.shared.protocol.outcomes": "CancelResult",
        "reactq.shared.schedules": "Schedule",
        "reactq.shared.settings": "Settings",
        "reactq.shared.state.base": "SessionUsage",
        "reactq.shared.state.todo_store": "TodoItem",
        "reactq.shared.tenancy": "TenantIdentity",
        "reactq.shared.turns": "MultitaskStrategy TurnStatus",
        "reactq.worker.agent": """
            AgentLoop AgentRunner BeforeToolFallback CancelHandle ClientFactory ContextPolicy
            DenyToolCall Hooks Interventions LLMClient LLMEndpoint LLMResponse LoopConfig Model
            ModelPrice OpenAICompatibleClient RateLimit Registry ReplaceToolArgs RequestOptions
            RetryPolicy RunResult Tool ToolArgumentsError ToolCallInfo ToolContext ToolDecision
            ToolGate ToolMode tool""",
        "reactq.worker.agent.config": "ApprovalPolicy",
        "reactq.worker.agent.delegation": "Subagent",
        "reactq.worker.agent.guardrails": "Guardrail GuardrailBlockedError GuardrailResult",
        "reactq.worker.definitions": "Agent AgentConfigError load_agents",
    },
)

# Names of the optional extras: name -> (module, extra, a module the extra installs).
_EXTRAS: dict[str, tuple[str, str, str]] = {
    "MCPClient": ("reactq.worker.agent.mcp", "mcp", "mcp"),
    "MCPProvider": ("reactq.worker.agent.mcp", "mcp", "mcp"),
    "GatewayClient": ("reactq.producer.gateway.client", "gateway", "httpx2"),
    "GatewayRequestError": ("reactq.producer.gateway.client", "gateway", "httpx2"),
    "create_app": ("reactq.producer.gateway", "gateway", "fastapi"),
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _version()
    elif name in _EXTRAS:
        value = _extra(name)
    else:
        return _EXPORTS.getattr(name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(_EXPORTS.dir()) | set(__all__) | set(_EXTRAS))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reactq")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def _extra(name: str) -> Any:
    """``name`` from its optional extra; an ImportError naming the extra when it is missing."""
    module, extra, needs = _EXTRAS[name]
    if importlib.util.find_spec(needs) is None:
        raise ImportError(
            f"reactq.{name} needs the {extra!r} extra: pip install 'reactq[{extra}]'",
            name=needs,
        )
    return getattr(importlib.import_module(module), name)
