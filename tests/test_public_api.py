"""The curated face: ``reactq.__all__`` pinned, every name documented, extras lazy, the fakes."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.metadata
import inspect
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import reactq
import reactq.testing
from reactq import Agent, ChatMessage, LLMResponse, OpenAICompatibleClient, ToolCall, TurnStatus
from reactq.demo.weather import agent as weather
from reactq.testing import (
    MemoryStateStore,
    Reply,
    ScriptedLLM,
    ScriptedServer,
    replies_in_order,
    run_turn,
)

ROOT = Path(__file__).resolve().parent.parent
GUIDE_AGENTS = "docs/guide/agents.md"
GUIDE_TESTING = "docs/guide/testing.md"
# Every page whose code a user copies: the README and the guide (docs/guide/).
DOCUMENTED = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("docs/guide/*.md"))]
PUBLIC = [
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
    # errors
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
    # signals a tool raises for the model to read
    "ToolError",
    "ToolDeniedError",
    "ToolArgumentsError",
]

# Modules an application imports: the face, the fakes, the demo's agent, the command.
PUBLIC_MODULES = (
    "reactq",
    "reactq.testing",
    "reactq.demo.weather",
    "reactq.cli",
    "reactq.bundles",
)

TESTING = [
    "ScriptedLLM",
    "ScriptedCall",
    "LLMResponse",
    "ToolCall",
    "ScriptedServer",
    "Handler",
    "Reply",
    "demo_model",
    "replies_in_order",
    "MemoryEventBus",
    "MemoryStateStore",
    "TurnOutcome",
    "run_turn",
]

FROM_EXTRAS = ["MCPClient", "MCPProvider", "GatewayClient", "GatewayRequestError", "create_app"]
"""Public, imported by name (``from reactq import create_app``), and left out of
``__all__`` so that ``from reactq import *`` works without the extras they need."""


def test_the_public_surface_is_pinned() -> None:
    assert reactq.__all__ == PUBLIC
    assert not set(FROM_EXTRAS) & set(PUBLIC)
    assert reactq.testing.__all__ == TESTING


def test_version_comes_from_the_installed_metadata() -> None:
    assert reactq.__version__ == importlib.metadata.version("reactq")
    assert reactq.__version__.split(".")[:2] == ["0", "2"]


# --- every name resolves and says what it is ----------------------------------------


def _attribute_docstring(module: ModuleType, name: str, seen: int = 0) -> str | None:
    """The docstring under ``name = ...`` in the module that defines it (following
    ``from X import name`` re-exports), for a value that cannot carry ``__doc__``."""
    tree = ast.parse(inspect.getsource(module))
    body = tree.body
    for node, after in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        else:
            continue
        if name in targets:
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                return str(after.value.value)
            return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and seen < 5:
            if any(alias.name == name for alias in node.names):
                source = importlib.import_module(node.module)
                return _attribute_docstring(source, name, seen + 1)
    return None


def _own_docstring(obj: Any) -> str | None:
    doc = obj.__doc__ if inspect.isclass(obj) else inspect.getdoc(obj)
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
        # A dataclass without a docstring gets its signature as one.
        if doc and doc.startswith(f"{obj.__name__}("):
            return None
    return doc


@pytest.mark.parametrize(
    ("module", "name"),
    [(reactq, n) for n in PUBLIC + FROM_EXTRAS if n != "__version__"]
    + [(reactq.testing, n) for n in TESTING],
)
def test_every_public_name_resolves_and_has_a_docstring(module: ModuleType, name: str) -> None:
    obj = getattr(module, name)
    if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismethod(obj):
        doc = _own_docstring(obj)
    else:  # a type alias: its docstring is the string under its assignment
        doc = _attribute_docstring(module, name)
    assert doc and doc.strip(), f"{module.__name__}.{name} has no docstring"


def test_dir_and_unknown_names() -> None:
    assert set(PUBLIC + FROM_EXTRAS) <= set(dir(reactq))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        reactq.Nope  # noqa: B018 - the lookup is the test


# --- optional extras load lazily and name the extra -----------------------------------


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_importing_reactq_loads_no_optional_extra() -> None:
    # (Not opentelemetry: redis-py imports it by itself when it is installed.)
    code = (
        "import sys, json, reactq\n"
        "print(json.dumps([m for m in ('fastapi', 'uvicorn', 'mcp', 'flower', "
        "'prometheus_client') if m in sys.modules]))"
    )
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


@pytest.mark.parametrize(
    ("name", "blocked", "extra"),
    [
        ("MCPClient", "mcp", "mcp"),
        ("MCPProvider", "mcp", "mcp"),
        ("GatewayClient", "httpx2", "gateway"),
        ("GatewayRequestError", "httpx2", "gateway"),
        ("create_app", "fastapi", "gateway"),
    ],
)
def test_a_missing_extra_is_named(name: str, blocked: str, extra: str) -> None:
    # A None entry in sys.modules is how Python spells "this module cannot be imported"
    # (set after importing reactq: openai itself needs httpx2).
    code = (
        f"import sys, reactq\nsys.modules[{blocked!r}] = None\n"
        f"try:\n    reactq.{name}\nexcept ImportError as exc:\n    print(exc)\n"
        "else:\n    print('imported')"
    )
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert f"pip install 'reactq[{extra}]'" in out.stdout, out.stdout


def test_extras_resolve_when_installed() -> None:
    from reactq.producer.gateway import create_app
    from reactq.worker.agent.mcp import MCPClient

    assert reactq.create_app is create_app
    assert reactq.MCPClient is MCPClient
    assert issubclass(reactq.GatewayRequestError, reactq.ReactqError)


# --- reactq.testing: the fakes run a real turn ----------------------------------------


def _weather_call(city: str) -> LLMResponse:
    call = ToolCall(id="c1", name="get_weather", arguments=json.dumps({"city": city}))
    return LLMResponse(tool_calls=[call], finish_reason="tool_calls")


async def test_run_turn_with_a_scripted_llm() -> None:
    llm = ScriptedLLM([_weather_call("Paris"), "Sunny in Paris."])
    store = MemoryStateStore()
    outcome = await run_turn(weather, "Weather in Paris?", llm=llm, store=store)
    assert outcome.final.status == TurnStatus.COMPLETED
    assert outcome.final.text == "Sunny in Paris."
    types = [e.type for e in outcome.events]
    assert types[-1] == "final" and "action" in types and "observation" in types
    assert [m.role for m in outcome.messages] == ["user", "assistant", "tool", "assistant"]
    assert '"city": "Paris"' in (outcome.messages[2].content or "")
    assert llm.remaining == 0 and len(llm.calls) == 2

    again = await run_turn(weather, "Thanks", llm=ScriptedLLM(["You're welcome."]), store=store)
    assert isinstance(again.messages[-1], ChatMessage)
    assert len(again.messages) == 6
    await store.close()


async def test_scripted_server_through_the_openai_sdk() -> None:
    handler = replies_in_order(
        Reply.tool_calls([("get_weather", {"city": "Oslo"})]), Reply.text("Cold in Oslo.")
    )
    async with ScriptedServer(handler) as server:
        llm = OpenAICompatibleClient(base_url=server.base_url, api_key="sk-test", max_retries=0)
        try:
            agent = Agent(name="weather", tools=list(weather.tools))
            outcome = await run_turn(agent, "Weather in Oslo?", llm=llm)
        finally:
            await llm.aclose()
        assert outcome.final.text == "Cold in Oslo."
        assert server.request_count == 2


def test_examples_and_readme_use_the_public_face() -> None:
    for doc in DOCUMENTED:
        for line in (ROOT / doc).read_text().splitlines():
            if line.startswith("from reactq"):
                names = line.split(" import ", 1)[1].split("#", 1)[0].split(",")
                module = importlib.import_module(line.split()[1])
                for name in names:
                    assert hasattr(module, name.strip()), f"{doc}: {line}"
    for path in (ROOT / "examples").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("reactq"):
                assert node.module in PUBLIC_MODULES, (
                    f"{path.name} imports {node.module}: use the public face"
                )


def test_docs_api_names_every_module() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    named = set(re.findall(r"`(reactq(?:\.\w+)*)`", text))
    prefixes = tuple(p + "." for p in re.findall(r"`(reactq(?:\.\w+)*)\.\*`", text))
    modules = [info.name for info in pkgutil.walk_packages(reactq.__path__, "reactq.")]
    missing = [m for m in modules if m not in named and not m.startswith(prefixes)]
    assert missing == [], f"docs/api.md does not say whether these are public: {missing}"
    assert set(PUBLIC_MODULES) <= named
    documented = set(re.findall(r"`(\w+)`", text))
    assert [n for n in PUBLIC + FROM_EXTRAS + TESTING if n not in documented] == []


def _python_blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / name).read_text(), re.S)


async def test_the_documented_snippets_run() -> None:
    """README's agent and the guide's test of it, and docs/api.md's example, as a user
    copies them."""
    agent_block = next(b for b in _python_blocks("README.md") if "agent = Agent(" in b)
    test_block = next(b for b in _python_blocks(GUIDE_TESTING) if "def test_weather" in b)
    namespace: dict[str, Any] = {}
    exec(agent_block, namespace)
    exec(test_block, namespace)
    await namespace["test_weather"]()

    namespace = {}
    for block in _python_blocks("docs/api.md"):
        exec(block, namespace)
    await namespace["test_weather_agent"]()


def test_the_guide_scripts_your_own_tool_call() -> None:
    """Issue 21, item 4: the guide's "Without a model" says what the offline model can do
    and shows, as a script a user runs, the scripted model calling the user's own tool;
    the README's "Write an agent" leads there."""
    readme = (ROOT / "README.md").read_text()
    door = readme.split("## Write an agent", 1)[1].split("\n## ", 1)[0]
    assert f"]({GUIDE_AGENTS})" in door
    guide = (ROOT / GUIDE_AGENTS).read_text()
    section = guide.split("## Without a model", 1)[1].split("\n## ", 1)[0]
    assert "offline demo model" in section and "get_weather" in section
    assert "echo" in section
    script = next(
        b for b in _python_blocks(GUIDE_AGENTS) if "asyncio.run(" in b and "ScriptedLLM" in b
    )
    assert script in section
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("action") and "lookup_order" in line for line in lines), lines
    assert any(line.startswith("observation") and "shipped" in line for line in lines), lines
    assert lines[-1] == "final: Order A-17 has shipped."


def test_the_readme_is_a_door_to_every_guide_page() -> None:
    """Issue 30: the README stays short and its "Where to go next" links every guide page."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    section = readme.split("## Where to go next", 1)[1]
    pages = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("docs/guide/*.md"))
    assert pages, "docs/guide/ is empty"
    assert [p for p in pages if f"]({p})" not in section] == []
