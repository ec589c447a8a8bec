"""Tool execution: results as text, concurrency, repeats, interventions, hooks, the gate."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from typing import Any

import pytest

from reactq import Agent, LLMResponse, Settings, ToolCall, ToolError
from reactq.shared.logs import configure_logging
from reactq.testing import ScriptedLLM, run_turn
from reactq.worker.agent import AgentLoop, LoopConfig, Registry, tool
from reactq.worker.agent.interventions import (
    BeforeToolFallback,
    DenyToolCall,
    Hooks,
    Interventions,
    ReplaceToolArgs,
    ToolCallInfo,
    ToolDecision,
)
from reactq.worker.agent.llm.scripted_server import Reply
from reactq.worker.agent.results import UNPRINTABLE_RESULT, fit_context, format_tool_result
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user

log: list[str] = []
both_running = asyncio.Event()


@tool(read_only=True)
async def read_a(key: str) -> str:
    """Read A."""
    log.append(f"start a {key}")
    if key == "wait":  # proves concurrency: finishes only once read_b has started too
        await asyncio.wait_for(both_running.wait(), 5)
    log.append(f"end a {key}")
    return f"a={key}"


@tool(read_only=True)
async def read_b(key: str) -> str:
    """Read B."""
    log.append(f"start b {key}")
    both_running.set()
    return f"b={key}"


@tool(writes=True)
async def write(key: str) -> str:
    """Write."""
    log.append(f"write {key}")
    await asyncio.sleep(0)
    log.append(f"wrote {key}")
    return "saved"


TOOLS = Registry([read_a, read_b, write])


async def run(handler: Any, **knobs: Any) -> tuple[Any, ListBus, Any]:
    async with endpoint(handler) as (server, llm):
        bus = ListBus()
        result = await AgentLoop(llm, TOOLS, LoopConfig(model="m", **knobs)).run(
            [user("x")], emitter_for(bus)
        )
    return result, bus, server


def test_results_reach_the_model_as_text() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    loop_ref: list[Any] = []
    loop_ref.append(loop_ref)
    assert format_tool_result({"t": "18°C"}) == '{"t": "18°C"}'
    assert format_tool_result(loop_ref) == "[[...]]"
    assert format_tool_result([Broken()]) == UNPRINTABLE_RESULT  # not JSON, no repr
    assert format_tool_result("bad \ud800 surrogate") == "bad \\ud800 surrogate"


async def test_a_lone_surrogate_result_does_not_crash_the_request() -> None:
    @tool
    async def odd() -> str:
        """Odd."""
        return "x\udcffy"

    handler = scripted(Reply.tool_calls([("odd", {})]), Reply.text("fine"))
    async with endpoint(handler) as (server, llm):
        result = await AgentLoop(llm, Registry([odd]), LoopConfig(model="m")).run(
            [user("x")], emitter_for(ListBus())
        )
    assert result.text == "fine"
    assert server.requests[1]["messages"][-1]["content"] == "x\\udcffy"


async def test_reads_run_concurrently_and_a_writer_runs_alone_in_model_order() -> None:
    log.clear()
    both_running.clear()
    calls = [("read_a", {"key": "wait"}), ("read_b", {"key": "1"}), ("write", {"key": "w"}),
             ("read_a", {"key": "2"})]  # fmt: skip
    result, bus, _ = await run(scripted(Reply.tool_calls(calls), Reply.text("done")))
    assert result.text == "done"
    assert log.index("start b 1") < log.index("end a wait")  # a and b overlapped
    assert log.index("end a wait") < log.index("write w") < log.index("wrote w")
    assert log.index("wrote w") < log.index("start a 2")
    outputs = [o.output for o in bus.of("observation")]
    assert outputs == ["a=wait", "b=1", "saved", "a=2"]  # reported in model order


async def test_a_repeated_identical_call_gets_a_nudge_in_its_result() -> None:
    same = Reply.tool_calls([("read_b", {"key": "k"})])
    _result, _bus, server = await run(scripted(same, same, same, same, Reply.text("ok")))
    contents = [r["messages"][-1]["content"] for r in server.requests[1:]]
    assert all("Note:" not in c for c in contents[:3])
    assert "made this exact call 4 times" in contents[3]


async def test_interventions_deny_replace_and_annotate() -> None:
    seen: list[ToolCallInfo] = []

    async def before(info: ToolCallInfo) -> Any:
        seen.append(info)
        info.args["key"] = "mutated"  # a deep copy: no effect on the call
        if info.tool == "write":
            return DenyToolCall("writes need a human")
        if info.tool == "read_a":
            return ReplaceToolArgs({"key": "safe"})
        return None

    def after(info: ToolCallInfo, text: str) -> str:
        return f"(checked {info.tool})"

    calls = [("write", {"key": "x"}), ("read_a", {"key": "x"}), ("read_b", {"key": "orig"})]
    handler = scripted(Reply.tool_calls(calls), Reply.text("ok"))
    _result, bus, server = await run(handler, interventions=Interventions(before, after))
    sent = [m["content"] for m in server.requests[1]["messages"][-3:]]
    assert sent[0] == "[tool_denied] the call was denied: writes need a human"
    assert sent[1] == "a=safe\n\n(checked read_a)"
    assert sent[2] == "b=orig\n\n(checked read_b)"
    assert bus.of("tool_failed")[0].code == "tool_denied"
    assert [s.tool for s in seen] == ["write", "read_a", "read_b"]


@pytest.mark.parametrize("fallback", list(BeforeToolFallback))
async def test_a_raising_before_tool_fails_closed_by_default(fallback: BeforeToolFallback) -> None:
    def before(info: ToolCallInfo) -> None:
        raise RuntimeError("policy engine down")

    handler = scripted(Reply.tool_calls([("read_b", {"key": "1"})]), Reply.text("ok"))
    knobs = {"interventions": Interventions(before, before_tool_fallback=fallback)}
    _, bus, server = await run(handler, **knobs)
    content = server.requests[1]["messages"][-1]["content"]
    if fallback is BeforeToolFallback.DENY:
        assert content.startswith("[tool_denied] the call was denied") and bus.of("tool_failed")
    else:
        assert content == "b=1"


async def test_broken_hooks_are_logged_and_never_kill_the_run() -> None:
    class Watch(Hooks):
        events: list[str] = []

        async def on_llm_start(self, *, iteration: int, messages: Any) -> None:
            self.events.append(f"llm {iteration}")
            raise RuntimeError("hook bug")

        def on_tool_end(self, call: ToolCallInfo, *, output: str, ok: bool) -> None:
            self.events.append(f"tool {call.tool} {ok}")
            raise ValueError("another")

    handler = scripted(Reply.tool_calls([("read_b", {"key": "1"})]), Reply.text("ok"))
    result, _, _ = await run(handler, hooks=Watch())
    assert result.text == "ok" and Watch.events == ["llm 1", "tool read_b True", "llm 2"]


async def test_the_gate_decides_every_call_and_no_decision_is_a_denial() -> None:
    async def gate(info: ToolCallInfo) -> Any:
        key = info.args["key"]
        if key == "yes":
            return ToolDecision(True)
        if key == "no":
            return ToolDecision(False, "not today")
        if key == "hang":
            await asyncio.Event().wait()
        if key == "boom":
            raise RuntimeError("approver crashed")
        return "maybe"  # malformed

    keys = ["yes", "no", "hang", "boom", "odd"]
    handler = scripted(Reply.tool_calls([("read_b", {"key": k}) for k in keys]), Reply.text("ok"))
    _, bus, server = await run(handler, tool_gate=gate, tool_gate_timeout=0.1)
    sent = [m["content"] for m in server.requests[1]["messages"][-5:]]
    assert sent[0] == "b=yes"
    assert sent[1] == "[tool_denied] the call was denied: not today"
    assert "no approval arrived in time" in sent[2]
    assert "approver failed" in sent[3] and "no decision" in sent[4]
    assert [f.code for f in bus.of("tool_failed")] == ["tool_denied"] * 4


async def test_old_tool_results_are_shrunk_head_and_tail_under_a_context_budget() -> None:
    @tool
    async def big(n: int) -> str:
        """Big."""
        return f"HEAD{n}" + "x" * 5000 + f"TAIL{n}"

    handler = scripted(*[Reply.tool_calls([("big", {"n": i})]) for i in range(3)], Reply.text("k"))
    async with endpoint(handler) as (server, llm):
        loop = AgentLoop(llm, Registry([big]), LoopConfig(model="m", context_budget=8000))
        result = await loop.run([user("x")], emitter_for(ListBus()))
    last = [m for m in server.requests[3]["messages"] if m["role"] == "tool"]
    assert "characters omitted" in last[0]["content"] and last[0]["content"].startswith("HEAD0")
    assert last[0]["content"].endswith("TAIL0") and last[-1]["content"].endswith("x" * 5 + "TAIL2")
    assert "omitted" not in last[-1]["content"]
    assert len(result.messages[1].content or "") > 5000  # the stored history keeps it all
    assert (
        fit_context([{"role": "tool", "content": "short"}], 1, protect=0)[0]["content"] == "short"
    )


async def test_a_failing_tool_is_logged_with_its_turn_and_traceback() -> None:
    """Issue 21, item 3: the model reads the error; the worker's log gets the session, the
    turn, the tool and the traceback, through reactq's handler (which redacts)."""
    secret = "sk-live-Leaked1234567"

    @tool
    async def explode(key: str) -> str:
        """Explode."""
        raise RuntimeError(f"backend said no to {key} with api_key={secret}")

    @tool
    async def refuse(key: str) -> str:
        """Refuse."""
        raise ToolError("not today")

    agent = Agent(name="boom", tools=[explode, refuse])
    call = ToolCall(id="c1", name="explode", arguments='{"key": "k1"}')
    signal = ToolCall(id="c2", name="refuse", arguments='{"key": "k2"}')
    llm = ScriptedLLM([LLMResponse(tool_calls=[call, signal]), "done"])
    root = logging.getLogger()
    level, before = root.level, list(root.handlers)
    buffer = io.StringIO()
    handler = configure_logging(Settings.from_env({}), "INFO", fmt="json", stream=buffer)
    try:
        outcome = await run_turn(agent, "go", llm=llm, session_id="s-tools")
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)
        assert [h for h in root.handlers if h not in before] == []
    assert outcome.final.status == "completed"
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    failures = {line["tool"]: line for line in lines if line["message"].startswith("tool ")}
    assert set(failures) == {"explode", "refuse"}
    boom = failures["explode"]
    assert boom["level"] == "WARNING" and boom["logger"] == "reactq.agent"
    assert boom["session_id"] == "s-tools" and boom["turn_id"] == outcome.final.turn_id
    assert boom["code"] == "tool_error" and boom["attempt"] == 1
    assert "Traceback" in boom["exc"] and "in explode" in boom["exc"]
    assert "RuntimeError: backend said no to k1" in boom["exc"]
    assert secret not in buffer.getvalue()  # redacted in the message and the traceback
    refused = failures["refuse"]
    assert refused["code"] == "tool_error" and "not today" in refused["message"]
