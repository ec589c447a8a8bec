"""The worker's view of its turns: metrics, spans and log fields, around the kernel.

``ObservedRunner`` wraps ``AgentRunner.run_turn`` (turn counts, duration,
in-flight, the ``invoke_agent`` span, ``turn_id``/``attempt`` on log lines);
``ObservingHooks`` sits on the agent's hooks (keeping the agent's own) for the
model and tool calls (``chat`` / ``execute_tool`` spans, token counts). Span
names and attributes follow the OpenTelemetry semantic conventions for GenAI.
Nothing here changes a run: failures of observation are logged and ignored.
OpenTelemetry (the ``otel`` extra) is imported only where a span is made, which
happens only when tracing is on.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import time
from collections.abc import Mapping
from typing import Any

from reactq.shared.events import FinalEvent
from reactq.shared.logs import log_context
from reactq.shared.metrics import WorkerMetrics
from reactq.shared.settings import Settings
from reactq.shared.tracing import tracer
from reactq.worker.agent.interventions import Hooks, ToolCallInfo, call_hook
from reactq.worker.agent.runner import AgentRunner
from reactq.worker.agent.suspend import Suspended
from reactq.worker.definitions import Agent

__all__ = [
    "CAPTURE_CONTENT",
    "ObservedRunner",
    "Observer",
    "ObservingHooks",
    "capture_content",
    "observed_agent",
]


CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI conventions' opt-in (``Settings.otel_capture_content``): ``true`` records
the messages, tool arguments and results on the spans (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``).
Off by default: they are the users' data."""

_SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "reactq_observed_session", default=None
)
"""The session of the turn running in this task: its model calls' conversation id."""


