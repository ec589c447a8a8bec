"""Step checkpoints in the StateStore contract, on every backend: fenced, kept apart
from the conversation, replaced step by step, dropped by the turn's commit."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import update

from reactq.shared.errors import StaleLeaseError, TurnCommittedError
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.state import StateStore, TurnCheckpoint
from reactq.shared.state.sql.schema import sessions
from reactq.shared.state.sql.store import SqlStateStore
from tests.state_fixtures import (  # noqa: F401 - the fixtures register by import
    contents,
    record,
    sid,
    store_fixture,
    url_fixture,
    user,
)


def steps(n: int, turn_id: str) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for i in range(1, n + 1):
        call = ToolCall(id=f"c{i}", name="bump", arguments=f'{{"n": {i}}}')
        out.append(ChatMessage(role="assistant", tool_calls=[call], turn_id=turn_id))
        out.append(
            ChatMessage(
                role="tool",
                content=f"odd \udc80 {i}\x00",
                tool_call_id=f"c{i}",
                name="bump",
                turn_id=turn_id,
            )
        )
    return out


def checkpoint(session_id: str, turn_id: str, n: int, **fields: object) -> TurnCheckpoint:
    return TurnCheckpoint(
        session_id=session_id, turn_id=turn_id, step=n, messages=steps(n, turn_id), **fields
    )  # type: ignore[arg-type]


async def test_checkpoints_are_replaced_and_kept_out_of_the_conversation(
    store: StateStore,
) -> None:
    s, t = sid(), "t-ck-1"
    await store.ensure_session(s, "a")
    await store.append(s, [user("before")])
    assert await store.get_checkpoint(s, t) is None
    await store.checkpoint_step(checkpoint(s, t, 1, attempt=1), fence=None)
    await store.checkpoint_step(checkpoint(s, t, 2, attempt=2, branch_id="trunk"))
    found = await store.get_checkpoint(s, t)
    assert found is not None
    assert (found.step, found.attempt, found.branch_id) == (2, 2, "trunk")
    assert found.messages == steps(2, t)  # odd text round-trips too
    assert found.updated_at > 0
    assert await contents(store, s) == [(1, "before")]
    assert await store.get_checkpoint("other", t) is None

    await store.discard_checkpoint(s, t)
    await store.discard_checkpoint(s, t)  # idempotent
    assert await store.get_checkpoint(s, t) is None


async def test_commit_drops_the_checkpoint_and_refuses_later_ones(store: StateStore) -> None:
    s, t = sid(), "t-ck-2"
    await store.ensure_session(s, "a")
    await store.checkpoint_step(checkpoint(s, t, 1))
    await store.commit_turn(s, [user("q"), *steps(1, t)], record(s, t))
    assert await store.get_checkpoint(s, t) is None
    with pytest.raises(TurnCommittedError):
        await store.checkpoint_step(checkpoint(s, t, 2))
    assert await store.get_checkpoint(s, t) is None


async def test_a_commit_told_the_steps_are_elsewhere_leaves_the_checkpoints(
    store: StateStore,
) -> None:
    """``drop_checkpoint=False`` (the worker pool keeps steps in Redis): the commit
    lands, fenced and once, and the store's checkpoints stay as they were."""
    s, t = sid(), "t-ck-keep"
    await store.begin_turn(s, "a", fence=2)
    await store.checkpoint_step(checkpoint(s, t, 1), fence=2)
    with pytest.raises(StaleLeaseError):
        await store.commit_turn(s, [user("q")], record(s, t), fence=1, drop_checkpoint=False)
    await store.commit_turn(s, [user("q")], record(s, t), fence=2, drop_checkpoint=False)
    with pytest.raises(TurnCommittedError):
        await store.commit_turn(s, [user("r")], record(s, t), fence=2, drop_checkpoint=False)
    assert await contents(store, s) == [(1, "q")]
    kept = await store.get_checkpoint(s, t)
    assert kept is not None and kept.step == 1
    await store.discard_checkpoint(s, t)
    assert await store.get_checkpoint(s, t) is None


async def test_checkpoints_are_fenced(store: StateStore) -> None:
    s, t = sid(), "t-ck-3"
    await store.ensure_session(s, "a")
    await store.claim(s, 5)
    await store.checkpoint_step(checkpoint(s, t, 1), fence=5)
    with pytest.raises(StaleLeaseError):
        await store.checkpoint_step(checkpoint(s, t, 2), fence=4)
    found = await store.get_checkpoint(s, t)
    assert found is not None and found.step == 1
    # A newer token moves the fence on, like a commit.
    await store.checkpoint_step(checkpoint(s, t, 2), fence=7)
    with pytest.raises(StaleLeaseError):
        await store.commit_turn(s, [user("q")], record(s, t), fence=6)
    info = await store.get_session(s)
    assert info is not None and info.fence == 7


