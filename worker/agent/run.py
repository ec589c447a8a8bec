"""One run of the loop: the step machine behind ``AgentLoop.run``.

Each iteration asks the model once (plus at most one retry with a reminder),
then either ends with the answer or runs the step's tools. The run checks the
cancel handle between steps and races it against every model call, and checks
the budget after every model call, so a run that must stop makes no further
tool or model call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reactq.shared.bus import TurnEmitter
from reactq.shared.errors import (
    BudgetExceededError,
    EmptyResponseError,
    InvalidOutputError,
    LLMError,
    ParserError,
    ReactqError,
    ToolRequiredError,
)
from reactq.shared.events import (
    CompactedEvent,
    DeltaEvent,
    ErrorEvent,
    ModelFallbackEvent,
    RateLimitedEvent,
    ReasoningEvent,
    ThoughtEvent,
    TurnsLeftOutEvent,
    UsageEvent,
)
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.protocol.approvals import Decision
from reactq.shared.protocol.ratelimit import Grant
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.cancel import CancelSignal, RunCancelled
from reactq.worker.agent.context_policy import (
    compaction_split,
    fit_request,
    leave_out,
    summarise,
    summary_message,
)
from reactq.worker.agent.delegation import CURRENT as CURRENT_DELEGATOR
from reactq.worker.agent.delegation import DELEGATE, DELEGATE_PARALLEL
from reactq.worker.agent.fallback import ModelChain, ModelSwitch
from reactq.worker.agent.guardrails import (
    Guardrail,
    GuardrailBlockedError,
    GuardrailCheck,
    Guardrails,
    Stage,
    as_guardrails,
)
from reactq.worker.agent.interventions import call_hook
from reactq.worker.agent.llm.base import LLMResponse
from reactq.worker.agent.llm.ratelimit import RateLimiter, estimate_tokens
from reactq.worker.agent.parsers import ParsedStep
from reactq.worker.agent.results import OBSERVATION_PREFIX, fit_context
from reactq.worker.agent.suspend import AwaitingApproval, AwaitingChildren
from reactq.worker.agent.tools import ToolContext
from reactq.worker.agent.usage import UsageMeter
from reactq.worker.agent.visible import DeltaBuffer, VisibleText
from reactq.worker.agent.windows import context_window_for, message_chars

if TYPE_CHECKING:
    from reactq.worker.agent.loop import AgentLoop

__all__ = [
    "CANNOT_WAIT",
    "TOOL_REMINDERS",
    "TOOL_REQUIRED_REMINDER",
    "TRUNCATION_MARK",
    "WRAP_UP_PROMPT",
    "OnStep",
    "Run",
    "RunResult",
    "answered_prefix",
]

log = logging.getLogger("reactq.agent")

CANNOT_WAIT = (
    "this call needs a person's approval, and this run cannot wait for one (approvals "
    "need the worker pool and native tool calls)"
)

DELEGATION_TOOLS = frozenset((DELEGATE, DELEGATE_PARALLEL))

OnStep = Callable[[int, list[ChatMessage]], Awaitable[None]]
"""``on_step(completed_steps, new_messages)``: stores a run's checkpoint."""

TOOL_REMINDERS = 2
"""Reminders a model gets under ``require_tool_before_final`` before the run ends."""
TOOL_REQUIRED_REMINDER = (
    "You answered without calling a tool, but you must use at least one of your tools "
    "before you give your final answer. Call the tool that fits the request now."
)

TRUNCATION_MARK = "\n\n[The answer was cut off: it reached the output token limit.]"
WRAP_UP_PROMPT = (
    "You have used every step you are allowed. Do not call any tool. Using what you "
    "have learned so far, give your best final answer now."
)


@dataclass
class RunResult:
    """What one run of the loop produced."""

    status: TurnStatus
    """COMPLETED, MAX_ITERATIONS, ERROR, BUDGET_EXCEEDED, INVALID_OUTPUT, BLOCKED or
    CANCELLED."""
    text: str
    """The final answer, or the fallback message."""
    messages: list[ChatMessage] = field(default_factory=list)
    """The new messages of this run (not the input), ending with the assistant's answer."""
    usage: dict[str, int] = field(default_factory=dict)
    """Token usage summed over every model call."""
    error: ReactqError | None = None
    """Why it ended in ERROR, BUDGET_EXCEEDED or BLOCKED (a GuardrailBlockedError whose
    ``details["stage"]`` says whether the input or the answer was refused)."""
    cost: float | None = None
    """What the run cost, when the loop has a price for its model."""
    output: dict[str, Any] | None = None
    """The validated structured answer, when the agent has an ``output_type``."""
    summary: ChatMessage | None = None
    """The summary the context policy wrote before the run's first call (committed with
    the turn, before its user message), if it compacted."""


