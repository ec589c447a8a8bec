"""AgentRunner: history, commit, exactly one final, lost leases."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from reactq.shared.bus import TurnEmitter
from reactq.shared.errors import LLMServerError, StaleLeaseError, TurnCommittedError
from reactq.shared.events import BaseEvent
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.state import TRUNK, StateStore
from reactq.shared.state.base import TurnRecord, TurnStart
from reactq.shared.state.memory.store import MemoryStateStore
from reactq.shared.turns import TurnStatus
from reactq.worker import Agent, AgentRunner, LLMResponse, OpenAICompatibleClient, ScriptedLLM, tool
from reactq.worker.agent.llm.scripted_server import ScriptedServer, demo_model
from reactq.worker.agent.runner import INTERRUPTED_MESSAGE
from tests.state_fixtures import (  # noqa: F401 - the fixtures register by import
    contents,
    record,
    sid,
    store_fixture,
    url_fixture,
    user,
)


class ListBus:
    """The smallest event sink: remembers what was published."""

    def __init__(self) -> None:
        self.events: list[BaseEvent] = []

    async def publish(self, event: Any) -> Any:
        self.events.append(event)
        return event

    def types(self) -> list[str]:
        return [e.type for e in self.events]  # type: ignore[attr-defined]


class FailingStore(MemoryStateStore):
    """A store whose turn start (the history read) fails: a database outage."""

    async def begin_turn(
        self,
        session_id: str,
        agent: str,
        *,
        fence: int | None = None,
        branch_id: str | None = None,
    ) -> TurnStart:
        raise RuntimeError("database unavailable")


class CommitObserver(MemoryStateStore):
    """Records, at commit time, which events had been published."""

    def __init__(self, bus: ListBus) -> None:
        super().__init__()
        self.bus = bus
        self.events_at_commit: list[str] = []

    async def commit_turn(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        record: TurnRecord,
        fence: int | None = None,
        branch_id: str | None = None,
        **options: Any,
    ) -> None:
        self.events_at_commit = self.bus.types()
        await super().commit_turn(session_id, messages, record, fence, branch_id, **options)


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


AGENT = Agent(name="helper", model="m", tools=[lookup], error_fallback_message="sorry")


def tool_then_answer() -> ScriptedLLM:
    return ScriptedLLM(
        [
            LLMResponse(tool_calls=[ToolCall(id="c1", name="lookup", arguments='{"key": "k"}')]),
            "the value is known",
        ]
    )


async def run(
    runner: AgentRunner, bus: ListBus, turn_id: str, message: str = "hi", **kw: Any
) -> Any:
    emitter = TurnEmitter(bus, "s1", turn_id, attempt=kw.pop("attempt", 1))  # type: ignore[arg-type]
    return await runner.run_turn(
        session_id="s1", message=message, turn_id=turn_id, emitter=emitter, **kw
    )


async def test_a_turn_commits_then_emits_one_final() -> None:
    bus = ListBus()
    store = CommitObserver(bus)
    runner = AgentRunner(AGENT.build_loop(tool_then_answer()), store, "helper")

    final = await run(runner, bus, "t1", attempt=2)

    assert (final.type, final.status, final.text) == ("final", "completed", "the value is known")
    assert bus.types() == ["action", "observation", "final"]
    assert "final" not in store.events_at_commit  # committed before the final
    assert bus.events[-1] is final and final.attempt == 2
    messages = await store.get_messages("s1")
    assert [(m.role, m.content) for m in messages] == [
        ("user", "hi"),
        ("assistant", None),
        ("tool", "value of k"),
        ("assistant", "the value is known"),
    ]
    assert {m.turn_id for m in messages} == {"t1"}
    record = await store.get_turn("t1")
    assert record is not None
    assert (record.status, record.attempt, record.final_text, record.error) == (
        TurnStatus.COMPLETED,
        2,
        "the value is known",
        None,
    )


async def test_the_next_turn_sees_the_history() -> None:
    llm = ScriptedLLM(["first answer", "second answer"])
    store = MemoryStateStore()
    runner = AgentRunner(AGENT.build_loop(llm), store, "helper")
    await run(runner, ListBus(), "t1", "one")
    await run(runner, ListBus(), "t2", "two")
    sent = [(m["role"], m["content"]) for m in llm.calls[1].messages]
    assert sent == [("user", "one"), ("assistant", "first answer"), ("user", "two")]


async def test_an_llm_failure_is_committed_as_error() -> None:
    bus = ListBus()
    store = MemoryStateStore()
    runner = AgentRunner(AGENT.build_loop(ScriptedLLM([LLMServerError("down")])), store, "helper")
    final = await run(runner, bus, "t1")
    assert (final.status, final.text) == (TurnStatus.ERROR, "sorry")
    assert bus.types() == ["error", "final"]
    record = await store.get_turn("t1")
    assert record is not None and record.error == "llm_server_error"


async def test_another_agents_session_is_rejected_without_a_commit() -> None:
    store = MemoryStateStore()
    await store.ensure_session("s1", "someone-else")
    bus = ListBus()
    llm = ScriptedLLM(["never"])
    final = await run(AgentRunner(AGENT.build_loop(llm), store, "helper"), bus, "t1")
    assert final.status is TurnStatus.REJECTED
    assert "someone-else" in final.text and "helper" in final.text
    assert bus.types() == ["error", "final"] and bus.events[0].code == "agent_mismatch"  # type: ignore[attr-defined]
    assert llm.calls == [] and await store.get_messages("s1") == []
    assert await store.get_turn("t1") is None


async def test_a_lost_lease_raises_and_emits_no_final() -> None:
    store = MemoryStateStore()
    await store.ensure_session("s1", "helper")
    await store.claim("s1", 5)  # a newer holder took the session
    bus = ListBus()
    runner = AgentRunner(AGENT.build_loop(tool_then_answer()), store, "helper")
    with pytest.raises(StaleLeaseError):
        await run(runner, bus, "t1", fence=3)
    assert "final" not in bus.types()
    assert await store.get_messages("s1") == [] and await store.get_turn("t1") is None


async def test_a_turn_committed_already_raises_and_emits_no_final() -> None:
    """The store keeps a turn's first commit only: a run that reaches a second commit
    leaves the turn's final to whoever ends it from the committed record."""
    store = MemoryStateStore()
    await store.ensure_session("s1", "helper")
    await store.commit_turn("s1", [user("first")], record("s1", "t1", final_text="first"))
    bus = ListBus()
    runner = AgentRunner(AGENT.build_loop(tool_then_answer()), store, "helper")
    with pytest.raises(TurnCommittedError):
        await run(runner, bus, "t1", fence=1)
    assert "final" not in bus.types() and "error" not in bus.types()
    assert await contents(store, "s1") == [(1, "first")]
    stored = await store.get_turn("t1")
    assert stored is not None and stored.final_text == "first"


