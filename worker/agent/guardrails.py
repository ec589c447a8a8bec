"""Guardrails: checks on a turn's input and its final answer that may block either.

``Agent(input_guardrails=[...], output_guardrails=[...])`` takes async callables
``check(text, turn) -> GuardrailResult | bool`` (``turn`` is the turn's ToolContext:
``turn.context``, ``turn.metadata``, ``turn.session_id``), ``Guardrail`` wrappers that
set a name, a timeout and fail-open, or ``Guardrail.model(prompt=...)``: a classifier
call to the agent's own model client. Every verdict is a ``guardrail`` event.

A guardrail that raises or runs past its ``timeout`` fails closed (blocks) unless it
is ``fail_open``. A blocked input ends the turn with status ``blocked`` before the
model reads it; the user message is not committed (a later turn must not replay
what was refused to the model), and the audit log keeps it (the turn's ``queued``
event). A blocked answer is replaced by the refusal; the original goes to the audit
log only, on that log's copy of the ``guardrail`` event (``original``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from reactq.shared.bus import TurnEmitter
from reactq.shared.errors import AgentRunError
from reactq.shared.events import GuardrailEvent
from reactq.worker.agent.llm.base import LLMClient, LLMResponse, RequestOptions
from reactq.worker.agent.parsers import find_json_object
from reactq.worker.agent.tools import ToolContext

if TYPE_CHECKING:
    from reactq.shared.audit import AuditedBus

__all__ = [
    "DEFAULT_REFUSAL",
    "Guardrail",
    "GuardrailBlockedError",
    "GuardrailCheck",
    "GuardrailResult",
    "Guardrails",
    "Stage",
]

Stage = Literal["input", "output"]
DEFAULT_REFUSAL = "Sorry, I can't help with that request."
CLASSIFIER_INSTRUCTIONS = (
    "You are a guardrail. Judge the text the user gives you by the policy above. Answer "
    'with only a JSON object: {"allowed": true or false, "reason": "<one short sentence>"}.'
)


@dataclass(frozen=True)
class GuardrailResult:
    """A guardrail's verdict."""

    allowed: bool
    """False blocks the input or the answer."""
    reason: str | None = None
    """Why (shown on the ``guardrail`` event)."""
    refusal: str | None = None
    """What the user reads instead, on a block; None: the guardrail's own ``refusal``."""

    @classmethod
    def allow(cls, reason: str | None = None) -> GuardrailResult:
        """Let the text through."""
        return cls(True, reason)

    @classmethod
    def block(cls, reason: str, refusal: str | None = None) -> GuardrailResult:
        """Refuse the text, saying why."""
        return cls(False, reason, refusal)


GuardrailCheck = Callable[[str, ToolContext], Awaitable[GuardrailResult | bool]]
"""``check(text, turn) -> GuardrailResult | bool``: True allows, False blocks."""


class GuardrailBlockedError(AgentRunError):
    """A guardrail refused the turn's input or its final answer (status ``blocked``)."""

    code = "guardrail_blocked"


@dataclass(frozen=True)
class Guardrail:
    """One guardrail: its check, and what happens when the check fails."""

    check: GuardrailCheck | None
    """The async callable; None for a classifier (``Guardrail.model``)."""
    name: str = ""
    """Its name on the ``guardrail`` event; "": the check's function name."""
    timeout: float | None = 10.0
    """Seconds the check may take (then it failed); None: no limit."""
    fail_open: bool = False
    """On an error or a timeout: True allows, False (the default) blocks."""
    refusal: str = DEFAULT_REFUSAL
    """What the user reads when this guardrail blocks."""
    prompt: str | None = None
    """A classifier's policy (``Guardrail.model``)."""
    classifier_model: str | None = None
    """The classifier's model; None: the turn's current model."""

    def __post_init__(self) -> None:
        if self.check is None and not self.prompt:
            raise ValueError("a Guardrail needs a check function, or Guardrail.model(prompt=...)")
        if self.check is not None and not callable(self.check):
            raise ValueError(f"a Guardrail's check must be an async callable, got {self.check!r}")
        timeout = self.timeout
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise ValueError(f"a Guardrail's timeout must be > 0 seconds or None, got {timeout!r}")
        if not isinstance(self.refusal, str) or not self.refusal:
            raise ValueError("a Guardrail's refusal must be a non-empty string")
        if not self.name:
            fallback = "classifier" if self.check is None else self.check.__name__
            object.__setattr__(self, "name", getattr(self.check, "__name__", None) or fallback)

    @classmethod
    def model(
        cls,
        prompt: str,
        *,
        model: str | None = None,
        name: str = "classifier",
        timeout: float | None = 30.0,
        fail_open: bool = False,
        refusal: str = DEFAULT_REFUSAL,
    ) -> Guardrail:
        """A classifier: the agent's model client is asked, with ``prompt`` as the policy,
        whether the text is allowed (a JSON verdict; an unreadable one is a failure)."""
        return cls(
            None,
            name=name,
            timeout=timeout,
            fail_open=fail_open,
            refusal=refusal,
            prompt=prompt,
            classifier_model=model,
        )


