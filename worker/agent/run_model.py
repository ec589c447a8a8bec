"""The model calls of one run: the request, its limits, its fallbacks, its meter.

``ModelCalls`` asks the model for ``Run`` (``worker/agent/run.py``): the tools' prompt
sections and the context policy shape the request (a summary or turns left out when it
is over ``compact_at``), the pool's rate limit is drawn before it, the input
guardrails race it, a failure moves the turn to its next fallback model, and every
call's usage is metered and published. The output guardrails judge the final answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from typing import Any

from reactq.shared.errors import EmptyResponseError, LLMError
from reactq.shared.events import (
    CompactedEvent,
    ModelFallbackEvent,
    RateLimitedEvent,
    ReasoningEvent,
    TurnsLeftOutEvent,
    UsageEvent,
)
from reactq.shared.messages import ChatMessage
from reactq.shared.protocol.ratelimit import Grant
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.cancel import RunCancelled
from reactq.worker.agent.context_policy import (
    compaction_split,
    fit_request,
    leave_out,
    summarise,
    summary_message,
)
from reactq.worker.agent.fallback import ModelSwitch
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
from reactq.worker.agent.results import fit_context
from reactq.worker.agent.run_state import RunResult, RunState
from reactq.worker.agent.visible import DeltaBuffer, VisibleText
from reactq.worker.agent.windows import context_window_for, message_chars

__all__ = ["ModelCalls"]

log = logging.getLogger("reactq.agent")


class ModelCalls(RunState):
    """The model calls of a run (a base of ``Run``)."""

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

    async def _retry(self, failed: LLMResponse, reminder: str) -> LLMResponse:
        """Ask once more with a reminder; neither the failed answer nor it is kept."""
        extra: list[dict[str, Any]] = []
        if (failed.content or "").strip():
            extra.append({"role": "assistant", "content": failed.content})
        extra.append({"role": "user", "content": reminder})
        return await self._ask(self.loop.tools, extra)

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

    async def _count_aside(self, response: LLMResponse, model: str) -> None:
        """Meter a call the counter did not estimate (a classifier's): no calibration."""
        sent, self.sent = self.sent, (0, 0)
        try:
            await self._count(response, model)
        finally:
            self.sent = sent

    async def _guard(
        self, stage: Stage, guardrails: Sequence[Guardrail | GuardrailCheck], text: str
    ) -> GuardrailBlockedError | None:
        checker = Guardrails(
            self.emitter, self.context, self.models.llm, self.models.model, self._count_aside
        )
        return await checker.check(stage, as_guardrails(f"{stage}_guardrails", guardrails), text)

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