class Run:
    """The state of one ``AgentLoop.run`` call."""

    def __init__(
        self,
        loop: AgentLoop,
        emitter: TurnEmitter,
        context: ToolContext | None,
        cancel: CancelSignal | None,
        on_step: OnStep | None = None,
        decisions: Mapping[str, Decision] | None = None,
    ) -> None:
        self.loop = loop
        self.on_step = on_step
        self.decisions = decisions
        self.completed = 0
        self.emitter = emitter
        self.turn_id = emitter.turn_id
        self.context = context or ToolContext(
            session_id=emitter.session_id,
            turn_id=emitter.turn_id,
            attempt=emitter.attempt,
            emitter=emitter,
        )
        self.cancel = cancel
        self.meter = UsageMeter(loop.prices, loop.config.max_total_tokens, loop.config.max_cost)
        # A fallback holds for the rest of the turn.
        self.models = ModelChain(loop.models, loop.limiters)
        self.new: list[ChatMessage] = []
        self.wire: list[dict[str, Any]] = []
        self.seen: dict[tuple[str, str], int] = {}
        self.iteration = 0
        self.step_size = 1
        self.visible: VisibleText | None = None  # the last streamed text-mode call's
        self.reminded = 0  # reminders sent for require_tool_before_final
        self.current = 0  # index in ``wire`` of the turn's own message: never cut
        self.sent = (0, 0)  # the last request's characters and estimated tokens
        self.summary: ChatMessage | None = None
        self.output_retried = False  # the one retry of an answer that missed output_type
        # Parallel input guardrails: their verdict, raced against the first model call.
        self.input_check: asyncio.Future[GuardrailBlockedError | None] | None = None
        # What tools add to the system prompt of every call (a todo list), read afresh.
        self.sections = loop.registry.prompt_sections()

    async def execute(
        self, messages: list[ChatMessage], resume: list[ChatMessage] | None = None
    ) -> RunResult:
        """Run to the end; returns the result (only CancelledError escapes, and the
        checkpoint's StaleLeaseError and TurnCommittedError).

        ``resume``: the turn's checkpointed steps; the run goes on after them.
        """
        loop, config = self.loop, self.loop.config
        native = loop.mode.native
        steps = list(resume or [])
        if not native and steps and steps[-1].role == "assistant":
            steps.pop()  # a text-mode reply whose observation was not recorded: ask again
        replay = config.replay_reasoning
        prefix = await loop.prefix_for(self.context)
        self.wire = [*prefix, *(m.to_openai(reasoning=replay) for m in [*messages, *steps])]
        self.current = len(prefix) + len(messages) - 1
        self.new = steps
        replies = sum(1 for m in steps if m.role == "assistant")
        try:
            # A resumed turn passed its input guardrails in an earlier attempt.
            if not steps and config.input_guardrails:
                check = self._guard("input", config.input_guardrails, _text(messages[-1]))
                if config.guardrails_parallel:
                    self.input_check = asyncio.ensure_future(check)
                else:
                    blocked = await check
                    if blocked is not None:
                        raise blocked
            if not steps and config.context_policy is not None and len(messages) > 1:
                await self._compact(list(prefix), messages)
            if steps:
                self.iteration = replies
                self.completed = replies
                missing = _unanswered(steps) if native else []
                if missing:
                    self.completed -= 1
                    await self._answer(missing, resumed=True)
            for self.iteration in range(replies + 1, config.max_iterations + 1):
                if self.cancel is not None and self.cancel.is_set():
                    return self._end(TurnStatus.CANCELLED, config.cancelled_message)
                response = await self._ask(loop.tools)
                done = await (self._native_step(response) if native else self._text_step(response))
                if done is not None:
                    return done
            return await self._wrap_up()
        except RunCancelled:
            return self._end(TurnStatus.CANCELLED, config.cancelled_message)
        except _OverBudget as over:
            return await self._over_budget(over.which)
        except GuardrailBlockedError as blocked:
            # Nothing of the turn is kept: the refused input never reaches a later turn.
            meter = self.meter
            return RunResult(
                TurnStatus.BLOCKED, blocked.message, [], meter.totals, blocked, meter.cost
            )
        except (LLMError, ParserError, EmptyResponseError, ToolRequiredError) as exc:
            return await self.fail(exc)
        finally:
            if self.input_check is not None and not self.input_check.done():
                self.input_check.cancel()
                await asyncio.gather(self.input_check, return_exceptions=True)

    # -- steps ----------------------------------------------------------------------

    async def _native_step(self, response: LLMResponse) -> RunResult | None:
        if not response.tool_calls and not (response.content or "").strip():
            response = await self._retry(
                response, self.loop.mode.retry_reminder.format(error="empty answer")
            )
            if not response.tool_calls and not (response.content or "").strip():
                raise EmptyResponseError("the model answered nothing, twice")
        if not response.tool_calls:
            if self._tool_still_required():
                return await self._native_step(await self._remind(response))
            return await self._final(response.content or "", response, self._native_step)
        calls = response.tool_calls
        self._add(
            ChatMessage(
                role="assistant",
                content=response.content or None,
                tool_calls=calls,
                turn_id=self.turn_id,
                **_provider_fields(response),
            )
        )
        if response.content and response.content.strip():
            # Published with the step's actions, right after (no call runs between).
            self.emitter.emit_later(ThoughtEvent, text=response.content)
        # The reply first: a worker lost while its tools run resumes with these calls.
        # It is stored as the calls are announced, with their actions (one call).
        await self._answer(calls, truncated=response.truncated, reply=True)
        self.step_size = len(calls) + 1
        return None

    async def _answer(
        self,
        calls: list[ToolCall],
        *,
        truncated: bool = False,
        resumed: bool = False,
        reply: bool = False,
    ) -> None:
        """Run ``calls`` (of the last reply), add their results, checkpoint the step.

        ``reply``: the reply is not checkpointed yet; it is before any call runs, with
        the calls' actions (or before delegations are submitted, if any are).
        """
        # A call resumed without a decision started before its worker died (it may have
        # had side effects); an approved one never started: it waited for a person.
        context = dataclasses.replace(self.context, resumed=True) if resumed else self.context
        self._check_stop()
        executor = self.loop.executor
        waiting: list[ToolCall] = []
        denied: dict[str, str] = {}
        approved: list[ToolCall] = []
        for call in calls:
            decision = self.decisions.get(call.id) if self.decisions is not None else None
            if decision is not None:
                if decision.approved:
                    approved.append(call)
                else:
                    denied[call.id] = decision.reason or "a person said no"
            elif self._needs_person(call, context):
                if self.decisions is None:
                    denied[call.id] = CANNOT_WAIT
                else:
                    waiting.append(call)
        # Delegation calls go to the turn's delegator (worker/agent/delegation.py):
        # outcomes known run with them, the others wait for their child turns.
        delegated: Mapping[str, ToolContext] = {}
        children: list[ToolCall] = []
        delegator = CURRENT_DELEGATOR.get()
        if delegator is not None:
            asks = [c for c in calls if c.name in DELEGATION_TOOLS and c.id not in denied]
            if asks:
                if reply:  # child turns are submitted next: the reply is stored first
                    await self._checkpoint()
                    reply = False
                delegated, children = await delegator.resolve(asks, context)
        # Approved calls never started (they waited for a person): not ``resumed``.
        handled = [c for c in calls if c not in waiting and c not in children]
        ran = await executor.run_step(
            handled,
            self.emitter,
            context,
            iteration=self.iteration,
            seen=self.seen,
            truncated=truncated,
            refused=denied,
            contexts={**{c.id: self.context for c in approved}, **delegated},
            announced=self._checkpoint if reply else None,
        )
        for call, output in zip(handled, ran, strict=True):
            self._add(
                ChatMessage(
                    role="tool",
                    content=output,
                    tool_call_id=call.id,
                    name=call.name,
                    turn_id=self.turn_id,
                )
            )
        if waiting:
            # The calls that ran are kept; the turn resumes here once a person decided.
            await self._checkpoint()
            raise AwaitingApproval(waiting)
        if children:
            await self._checkpoint()
            raise AwaitingChildren(children)
        self.completed += 1
        await self._checkpoint()

    def _needs_person(self, call: ToolCall, context: ToolContext) -> bool:
        found = self.loop.registry.get(call.name)
        if found is None:
            return False  # it fails as an unknown tool
        if found.requires_approval:
            return True
        policy = self.loop.config.approval
        if policy is None:
            return False
        try:
            args = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError:
            return False  # it fails as invalid arguments
        if not isinstance(args, dict):
            return False
        try:
            return bool(policy(call.name, args, context))
        except Exception:
            log.warning("the approval policy raised for %s; it waits", call.name, exc_info=True)
            return True

    async def _checkpoint(self) -> None:
        """Store the step (``on_step``) with the events queued for it: the runner's
        ``on_step`` publishes them in the same call (``TurnEmitter.checkpoint``); what
        is left (no ``on_step``, or one that publishes nothing) goes out now."""
        if self.on_step is not None:
            await self.on_step(self.completed, list(self.new))
        await self.emitter.flush()

    async def _text_step(self, response: LLMResponse) -> RunResult | None:
        step = self._parse(response)
        if isinstance(step, ParserError):
            response = await self._retry(
                response, self.loop.mode.retry_reminder.format(error=step.message)
            )
            step = self._parse(response)
            if isinstance(step, ParserError):
                raise step
        if step.final is not None:
            if self._tool_still_required():
                return await self._text_step(await self._remind(response))
            await self._show_rest(step.final)
            return await self._final(step.final, response, self._text_step)
        raw = response.content or ""
        self._add(
            ChatMessage(
                role="assistant", content=raw, turn_id=self.turn_id, **_provider_fields(response)
            )
        )
        if step.thought:
            # Published with the call's action, right after (no call runs between).
            self.emitter.emit_later(ThoughtEvent, text=step.thought)
        name = step.tool or ""
        call = ToolCall(
            id=f"{self.loop.mode.mode.value}_{self.iteration}",
            name=name,
            arguments=json.dumps(step.args, ensure_ascii=False),
        )
        # Parking needs call ids the model keeps: text modes cannot wait for a person.
        refused = {call.id: CANNOT_WAIT} if self._needs_person(call, self.context) else None
        (output,) = await self._tools([call], response.truncated, refused)
        text = f"{OBSERVATION_PREFIX} ({name}): {output}"
        if self.loop.mode.observation_note:
            text += "\n" + self.loop.mode.observation_note
        self._add(ChatMessage(role="user", content=text, turn_id=self.turn_id))
        self.step_size = 2
        self.completed += 1
        await self._checkpoint()
        return None

    def _parse(self, response: LLMResponse) -> ParsedStep | ParserError:
        assert self.loop.mode.parser is not None
        try:
            return self.loop.mode.parser.parse(response.content or "")
        except ParserError as exc:
            return exc

    async def _tools(
        self, calls: list[ToolCall], truncated: bool, refused: dict[str, str] | None
    ) -> list[str]:
        self._check_stop()
        return await self.loop.executor.run_step(
            calls,
            self.emitter,
            self.context,
            iteration=self.iteration,
            seen=self.seen,
            truncated=truncated,
            refused=refused,
        )

    async def _show_rest(self, answer: str) -> None:
        """Stream the part of a text-mode answer its deltas have not shown (the parser
        may have taken it from a form the filter could not follow)."""
        rest = self.visible.rest(answer) if self.visible is not None else ""
        if rest:
            await self.emitter.emit(DeltaEvent, text=rest)

    def _tool_still_required(self) -> bool:
        """True when the agent must call a tool first and this turn has called none."""
        return self.loop.config.require_tool_before_final and self.completed == 0

    async def _remind(self, answer: LLMResponse) -> LLMResponse:
        """Refuse a final answer given before any tool call: ask again, at most
        ``TOOL_REMINDERS`` times, then end the run with ToolRequiredError."""
        if self.reminded >= TOOL_REMINDERS:
            raise ToolRequiredError(
                f"the agent must call a tool before answering, and the model answered "
                f"without one {self.reminded + 1} times",
                reminders=self.reminded,
            )
        self.reminded += 1
        return await self._retry(answer, TOOL_REQUIRED_REMINDER)

    async def _retry(self, failed: LLMResponse, reminder: str) -> LLMResponse:
        """Ask once more with a reminder; neither the failed answer nor it is kept."""
        extra: list[dict[str, Any]] = []
        if (failed.content or "").strip():
            extra.append({"role": "assistant", "content": failed.content})
        extra.append({"role": "user", "content": reminder})
        return await self._ask(self.loop.tools, extra)

    async def _wrap_up(self) -> RunResult:
        loop, fallback = self.loop, self.loop.config.fallback_message
        if not loop.config.wrap_up:
            return self._end(TurnStatus.MAX_ITERATIONS, fallback)
        try:
            response = await self._ask(None, [{"role": "user", "content": WRAP_UP_PROMPT}])
        except LLMError:
            return self._end(TurnStatus.MAX_ITERATIONS, fallback)
        text = response.content or ""
        if loop.mode.parser is not None:
            step = self._parse(response)
            if isinstance(step, ParsedStep) and step.final is not None:
                text = step.final
            await self._show_rest(text)
        if not text.strip():
            return self._end(TurnStatus.MAX_ITERATIONS, fallback)
        if response.truncated:
            text += TRUNCATION_MARK
        return await self._guard_output(self._end(TurnStatus.MAX_ITERATIONS, text))

    # -- the model call -------------------------------------------------------------

    async def _ask(
        self, tools: list[dict[str, Any]] | None, extra: list[dict[str, Any]] | None = None
    ) -> LLMResponse:
        loop, config = self.loop, self.loop.config
        self._check_stop()
        wire = self.wire if extra is None else [*self.wire, *extra]
        wire, added = await self._with_sections(wire)
        protect = self.step_size + len(extra or ())
        if config.context_budget is not None:
            wire = fit_context(wire, config.context_budget, protect=protect)
        wire = self._fit(wire, tools, min(self.current + added, len(wire) - protect))
        hooks = config.hooks
        if hooks is not None:
            await call_hook(hooks, "on_llm_start", iteration=self.iteration, messages=wire)
        deltas: DeltaBuffer | None = None
        thinking: DeltaBuffer | None = None
        self.visible = None
        # An answer that may yet be refused (no tool called yet, an input guardrail's
        # verdict pending) is not shown at all.
        shows = not self._tool_still_required() and self.input_check is None
        if config.stream and shows:
            # A structured answer is shown once validated, and one output guardrails may
            # block once they allowed it: in the final, not piecewise.
            if loop.output is None and not config.output_guardrails:
                self.visible = None if loop.mode.native else VisibleText(loop.mode.mode.value)
                deltas = DeltaBuffer(self.emitter, config.delta_interval, self.visible)
            thinking = DeltaBuffer(self.emitter, config.delta_interval, event=ReasoningEvent)
        while True:
            limiter = self.models.limiter
            estimate = await self._draw(limiter, wire, tools)
            call = self.models.llm.complete(
                wire,
                model=self.models.model,
                tools=tools,
                stream=config.stream,
                options=loop.options,
                on_delta=deltas.add if deltas is not None else None,
                **({"on_reasoning": thinking.add} if thinking is not None else {}),
            )
            if self.input_check is not None:
                call = self._raced(call, self.input_check)
            try:
                response = await (call if self.cancel is None else self.cancel.guard(call))
                break
            except (LLMError, RunCancelled) as exc:
                if hooks is not None:
                    await call_hook(
                        hooks, "on_llm_end", iteration=self.iteration, response=None, error=exc
                    )
                # Text shown already would be followed by another model's: no fallback then.
                shown = any(b is not None and b.received for b in (deltas, thinking))
                if shown or isinstance(exc, RunCancelled):
                    raise
                switch = self.models.advance(exc)
                if switch is None:
                    raise
            await self._fall_back(switch)
            if hooks is not None:
                await call_hook(hooks, "on_llm_start", iteration=self.iteration, messages=wire)
        if limiter is not None:
            await limiter.settle(estimate, response)
        if thinking is not None:
            await thinking.flush()
        elif shows and response.reasoning:
            await self.emitter.emit(ReasoningEvent, text=response.reasoning)
        if deltas is not None:
            await deltas.flush()
        if hooks is not None:
            await call_hook(
                hooks, "on_llm_end", iteration=self.iteration, response=response, error=None
            )
        await self._count(response)
        return response

    async def _with_sections(self, wire: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """``wire`` with the tools' prompt sections at the end of its system message (one
        made when it has none), and how many messages that added (0 or 1)."""
        texts: list[str] = []
        for section in self.sections:
            try:
                text = await section(self.context)
            except Exception as exc:  # a section that fails adds nothing; the turn goes on
                log.warning("a prompt section failed (%s: %s)", type(exc).__name__, exc)
                continue
            if text:
                texts.append(text)
        if not texts:
            return wire, 0
        extra = "\n\n".join(texts)
        first = wire[0] if wire else {}
        if first.get("role") == "system" and isinstance(first.get("content"), str):
            return [{**first, "content": f"{first['content']}\n\n{extra}"}, *wire[1:]], 0
        return [{"role": "system", "content": extra}, *wire], 1

    async def _raced(
        self, call: Awaitable[LLMResponse], check: asyncio.Future[GuardrailBlockedError | None]
    ) -> LLMResponse:
        """The model call, raced against the input guardrails: a block cancels the call;
        an answer waits for their verdict before the run acts on it."""
        work = asyncio.ensure_future(call)
        try:
            await asyncio.wait((work, check), return_when=asyncio.FIRST_COMPLETED)
            if not check.done():
                await work  # its error (a fallback may follow) before any verdict
            blocked = await check
            if blocked is not None:
                raise blocked
            self.input_check = None
            return await work
        finally:
            if not work.done():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)

    async def _guard(
        self, stage: Stage, guardrails: Sequence[Guardrail | GuardrailCheck], text: str
    ) -> GuardrailBlockedError | None:
        checker = Guardrails(
            self.emitter, self.context, self.models.llm, self.models.model, self._count_aside
        )
        return await checker.check(stage, as_guardrails(f"{stage}_guardrails", guardrails), text)

    async def _count_aside(self, response: LLMResponse, model: str) -> None:
        """Meter a call the counter did not estimate (a classifier's): no calibration."""
        sent, self.sent = self.sent, (0, 0)
        try:
            await self._count(response, model)
        finally:
            self.sent = sent

    async def _guard_output(self, result: RunResult) -> RunResult:
        """The result, or (an output guardrail blocked its answer) the refusal instead."""
        guardrails = self.loop.config.output_guardrails
        if not guardrails:
            return result
        blocked = await self._guard("output", guardrails, result.text)
        if blocked is None:
            return result
        refusal = ChatMessage(role="assistant", content=blocked.message, turn_id=self.turn_id)
        result.messages[-1] = refusal
        result.status, result.text, result.error, result.output = (
            TurnStatus.BLOCKED,
            blocked.message,
            blocked,
            None,
        )
        return result

    def _window(self) -> int:
        return context_window_for(self.models.model, self.loop.config.context_window)

    def _fit(
        self, wire: list[dict[str, Any]], tools: list[dict[str, Any]] | None, protect_from: int
    ) -> list[dict[str, Any]]:
        """The request made to fit the window by the context policy (ContextLengthExceeded
        when it cannot); notes its size for the gauge and the calibration."""
        policy, counter, model = (
            self.loop.config.context_policy,
            self.loop.counter,
            self.models.model,
        )
        if policy is not None:
            wire, _ = fit_request(
                wire,
                counter=counter,
                model=model,
                window=self._window(),
                policy=policy,
                protect_from=max(0, protect_from),
                tools=tools,
            )
        chars = counter.chars(wire, tools)
        self.sent = (chars, counter.tokens(model, chars))
        return wire

    async def _compact(self, prefix: list[dict[str, Any]], messages: list[ChatMessage]) -> None:
        """Summarise the oldest messages when the turn's request is over the policy's
        ``compact_at`` (one model call; when it fails, the oldest turns are left out instead)."""
        loop, policy = self.loop, self.loop.config.context_policy
        assert policy is not None
        model, counter, window = self.models.model, loop.counter, self._window()
        before = counter.count(model, self.wire, loop.tools)
        if before <= policy.compact_at * window:
            return
        history = messages[:-1]
        replay = loop.config.replay_reasoning
        sizes = [message_chars(m.to_openai(reasoning=replay)) for m in history]
        ratio = counter.ratio(model)
        split = compaction_split(history, sizes, int(policy.keep_recent * window * ratio))
        if not split:
            return
        old, upto = history[:split], history[split - 1].sequence or 0
        writer = policy.summary_model or model
        self._check_stop()
        try:
            call = summarise(
                self.models.llm, writer, loop.options, policy, old, int(window * ratio / 2)
            )
            response = await (call if self.cancel is None else self.cancel.guard(call))
        except LLMError as exc:
            await self._leave_out(prefix, messages, sizes, before, exc.code, writer)
            return
        self.sent = (0, 0)  # its request is not one the counter estimated: no calibration
        await self._count(response, writer)
        text = (response.content or "").strip()
        if not text:
            await self._leave_out(prefix, messages, sizes, before, EmptyResponseError.code, writer)
            return
        self.summary = summary_message(text, upto, self.turn_id)
        kept = [self.summary, *history[split:], messages[-1]]
        self._rewire(prefix, kept)
        after = counter.count(model, self.wire, loop.tools)
        await self.emitter.emit(
            CompactedEvent,
            summarised_messages=split,
            up_to_sequence=upto,
            tokens_before=before,
            tokens_after=after,
            model=writer,
        )

    async def _leave_out(
        self,
        prefix: list[dict[str, Any]],
        messages: list[ChatMessage],
        sizes: list[int],
        before: int,
        reason: str,
        writer: str,
    ) -> None:
        """No summary could be written: leave the oldest whole turns out of the request
        until it is under ``compact_at`` (they stay in the history), and say so."""
        loop, policy = self.loop, self.loop.config.context_policy
        assert policy is not None
        model, counter = self.models.model, loop.counter
        limit = int(policy.compact_at * self._window() * counter.ratio(model))
        cut = leave_out(messages[:-1], sizes, counter.chars(self.wire, loop.tools) - limit)
        if cut is None:
            log.warning("the summary call failed (%s); the turn goes on uncompacted", reason)
            return
        log.warning(
            "the summary call failed (%s); the turn leaves out its %d oldest turns",
            reason,
            len(cut.turn_ids),
        )
        self._rewire(prefix, [*cut.kept, messages[-1]])
        await self.emitter.emit(
            TurnsLeftOutEvent,
            turn_ids=cut.turn_ids,
            messages=len(cut.left_out),
            from_sequence=cut.left_out[0].sequence or 0,
            up_to_sequence=cut.left_out[-1].sequence or 0,
            tokens_before=before,
            tokens_after=counter.count(model, self.wire, loop.tools),
            reason=reason,
            model=writer,
        )

    def _rewire(self, prefix: list[dict[str, Any]], kept: list[ChatMessage]) -> None:
        """The request from ``kept`` on (its last message is the turn's own)."""
        replay = self.loop.config.replay_reasoning
        self.wire = [*prefix, *(m.to_openai(reasoning=replay) for m in kept)]
        self.current = len(prefix) + len(kept) - 1

    async def _draw(
        self,
        limiter: RateLimiter | None,
        wire: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
    ) -> int:
        """Wait for the pool's rate limit on the current model, if it has one (a
        ``rate_limited`` event says so, once); return the tokens estimated for the call."""
        if limiter is None:
            return 0
        estimate = estimate_tokens(wire, tools) if limiter.counts_tokens else 0
        model = self.models.model

        async def announce(grant: Grant) -> None:
            await self.emitter.emit(
                RateLimitedEvent, model=model, wait=grant.wait, limit=grant.limit
            )

        waiting = limiter.acquire(estimate, announce)
        await (waiting if self.cancel is None else self.cancel.guard(waiting))
        return estimate

    async def _fall_back(self, switch: ModelSwitch) -> None:
        error = switch.error
        log.warning(
            "model %s failed (%s); the turn goes on with %s",
            switch.from_model,
            error.code,
            switch.to_model,
        )
        await self.emitter.emit(
            ModelFallbackEvent,
            from_model=switch.from_model,
            to_model=switch.to_model,
            code=error.code,
            message=error.message or str(error),
        )

    async def _count(self, response: LLMResponse, model: str | None = None) -> None:
        """Meter a call's usage and publish it, with the context gauge (``model``: the
        one called, when not the turn's current one)."""
        usage = response.usage
        truncated = response.truncated
        if not usage and not truncated:
            return
        model = model or self.models.model
        chars, estimate = self.sent
        prompt = usage.get("prompt_tokens", 0)
        counter = self.loop.counter
        if prompt and chars:
            counter.calibrate(model, chars, prompt)
        context = prompt or estimate or None
        window = context_window_for(model, self.loop.config.context_window)
        cost = self.meter.add(usage, model)
        # Published with the event that follows (an action, a thought, the final).
        self.emitter.emit_later(
            UsageEvent,
            model=model,
            prompt_tokens=usage.get("prompt_tokens", 0),
            completion_tokens=usage.get("completion_tokens", 0),
            total_tokens=usage.get("total_tokens", 0),
            cost=cost,
            finish_reason=response.finish_reason,
            truncated=truncated,
            context_tokens=context,
            context_window=window,
            context_percent=round(100 * context / window, 1) if context else None,
        )

    def _check_stop(self) -> None:
        """Raise before a model or tool call the run may no longer make."""
        if self.cancel is not None and self.cancel.is_set():
            raise RunCancelled
        which = self.meter.exceeded()
        if which is not None:
            raise _OverBudget(which)

    async def _over_budget(self, which: str) -> RunResult:
        error = BudgetExceededError(
            f"the run went over its {which} budget; it was stopped before any further call",
            budget=which,
            usage=dict(self.meter.totals),
            cost=self.meter.cost,
        )
        await self._report(error)
        return self._end(TurnStatus.BUDGET_EXCEEDED, self.loop.config.budget_message, error)

    # -- endings --------------------------------------------------------------------

    def _add(self, message: ChatMessage) -> None:
        self.new.append(message)
        self.wire.append(message.to_openai(reasoning=self.loop.config.replay_reasoning))

    async def _final(
        self,
        text: str,
        response: LLMResponse,
        again: Callable[[LLMResponse], Awaitable[RunResult | None]],
    ) -> RunResult | None:
        """End with a final answer: as is, or (with ``output_type``) validated, after one
        retry quoting what was wrong (``again`` takes the retried answer as a step)."""
        spec = self.loop.output
        if spec is None:
            return await self._complete(text, response)
        try:
            output = spec.validate(text)
        except InvalidOutputError as exc:
            if not self.output_retried:
                self.output_retried = True
                reminder = spec.reminder(exc.message, self.loop.mode.mode)
                return await again(await self._retry(response, reminder))
            error = InvalidOutputError(
                f"the final answer does not match the output schema, after a retry: {exc.message}",
                schema=spec.name,
            )
            await self._report(error)
            return self._end(
                TurnStatus.INVALID_OUTPUT, self.loop.config.error_fallback_message, error
            )
        text = json.dumps(output, ensure_ascii=False)
        result = self._end(TurnStatus.COMPLETED, text, keep=True, response=response)
        result.output = output
        return await self._guard_output(result)

    async def _complete(self, text: str, response: LLMResponse) -> RunResult:
        if response.truncated:
            text += TRUNCATION_MARK
        result = self._end(TurnStatus.COMPLETED, text, keep=True, response=response)
        return await self._guard_output(result)

    async def fail(self, error: ReactqError) -> RunResult:
        """End in ERROR: report it (if the bus still works) and return the fallback."""
        await self._report(error)
        return self._end(TurnStatus.ERROR, self.loop.config.error_fallback_message, error)

    async def _report(self, error: ReactqError) -> None:
        context = {"iteration": self.iteration, "model": self.models.model, **error.details}
        try:
            await self.emitter.emit(
                ErrorEvent, code=error.code, message=error.message or str(error), context=context
            )
        except Exception:  # the bus is what failed; the result still says why
            pass

    def _end(
        self,
        status: TurnStatus,
        text: str,
        error: ReactqError | None = None,
        keep: bool = False,
        response: LLMResponse | None = None,
    ) -> RunResult:
        """``response``: the model's answer the text comes from (its reasoning is kept)."""
        if not keep:
            # Keep the history valid for the next turn: every tool call answered.
            self.new = answered_prefix(self.new)
        fields = _provider_fields(response) if response is not None else {}
        self.new.append(ChatMessage(role="assistant", content=text, turn_id=self.turn_id, **fields))
        return RunResult(
            status, text, self.new, self.meter.totals, error, self.meter.cost, summary=self.summary
        )


