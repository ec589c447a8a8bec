"""One run of the loop: the step machine behind ``AgentLoop.run``.

Each iteration asks the model once (plus at most one retry with a reminder),
then either ends with the answer or runs the step's tools. The run checks the
cancel handle between steps and races it against every model call, and checks
the budget after every model call, so a run that must stop makes no further
tool or model call.

The run's state and its result are ``worker/agent/run_state.py``; its model calls
``worker/agent/run_model.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from reactq.shared.errors import (
    EmptyResponseError,
    InvalidOutputError,
    LLMError,
    ParserError,
    ToolRequiredError,
)
from reactq.shared.events import DeltaEvent, ThoughtEvent
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.cancel import RunCancelled
from reactq.worker.agent.delegation import CURRENT as CURRENT_DELEGATOR
from reactq.worker.agent.delegation import DELEGATE, DELEGATE_PARALLEL
from reactq.worker.agent.guardrails import GuardrailBlockedError
from reactq.worker.agent.llm.base import LLMResponse
from reactq.worker.agent.parsers import ParsedStep
from reactq.worker.agent.results import OBSERVATION_PREFIX
from reactq.worker.agent.run_model import ModelCalls
from reactq.worker.agent.run_state import OverBudget, RunResult, provider_fields
from reactq.worker.agent.suspend import AwaitingApproval, AwaitingChildren
from reactq.worker.agent.tools import ToolContext

__all__ = [
    "CANNOT_WAIT",
    "TOOL_REMINDERS",
    "TOOL_REQUIRED_REMINDER",
    "TRUNCATION_MARK",
    "WRAP_UP_PROMPT",
    "Run",
]

log = logging.getLogger("reactq.agent")

CANNOT_WAIT = (
    "this call needs a person's approval, and this run cannot wait for one (approvals "
    "need the worker pool and native tool calls)"
)

DELEGATION_TOOLS = frozenset((DELEGATE, DELEGATE_PARALLEL))

EDITED_NOTE = (
    "(A person changed this call's arguments before approving it; it ran with {arguments}.)\n"
)
"""What the model reads before the result of a call whose approval edited its arguments."""

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


class Run(ModelCalls):
    """One ``AgentLoop.run`` call: its steps, the tool calls they ask for, its end."""

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
        except OverBudget as over:
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
                **provider_fields(response),
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
        # An approval that edited a call's arguments: the call runs with the person's.
        edited = self._edited_calls(calls)
        calls = [edited.get(c.id, c) for c in calls]
        executor = self.loop.executor
        waiting: list[ToolCall] = []
        denied: dict[str, str] = {}
        approved: list[ToolCall] = []
        given: dict[str, tuple[str, bool]] = {}
        for call in calls:
            decision = self.decisions.get(call.id) if self.decisions is not None else None
            if decision is not None:
                if decision.result is not None:
                    given[call.id] = (decision.result, decision.failed)
                elif decision.approved:
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
            given=given,
            contexts={**{c.id: self.context for c in approved}, **delegated},
            announced=self._checkpoint if reply else None,
        )
        for call, output in zip(handled, ran, strict=True):
            if call.id in edited:
                output = EDITED_NOTE.format(arguments=call.arguments) + output
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

    def _edited_calls(self, calls: list[ToolCall]) -> dict[str, ToolCall]:
        """The calls among ``calls`` an approval gave other arguments, as they run."""
        out: dict[str, ToolCall] = {}
        for call in calls:
            decision = self.decisions.get(call.id) if self.decisions is not None else None
            if decision is None or not decision.approved or decision.arguments is None:
                continue
            if decision.result is not None:
                continue  # answered in its place: it does not run
            text = json.dumps(decision.arguments, ensure_ascii=False)
            out[call.id] = call.model_copy(update={"arguments": text})
        return out

    def _needs_person(self, call: ToolCall, context: ToolContext) -> bool:
        if call.name in self.loop.client_tools:
            return True  # the caller runs it: the turn waits for its result
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
                role="assistant", content=raw, turn_id=self.turn_id, **provider_fields(response)
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

    # -- endings --------------------------------------------------------------------

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


def _text(message: ChatMessage) -> str:
    """The text of a user message (its text parts, for one with content parts)."""
    content: Any = message.content
    if content is None or isinstance(content, str):
        return content or ""
    parts = (p.get("text") if isinstance(p, Mapping) else getattr(p, "text", None) for p in content)
    return "\n".join(p for p in parts if isinstance(p, str))


def _unanswered(messages: list[ChatMessage]) -> list[ToolCall]:
    """The calls of the last assistant reply that have no tool result after it."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant":
            answered = {m.tool_call_id for m in messages[index + 1 :] if m.role == "tool"}
            return [c for c in message.tool_calls or [] if c.id not in answered]
    return []