async def test_any_other_failure_ends_with_an_error_final() -> None:
    bus = ListBus()
    runner = AgentRunner(AGENT.build_loop(ScriptedLLM(["x"])), FailingStore(), "helper")
    final = await run(runner, bus, "t1")
    assert (final.status, final.text) == (TurnStatus.ERROR, "sorry")
    assert bus.types() == ["error", "final"]
    assert "database unavailable" in bus.events[0].message  # type: ignore[attr-defined]


async def test_the_weather_example_end_to_end_over_http() -> None:
    from reactq.demo.weather import agent

    async with ScriptedServer(demo_model) as server:
        async with OpenAICompatibleClient(base_url=server.base_url, max_retries=0) as llm:
            store = MemoryStateStore()
            runner = AgentRunner(agent.build_loop(llm), store, agent.name)
            bus = ListBus()
            emitter = TurnEmitter(bus, "w1", "t1")  # type: ignore[arg-type]
            final = await runner.run_turn(
                session_id="w1",
                message="What's the weather in Paris?",
                turn_id="t1",
                emitter=emitter,
            )
    assert final.status is TurnStatus.COMPLETED
    assert final.text.startswith("[offline demo model] It is ") and final.text.endswith(
        " in Paris."
    )
    assert bus.types() == ["usage", "action", "observation", "usage", "final"]
    assert final.usage["total_tokens"] > 0
    assert server.requests[0]["messages"][0]["role"] == "system"


@pytest.mark.parametrize("move", ["fork", "switch"])
async def test_an_interrupted_turn_commits_to_the_branch_it_started_on(
    store: StateStore, move: str
) -> None:
    """The head moves (a fork, or a switch) while a turn runs, then the turn is
    interrupted: its partial history lands on the branch it read, as a normal
    commit does, and the branch that became active mid-turn is untouched."""
    s = sid()
    await store.ensure_session(s, "helper")
    earlier = [user("first"), ChatMessage(role="assistant", content="re: first")]
    await store.commit_turn(s, earlier, record(s, f"{s}-t0"))
    if move == "switch":  # the turn starts on a branch that is not the trunk
        started_on = await store.fork(s, 2)
    else:
        started_on = TRUNK
    stop = {"now": False}
    moved_to: list[str] = []

    @tool
    async def move_head() -> str:
        """Moves the session's active branch, then asks for an interrupt."""
        if move == "fork":
            moved_to.append(await store.fork(s, 2))
        else:
            await store.switch_branch(s, TRUNK)
            moved_to.append(TRUNK)
        stop["now"] = True
        return "moved"

    llm = ScriptedLLM(
        [LLMResponse(tool_calls=[ToolCall(id="c1", name="move_head", arguments="{}")]), "never"]
    )
    loop = Agent(name="helper", model="m", tools=[move_head]).build_loop(llm)
    runner = AgentRunner(loop, store, "helper")
    emitter = TurnEmitter(ListBus(), s, f"{s}-t1")  # type: ignore[arg-type]
    final = await runner.run_turn(
        session_id=s, message="q", turn_id=f"{s}-t1", emitter=emitter,
        cancel=lambda: stop["now"], keep_partial=lambda: True,
    )  # fmt: skip

    assert (final.status, final.text) == (TurnStatus.CANCELLED, INTERRUPTED_MESSAGE)
    assert len(llm.calls) == 1
    (other,) = moved_to
    assert other != started_on
    assert await contents(store, s, started_on) == [
        (1, "first"),
        (2, "re: first"),
        (3, "q"),
        (4, None),  # the assistant's tool call
        (5, "moved"),
        (6, INTERRUPTED_MESSAGE),
    ]
    assert await contents(store, s, other) == [(1, "first"), (2, "re: first")]
    assert {m.turn_id for m in (await store.get_messages(s, started_on))[2:]} == {f"{s}-t1"}