def _text(message: ChatMessage) -> str:
    """The text of a user message (its text parts, for one with content parts)."""
    content: Any = message.content
    if content is None or isinstance(content, str):
        return content or ""
    parts = (p.get("text") if isinstance(p, Mapping) else getattr(p, "text", None) for p in content)
    return "\n".join(p for p in parts if isinstance(p, str))


def _provider_fields(response: LLMResponse) -> dict[str, Any]:
    """What an assistant message keeps of the provider's answer beyond text and calls."""
    return {"reasoning": response.reasoning, "extra": response.extra or None}


class _OverBudget(Exception):
    """Internal: a budget is spent; ``which`` names it."""

    def __init__(self, which: str) -> None:
        super().__init__(which)
        self.which = which


def _unanswered(messages: list[ChatMessage]) -> list[ToolCall]:
    """The calls of the last assistant reply that have no tool result after it."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant":
            answered = {m.tool_call_id for m in messages[index + 1 :] if m.role == "tool"}
            return [c for c in message.tool_calls or [] if c.id not in answered]
    return []


def answered_prefix(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The longest prefix in which every assistant tool call has its tool result."""
    valid = 0
    pending: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            pending = {c.id for c in message.tool_calls}
        elif message.role == "tool":
            pending.discard(message.tool_call_id or "")
        if not pending:
            valid = index + 1
    return messages[:valid]