async def test_a_checkpoint_waits_for_a_newer_holders_claim(store: StateStore) -> None:
    """SQL: a newer holder's claim, not yet committed, holds the session row; the old
    holder's checkpoint waits for it and is then refused (not written from what it
    read before the claim committed)."""
    if not isinstance(store, SqlStateStore):
        pytest.skip("a transaction held open on the SQL session row")
    s, t = sid(), "t-ck-4"
    await store.begin_turn(s, "a", fence=5)
    async with store.engine.connect() as conn:
        await conn.begin()
        await conn.execute(update(sessions).where(sessions.c.session_id == s).values(fence=6))
        waiting = asyncio.ensure_future(store.checkpoint_step(checkpoint(s, t, 1), fence=5))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await conn.commit()
    with pytest.raises(StaleLeaseError):
        await asyncio.wait_for(waiting, 10)
    assert await store.get_checkpoint(s, t) is None


# --- the runner: a checkpoint per step, resumed by the next attempt ------------------

from reactq.shared.bus import TurnEmitter  # noqa: E402
from reactq.shared.state.memory.store import MemoryStateStore  # noqa: E402
from reactq.worker import Agent, AgentRunner, LLMResponse, ScriptedLLM, ToolContext, tool  # noqa: E402
from tests.test_kernel_runner import ListBus  # noqa: E402

RAN: list[tuple[int, int, bool]] = []


@tool()
def bump(n: int, ctx: ToolContext) -> str:
    """Count a side effect."""
    RAN.append((n, ctx.attempt, ctx.resumed))
    return f"bumped {n}"


BUMPER = Agent(name="bumper", model="m", tools=[bump])


def call(i: int) -> LLMResponse:
    return LLMResponse(tool_calls=[ToolCall(id=f"c{i}", name="bump", arguments=f'{{"n": {i}}}')])


class Recording(MemoryStateStore):
    def __init__(self) -> None:
        super().__init__()
        self.saved: list[tuple[int, list[str]]] = []

    async def checkpoint_step(self, checkpoint: TurnCheckpoint, fence: int | None = None) -> None:
        self.saved.append((checkpoint.step, [m.role for m in checkpoint.messages]))
        await super().checkpoint_step(checkpoint, fence)


async def turn(runner: AgentRunner, bus: ListBus, attempt: int, **kw: object) -> object:
    emitter = TurnEmitter(bus, "s1", "t-run", attempt=attempt)  # type: ignore[arg-type]
    return await runner.run_turn(
        session_id="s1", message="go", turn_id="t-run", emitter=emitter, fence=1, **kw
    )  # type: ignore[arg-type]


async def test_every_step_is_checkpointed_and_the_commit_drops_them() -> None:
    RAN.clear()
    store = Recording()
    runner = AgentRunner(
        BUMPER.build_loop(ScriptedLLM([call(1), call(2), "done"])), store, "bumper"
    )
    final = await turn(runner, ListBus(), 1)
    assert final.status == "completed"  # type: ignore[attr-defined]
    assert store.saved == [
        (0, ["assistant"]),  # the reply, before its tool runs
        (1, ["assistant", "tool"]),
        (1, ["assistant", "tool", "assistant"]),
        (2, ["assistant", "tool", "assistant", "tool"]),
    ]
    assert await store.get_checkpoint("s1", "t-run") is None
    assert [m.role for m in await store.get_messages("s1")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]


async def test_a_resumed_attempt_runs_only_what_has_no_result() -> None:
    RAN.clear()
    store = MemoryStateStore()
    await store.ensure_session("s1", "bumper")
    # Attempt 1 died while the third call ran: two steps complete, one reply waiting.
    steps_done = steps(2, "t-run")
    for m in steps_done:
        if m.role == "tool":
            object.__setattr__(m, "content", "ok")
    reply = call(3).tool_calls or []
    waiting = [*steps_done, ChatMessage(role="assistant", tool_calls=reply, turn_id="t-run")]
    await store.checkpoint_step(
        TurnCheckpoint(session_id="s1", turn_id="t-run", step=2, messages=waiting), fence=1
    )
    saved = await store.get_checkpoint("s1", "t-run")
    llm = ScriptedLLM(["all done"])
    runner = AgentRunner(BUMPER.build_loop(llm), store, "bumper")
    bus = ListBus()
    final = await turn(runner, bus, 2, checkpoint=saved)
    assert final.status == "completed"  # type: ignore[attr-defined]
    assert RAN == [(3, 2, True)]  # calls 1 and 2 had results: not run again
    assert len(llm.calls) == 1  # the model is asked only after the resumed call
    history = await store.get_messages("s1")
    assert [m.role for m in history] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert await store.get_checkpoint("s1", "t-run") is None
    assert sum(e.type == "final" for e in bus.events) == 1  # type: ignore[attr-defined]