def as_guardrails(knob: str, items: object) -> tuple[Guardrail, ...]:
    """``items`` as Guardrails (a callable is wrapped); ValueError names ``knob``."""
    if isinstance(items, str) or not isinstance(items, Sequence):
        raise ValueError(f"{knob} must be a list of guardrails, got {items!r}")
    found: list[Guardrail] = []
    for item in items:
        if isinstance(item, Guardrail):
            found.append(item)
        elif callable(item):
            found.append(Guardrail(cast(GuardrailCheck, item)))  # Guardrail checks it
        else:
            raise ValueError(
                f"{knob}: {item!r} is neither a Guardrail nor an async callable (text, turn)"
            )
    return tuple(found)


@dataclass(frozen=True)
class _Verdict:
    guardrail: Guardrail
    result: GuardrailResult
    duration: float
    failed: Literal["error", "timeout"] | None


class Guardrails:
    """Runs one stage's guardrails for one run, concurrently, and publishes the verdicts.

    ``llm`` and ``model`` are the turn's current client and model (for classifiers);
    ``on_usage`` meters a classifier's call.
    """

    def __init__(
        self,
        emitter: TurnEmitter,
        turn: ToolContext,
        llm: LLMClient,
        model: str,
        on_usage: Callable[[LLMResponse, str], Awaitable[None]],
    ) -> None:
        self.emitter = emitter
        self.turn = turn
        self.llm = llm
        self.model = model
        self.on_usage = on_usage

    async def check(
        self, stage: Stage, guardrails: Sequence[Guardrail], text: str
    ) -> GuardrailBlockedError | None:
        """Run every guardrail of ``stage`` on ``text``; the first block (in order), if any.

        A blocked answer's text goes to the audit log only (``original``)."""
        verdicts = await asyncio.gather(*(self._one(g, text) for g in guardrails))
        blocked: GuardrailBlockedError | None = None
        for verdict in verdicts:
            result = verdict.result
            original = text if stage == "output" and not result.allowed else None
            await self._publish(stage, verdict, original)
            if not result.allowed and blocked is None:
                refusal = result.refusal or verdict.guardrail.refusal
                blocked = GuardrailBlockedError(
                    refusal,
                    guardrail=verdict.guardrail.name,
                    stage=stage,
                    reason=result.reason,
                )
        return blocked

    async def _one(self, guardrail: Guardrail, text: str) -> _Verdict:
        started = time.monotonic()
        failed: Literal["error", "timeout"] | None = None
        try:
            call = self._call(guardrail, text)
            raw = await asyncio.wait_for(call, guardrail.timeout)
            result = _as_result(raw)
        except TimeoutError:
            failed = "timeout"
            why = f"no verdict within {guardrail.timeout} s"
            result = GuardrailResult(guardrail.fail_open, why)
        except Exception as exc:
            failed = "error"
            why = f"the guardrail failed: {type(exc).__name__}: {exc}"
            result = GuardrailResult(guardrail.fail_open, why)
        return _Verdict(guardrail, result, time.monotonic() - started, failed)

    async def _call(self, guardrail: Guardrail, text: str) -> GuardrailResult | bool:
        if guardrail.check is not None:
            return await guardrail.check(text, self.turn)
        model = guardrail.classifier_model or self.model
        messages = [
            {"role": "system", "content": f"{guardrail.prompt}\n\n{CLASSIFIER_INSTRUCTIONS}"},
            {"role": "user", "content": text},
        ]
        response = await self.llm.complete(
            messages, model=model, tools=None, options=RequestOptions(temperature=0.0)
        )
        await self.on_usage(response, model)
        verdict = find_json_object(response.content or "")
        if verdict is None or not isinstance(verdict.get("allowed"), bool):
            raise ValueError(f"the classifier answered no verdict: {response.content!r:.200}")
        reason = verdict.get("reason")
        return GuardrailResult(verdict["allowed"], str(reason) if reason is not None else None)

    async def _publish(self, stage: Stage, verdict: _Verdict, original: str | None) -> None:
        fields: dict[str, Any] = {
            "name": verdict.guardrail.name,
            "stage": stage,
            "allowed": verdict.result.allowed,
            "reason": verdict.result.reason,
            "duration": round(verdict.duration, 6),
            "failed": verdict.failed,
        }
        audited = _audited(self.emitter.bus) if original is not None else None
        if audited is None:
            # Without an audit log the blocked answer is kept nowhere.
            await self.emitter.emit(GuardrailEvent, **fields)
            return
        # The stream (what a UI shows) gets the verdict through the bus under the audit;
        # the audit log's copy alone carries the original.
        await self.emitter.flush()
        stream = TurnEmitter(
            audited.bus,
            self.emitter.session_id,
            self.emitter.turn_id,
            self.emitter.attempt,
            self.emitter.seq,
        )
        published = await stream.emit(GuardrailEvent, **fields)
        self.emitter.seq = stream.seq
        await audited.sink.record(published.model_copy(update={"original": original}))


def _audited(bus: object) -> AuditedBus | None:
    """The AuditedBus under ``bus`` (which may wrap it), if there is one."""
    # Here, not at the top: the audit log's module imports the SQL store, which an
    # agent's definition (``from reactq import Agent``) does not need.
    from reactq.shared.audit import AuditedBus

    for _ in range(4):
        if isinstance(bus, AuditedBus):
            return bus
        bus = getattr(bus, "bus", None)
        if bus is None:
            return None
    return None


def _as_result(raw: object) -> GuardrailResult:
    if isinstance(raw, GuardrailResult):
        return raw
    if isinstance(raw, bool):
        return GuardrailResult(raw)
    raise TypeError(f"a guardrail returned {raw!r}, not a GuardrailResult or a bool")