def capture_content(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``CAPTURE_CONTENT`` says so (in ``environ``, else the process's)."""
    return Settings.from_env(environ).otel_capture_content


class Observer:
    """What the worker records: metrics (optional) and spans (optional); with
    ``content``, the spans carry the messages and tool data too."""

    def __init__(
        self, metrics: WorkerMetrics | None, tracing: bool, content: bool | None = None
    ) -> None:
        self.metrics = metrics
        self.tracer: Any = None
        self.content = capture_content() if content is None else content
        if tracing:
            self.tracer = tracer()

    @property
    def active(self) -> bool:
        """True when anything is recorded at all."""
        return self.metrics is not None or self.tracer is not None


class ObservedRunner(AgentRunner):
    """An AgentRunner that records each turn it runs."""

    def __init__(self, runner: AgentRunner, observer: Observer) -> None:
        super().__init__(runner.loop, runner.store, runner.agent_name)
        self.observer = observer

    async def run_turn(self, **kwargs: Any) -> FinalEvent:
        agent, m = self.agent_name, self.observer.metrics
        attempt = kwargs["emitter"].attempt
        started = time.monotonic()
        status = "lost"  # a lease lost or a turn given back ends without a final here
        if m is not None:
            m.turns_started.labels(agent).inc()
            m.in_flight.labels(m.worker).inc()
        span = self._start_span(kwargs["session_id"], kwargs["turn_id"], attempt)
        session = _SESSION.set(kwargs["session_id"])
        try:
            with log_context(turn_id=kwargs["turn_id"], attempt=attempt, agent=agent):
                if span is None:
                    final = await super().run_turn(**kwargs)
                else:
                    from opentelemetry import trace

                    with trace.use_span(span, end_on_exit=False, record_exception=True):
                        final = await super().run_turn(**kwargs)
            status = str(final.status)
            return final
        except Suspended:
            # Parked (for people or for child turns): it resumes as a new attempt.
            status = "awaiting_approval"
            raise
        except asyncio.CancelledError:
            status = "cancelled"
            raise
        finally:
            _SESSION.reset(session)
            elapsed = time.monotonic() - started
            if m is not None:
                m.in_flight.labels(m.worker).dec()
                m.turns_finished.labels(agent, status).inc()
                m.turn_duration.labels(agent, status).observe(elapsed)
            if span is not None:
                span.set_attribute("reactq.turn.status", status)
                if status not in ("completed", "cancelled", "awaiting_approval"):
                    from opentelemetry.trace import Status, StatusCode

                    span.set_status(Status(StatusCode.ERROR, status))
                span.end()

    def _start_span(self, session_id: str, turn_id: str, attempt: int) -> Any:
        if self.observer.tracer is None:
            return None
        return self.observer.tracer.start_span(
            f"invoke_agent {self.agent_name}",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.agent_name,
                "gen_ai.conversation.id": session_id,
                "reactq.turn.id": turn_id,
                "reactq.turn.attempt": attempt,
            },
        )


class ObservingHooks(Hooks):
    """Spans and token counts for each model and tool call; the agent's hooks still run."""

    def __init__(self, agent: str, model: str, observer: Observer, inner: Hooks | None) -> None:
        self.agent = agent
        self.model = model
        self.observer = observer
        self.inner = inner
        # Open spans: a model call's by the task that makes it, a tool call's by its id.
        self._llm: dict[int, Any] = {}
        self._tools: dict[tuple[str, str], Any] = {}

    async def on_llm_start(self, *, iteration: int, messages: list[dict[str, Any]]) -> None:
        if self.observer.tracer is not None:
            from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as g
            from opentelemetry.trace import SpanKind

            attributes: dict[str, Any] = {
                g.GEN_AI_OPERATION_NAME: "chat",
                g.GEN_AI_PROVIDER_NAME: "openai",
                g.GEN_AI_REQUEST_MODEL: self.model,
                g.GEN_AI_AGENT_NAME: self.agent,
                "reactq.iteration": iteration,
            }
            session = _SESSION.get()
            if session is not None:
                attributes[g.GEN_AI_CONVERSATION_ID] = session
            if self.observer.content:
                attributes[g.GEN_AI_INPUT_MESSAGES] = json.dumps(
                    [_message_parts(m) for m in messages], ensure_ascii=False
                )
            # A model call leaves the process: CLIENT, as the GenAI conventions say.
            self._llm[id(asyncio.current_task())] = self.observer.tracer.start_span(
                f"chat {self.model}", kind=SpanKind.CLIENT, attributes=attributes
            )
        await call_hook(self.inner, "on_llm_start", iteration=iteration, messages=messages)

    async def on_llm_end(
        self, *, iteration: int, response: Any, error: BaseException | None
    ) -> None:
        usage = getattr(response, "usage", None) or {}
        m = self.observer.metrics
        if m is not None:
            for kind in ("prompt", "completion"):
                count = int(usage.get(f"{kind}_tokens", 0) or 0)
                if count:
                    m.tokens.labels(self.agent, kind).inc(count)
        span = self._llm.pop(id(asyncio.current_task()), None)
        if span is not None:
            from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as g

            if usage:
                span.set_attribute(g.GEN_AI_USAGE_INPUT_TOKENS, int(usage.get("prompt_tokens", 0)))
                span.set_attribute(
                    g.GEN_AI_USAGE_OUTPUT_TOKENS, int(usage.get("completion_tokens", 0))
                )
            reason = getattr(response, "finish_reason", None)
            if reason:
                span.set_attribute(g.GEN_AI_RESPONSE_FINISH_REASONS, [str(reason)])
            for key, value in (
                (g.GEN_AI_RESPONSE_MODEL, getattr(response, "model", None)),
                (g.GEN_AI_RESPONSE_ID, getattr(response, "response_id", None)),
            ):
                if value:
                    span.set_attribute(key, value)
            if self.observer.content and response is not None and error is None:
                span.set_attribute(
                    g.GEN_AI_OUTPUT_MESSAGES,
                    json.dumps([_answer_parts(response)], ensure_ascii=False),
                )
            if error is not None:
                from opentelemetry.trace import Status, StatusCode

                span.record_exception(error)
                span.set_attribute("error.type", type(error).__name__)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.end()
        await call_hook(
            self.inner, "on_llm_end", iteration=iteration, response=response, error=error
        )

    async def on_tool_start(self, call: ToolCallInfo) -> None:
        if self.observer.tracer is not None:
            from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as g

            attributes: dict[str, Any] = {
                g.GEN_AI_OPERATION_NAME: "execute_tool",
                g.GEN_AI_TOOL_NAME: call.tool,
                g.GEN_AI_TOOL_CALL_ID: call.call_id,
                g.GEN_AI_TOOL_TYPE: "function",
                g.GEN_AI_CONVERSATION_ID: call.session_id,
            }
            if self.observer.content:
                attributes[g.GEN_AI_TOOL_CALL_ARGUMENTS] = json.dumps(call.args, default=str)
            self._tools[(call.turn_id, call.call_id)] = self.observer.tracer.start_span(
                f"execute_tool {call.tool}", attributes=attributes
            )
        await call_hook(self.inner, "on_tool_start", call)

    async def on_tool_end(self, call: ToolCallInfo, *, output: str, ok: bool) -> None:
        span = self._tools.pop((call.turn_id, call.call_id), None)
        if span is not None:
            if self.observer.content:
                from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as g

                span.set_attribute(g.GEN_AI_TOOL_CALL_RESULT, output)
            if not ok:
                from opentelemetry.trace import Status, StatusCode

                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR, "tool_error"))
            span.end()
        await call_hook(self.inner, "on_tool_end", call, output=output, ok=ok)


def _message_parts(message: Mapping[str, Any]) -> dict[str, Any]:
    """A Chat Completions message in the conventions' shape: its role and parts."""
    parts: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, str) and content:
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append({"type": "text", "content": part.get("text", "")})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }
        )
    if message.get("role") == "tool":
        parts = [
            {"type": "tool_call_response", "id": message.get("tool_call_id"), "response": content}
        ]
    return {"role": message.get("role"), "parts": parts}


def _answer_parts(response: Any) -> dict[str, Any]:
    """A model's answer in the conventions' shape (role, parts, finish reason)."""
    parts: list[dict[str, Any]] = []
    if getattr(response, "content", None):
        parts.append({"type": "text", "content": response.content})
    for call in getattr(response, "tool_calls", None) or ():
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        )
    reason = getattr(response, "finish_reason", None)
    return {"role": "assistant", "parts": parts, "finish_reason": reason or "stop"}


def observed_agent(agent: Agent, observer: Observer, settings: Settings) -> Agent:
    """``agent`` with ObservingHooks around its own hooks; itself when nothing is recorded.

    The hooks are only added when needed: a loop with hooks copies each tool
    call's arguments for them, a cost the default worker need not pay.
    ``settings`` give the model spans name when the agent names none.
    """
    if not observer.active:
        return agent
    model = agent.resolved_model(settings)
    hooks = ObservingHooks(agent.name, model, observer, agent.loop.hooks)
    return dataclasses.replace(agent, loop=dataclasses.replace(agent.loop, hooks=hooks))