async def test_a_cancelled_turn_leaves_no_steps_behind() -> None:
    RAN.clear()
    store = MemoryStateStore()
    stop = {"now": False}

    @tool()
    def halt() -> str:
        """Ask for a cancel."""
        stop["now"] = True
        return "halting"

    agent = Agent(name="bumper", model="m", tools=[bump, halt])
    halt_call = LLMResponse(tool_calls=[ToolCall(id="h", name="halt", arguments="{}")])
    llm = ScriptedLLM([call(1), halt_call, "never"])
    runner = AgentRunner(agent.build_loop(llm), store, "bumper")
    final = await turn(runner, ListBus(), 1, cancel=lambda: stop["now"])
    assert final.status == "cancelled"  # type: ignore[attr-defined]
    assert await store.get_checkpoint("s1", "t-run") is None
    assert await store.get_messages("s1") == []


# --- approvals in the kernel: a run that cannot wait denies; one that can, stops ----

from reactq.shared.protocol.approvals import Decision  # noqa: E402
from reactq.worker import ToolMode  # noqa: E402
from reactq.worker.agent.run import CANNOT_WAIT  # noqa: E402
from reactq.worker.agent.suspend import AwaitingApproval  # noqa: E402

PAID: list[int] = []


@tool(requires_approval=True)
def pay(amount: int) -> str:
    """Pay (needs a person)."""
    PAID.append(amount)
    return f"paid {amount}"


def pay_call(i: int = 1) -> LLMResponse:
    return LLMResponse(
        tool_calls=[
            ToolCall(id=f"p{i}", name="pay", arguments='{"amount": 5}'),
            ToolCall(id=f"b{i}", name="bump", arguments='{"n": 9}'),
        ]
    )


async def test_a_run_that_cannot_wait_denies_calls_that_need_a_person() -> None:
    PAID.clear()
    agent = Agent(name="payer", model="m", tools=[pay, bump])
    llm = ScriptedLLM([pay_call(), "done"])
    runner = AgentRunner(agent.build_loop(llm), MemoryStateStore(), "payer")
    final = await turn(runner, ListBus(), 1)
    assert final.status == "completed"  # type: ignore[attr-defined]
    assert PAID == []
    tool_results = [m["content"] for m in llm.calls[1].messages if m["role"] == "tool"]
    assert tool_results == [f"[tool_denied] the call was denied: {CANNOT_WAIT}", "bumped 9"]


async def test_a_policy_or_the_tool_parks_the_run_and_decisions_resume_it() -> None:
    PAID.clear()
    RAN.clear()
    asked: list[tuple[str, dict[str, object]]] = []

    def policy(name: str, args: dict[str, object], ctx: ToolContext) -> bool:
        asked.append((name, args))
        return name == "bump"

    agent = Agent(name="payer", model="m", tools=[pay, bump], approval=policy)
    store = MemoryStateStore()
    runner = AgentRunner(agent.build_loop(ScriptedLLM([pay_call()])), store, "payer")
    with pytest.raises(AwaitingApproval) as parked:
        await turn(runner, ListBus(), 1, decisions={})
    assert [c.id for c in parked.value.calls] == ["p1", "b1"]
    assert asked == [("bump", {"n": 9})]  # pay needs no asking: the tool says so
    saved = await store.get_checkpoint("s1", "t-run")
    assert saved is not None and saved.step == 0
    assert [m.role for m in saved.messages] == ["assistant"]
    assert await store.get_messages("s1") == []

    llm = ScriptedLLM(["done"])
    runner = AgentRunner(agent.build_loop(llm), store, "payer")
    decisions = {
        "p1": Decision("p1", True, "ok", "alice"),
        "b1": Decision("b1", False, "not that one", "bob"),
    }
    bus = ListBus()
    final = await turn(runner, bus, 2, checkpoint=saved, decisions=decisions)
    assert final.status == "completed"  # type: ignore[attr-defined]
    assert PAID == [5] and RAN == []
    tool_results = [m["content"] for m in llm.calls[0].messages if m["role"] == "tool"]
    assert tool_results == ["paid 5", "[tool_denied] the call was denied: not that one"]
    assert await store.get_checkpoint("s1", "t-run") is None


async def test_text_modes_cannot_wait_for_a_person() -> None:
    PAID.clear()
    agent = Agent(name="payer", model="m", tools=[pay], tool_mode=ToolMode.JSON)
    llm = ScriptedLLM(
        [
            '{"action": "tool", "tool": "pay", "args": {"amount": 5}}',
            '{"action": "final", "answer": "gave up"}',
        ]
    )
    runner = AgentRunner(agent.build_loop(llm), MemoryStateStore(), "payer")
    final = await turn(runner, ListBus(), 1, decisions={})
    assert final.status == "completed"  # type: ignore[attr-defined]
    assert PAID == []
    assert CANNOT_WAIT in str(llm.calls[1].messages[-1]["content"])
