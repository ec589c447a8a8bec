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
import dataclasses
import time
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

__all__ = ["ObservedRunner", "Observer", "ObservingHooks", "observed_agent"]


class Observer:
    """What the worker records: metrics (optional) and spans (optional)."""

    def __init__(self, metrics: WorkerMetrics | None, tracing: bool) -> None:
        self.metrics = metrics
        self.tracer: Any = None
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
            from opentelemetry.trace import SpanKind

            # A model call leaves the process: CLIENT, as the GenAI conventions say.
            self._llm[id(asyncio.current_task())] = self.observer.tracer.start_span(
                f"chat {self.model}",
                kind=SpanKind.CLIENT,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": self.model,
                    "gen_ai.agent.name": self.agent,
                    "reactq.iteration": iteration,
                },
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
            if usage:
                span.set_attribute("gen_ai.usage.input_tokens", int(usage.get("prompt_tokens", 0)))
                span.set_attribute(
                    "gen_ai.usage.output_tokens", int(usage.get("completion_tokens", 0))
                )
            reason = getattr(response, "finish_reason", None)
            if reason:
                span.set_attribute("gen_ai.response.finish_reasons", [str(reason)])
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
            self._tools[(call.turn_id, call.call_id)] = self.observer.tracer.start_span(
                f"execute_tool {call.tool}",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": call.tool,
                    "gen_ai.tool.call.id": call.call_id,
                    "gen_ai.tool.type": "function",
                },
            )
        await call_hook(self.inner, "on_tool_start", call)

    async def on_tool_end(self, call: ToolCallInfo, *, output: str, ok: bool) -> None:
        span = self._tools.pop((call.turn_id, call.call_id), None)
        if span is not None:
            if not ok:
                from opentelemetry.trace import Status, StatusCode

                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR, "tool_error"))
            span.end()
        await call_hook(self.inner, "on_tool_end", call, output=output, ok=ok)


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
