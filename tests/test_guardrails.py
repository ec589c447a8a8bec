"""Guardrails (issue 15, item 5) in the kernel, through the real openai SDK on the
scripted server: input and output verdicts, a ``guardrail`` event per verdict, fail-open
and fail-closed on errors and timeouts, the classifier model call, and input guardrails
that race the first model call and cancel it on a block."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from reactq.shared.audit import AuditedBus, MemoryAuditSink
from reactq.shared.bus import TurnEmitter
from reactq.shared.turns import TurnStatus
from reactq.worker.agent import AgentLoop, LoopConfig
from reactq.worker.agent.guardrails import Guardrail, GuardrailResult
from reactq.worker.agent.llm.scripted_server import Reply
from reactq.worker.agent.tools import ToolContext
from reactq.worker.definitions import Agent
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user

TURN = ToolContext(session_id="s1", turn_id="t1", context={"tenant": "acme"})


async def no_secrets(text: str, turn: ToolContext) -> GuardrailResult:
    if "secret" in text:
        return GuardrailResult.block("mentions a secret", refusal="I cannot help with that.")
    return GuardrailResult.allow()


async def run(config: LoopConfig, *replies: Reply, bus: Any = None) -> tuple[Any, Any, Any]:
    bus = bus if bus is not None else ListBus()
    async with endpoint(scripted(*replies)) as (server, llm):
        result = await AgentLoop(llm, config=config).run(
            [user("hello")], emitter_for(bus), context=TURN
        )
    return result, bus, server


async def test_allowed_input_and_output_each_publish_a_verdict() -> None:
    seen: list[tuple[str, Any]] = []

    async def watch(text: str, turn: ToolContext) -> bool:
        seen.append((text, turn.context.get("tenant")))
        return True

    config = LoopConfig(input_guardrails=[watch], output_guardrails=[no_secrets])
    result, bus, _ = await run(config, Reply.text("Hi there."))
    assert (result.status, result.text) == (TurnStatus.COMPLETED, "Hi there.")
    assert seen == [("hello", "acme")]
    verdicts = bus.of("guardrail")
    assert [(v.name, v.stage, v.allowed) for v in verdicts] == [
        ("watch", "input", True),
        ("no_secrets", "output", True),
    ]
    assert all(v.duration >= 0 and v.failed is None for v in verdicts)


async def test_a_blocked_input_ends_the_turn_before_the_model_is_asked() -> None:
    config = LoopConfig(input_guardrails=[no_secrets])
    bus = ListBus()
    async with endpoint(scripted(Reply.text("leak"))) as (server, llm):
        result = await AgentLoop(llm, config=config).run(
            [user("tell me the secret")], emitter_for(bus), context=TURN
        )
    assert (result.status, result.text) == (TurnStatus.BLOCKED, "I cannot help with that.")
    assert result.error is not None and result.error.code == "guardrail_blocked"
    assert server.requests == []
    (verdict,) = bus.of("guardrail")
    assert (verdict.stage, verdict.allowed, verdict.reason) == (
        "input",
        False,
        "mentions a secret",
    )
    assert result.messages == []  # nothing of the turn is kept in the conversation


async def test_a_blocked_output_is_replaced_and_the_original_kept_only_in_the_audit() -> None:
    stream = ListBus()
    sink = MemoryAuditSink()
    bus = AuditedBus(stream, sink)  # type: ignore[arg-type]
    config = LoopConfig(output_guardrails=[no_secrets])
    async with endpoint(scripted(Reply.text("the secret is 42"))) as (_, llm):
        result = await AgentLoop(llm, config=config).run(
            [user("hi")], TurnEmitter(bus, "s1", "t1"), context=TURN
        )
    assert (result.status, result.text) == (TurnStatus.BLOCKED, "I cannot help with that.")
    assert result.messages[-1].content == "I cannot help with that."
    assert not any("secret is 42" in e.model_dump_json() for e in stream.events)
    (audited,) = [e for e in sink.events if e.type == "guardrail"]
    assert audited.original == "the secret is 42"
    (shown,) = stream.of("guardrail")
    assert shown.original is None and shown.id == audited.id


async def test_a_guardrail_that_raises_fails_open_or_closed_as_configured() -> None:
    async def broken(text: str, turn: ToolContext) -> bool:
        raise RuntimeError("classifier down")

    lenient = Guardrail(broken, name="lenient", fail_open=True)
    result, bus, _ = await run(LoopConfig(input_guardrails=[lenient]), Reply.text("ok"))
    assert result.status is TurnStatus.COMPLETED
    (verdict,) = bus.of("guardrail")
    assert (verdict.allowed, verdict.failed) == (True, "error")
    assert "classifier down" in verdict.reason

    strict = Guardrail(broken, name="strict")  # fail-closed is the default
    result, bus, server = await run(LoopConfig(input_guardrails=[strict]), Reply.text("ok"))
    assert result.status is TurnStatus.BLOCKED and server.requests == []
    (verdict,) = bus.of("guardrail")
    assert (verdict.allowed, verdict.failed) == (False, "error")


async def test_a_guardrail_past_its_timeout_counts_as_failed() -> None:
    async def slow(text: str, turn: ToolContext) -> bool:
        await asyncio.sleep(30)
        return True

    started = time.monotonic()
    closed = Guardrail(slow, name="slow", timeout=0.1)
    result, bus, _ = await run(LoopConfig(output_guardrails=[closed]), Reply.text("answer"))
    assert result.status is TurnStatus.BLOCKED
    assert bus.of("guardrail")[0].failed == "timeout"
    opened = Guardrail(slow, name="slow", timeout=0.1, fail_open=True)
    result, bus, _ = await run(LoopConfig(output_guardrails=[opened]), Reply.text("answer"))
    assert (result.status, result.text) == (TurnStatus.COMPLETED, "answer")
    assert time.monotonic() - started < 5


async def test_a_parallel_input_block_cancels_the_first_model_call() -> None:
    async def slow_block(text: str, turn: ToolContext) -> GuardrailResult:
        await asyncio.sleep(0.3)
        return GuardrailResult.block("off topic")

    config = LoopConfig(input_guardrails=[slow_block], guardrails_parallel=True)
    started = time.monotonic()
    result, bus, server = await run(config, Reply.text("slow answer").but(delay=10))
    assert result.status is TurnStatus.BLOCKED
    assert time.monotonic() - started < 5  # the 10 s call was cancelled
    assert len(server.requests) == 1  # it had started: the race was real
    assert "usage" not in bus.types()


async def test_a_parallel_input_allow_waits_for_the_verdict_before_answering() -> None:
    async def slow_allow(text: str, turn: ToolContext) -> bool:
        await asyncio.sleep(0.3)
        return True

    config = LoopConfig(input_guardrails=[slow_allow], guardrails_parallel=True)
    result, bus, _ = await run(config, Reply.text("fast answer"))
    assert (result.status, result.text) == (TurnStatus.COMPLETED, "fast answer")
    assert bus.types().index("guardrail") < bus.types().index("usage")


async def test_a_classifier_guardrail_asks_the_agent_model() -> None:
    classifier = Guardrail.model(prompt="Block anything about weapons.", name="weapons")
    config = LoopConfig(input_guardrails=[classifier])
    bus = ListBus()
    verdict_json = '{"allowed": false, "reason": "weapons"}'
    async with endpoint(scripted(Reply.text(verdict_json))) as (server, llm):
        result = await AgentLoop(llm, config=config).run(
            [user("how to build a cannon")], emitter_for(bus), context=TURN
        )
    assert result.status is TurnStatus.BLOCKED
    (request,) = server.requests
    assert "Block anything about weapons." in request["messages"][0]["content"]
    assert "how to build a cannon" in request["messages"][-1]["content"]
    assert bus.of("guardrail")[0].reason == "weapons"


def test_guardrails_are_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="input_guardrails"):
        LoopConfig(input_guardrails=["nope"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="timeout"):
        Guardrail(no_secrets, timeout=0)
    with pytest.raises(ValueError, match="guardrails_parallel"):
        LoopConfig(guardrails_parallel=True)
    agent = Agent(name="g", input_guardrails=[no_secrets], guardrails_parallel=True)
    assert agent.loop.guardrails_parallel
