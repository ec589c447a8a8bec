"""Reasoning round trips (issue 22, item 3): reasoning text a provider sends
(``reasoning_content`` / ``reasoning``) is kept on the stored assistant message,
replayed with its tool calls, streamed as ``reasoning`` events, droppable from replay
(``replay_reasoning=False``); unknown provider fields are kept in ``extra``. Against
the scripted server over HTTP through the openai SDK, and every state store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reactq import Agent, tool
from reactq.shared.events import Event, ReasoningEvent
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.settings import Settings
from reactq.shared.state import StateStore, open_store
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from reactq.worker.local import run_local_turn
from tests.state_fixtures import (  # noqa: F401 - the fixtures register by import
    record,
    sid,
    store_fixture,
    url_fixture,
)

MISSING = "Missing `reasoning_content` field in the assistant message with tool calls"


@tool(read_only=True)
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def thinking_provider(field: str = "reasoning_content") -> Any:
    """Like DeepSeek's thinking mode: every answer carries reasoning, and a request
    replaying a tool call without its reasoning is refused with a 400."""

    def handler(request: dict[str, Any]) -> Reply:
        for message in request["messages"]:
            if message.get("tool_calls") and "reasoning_content" not in message:
                return Reply.error(400, MISSING)
        if request["messages"][-1]["role"] == "user":
            reply = Reply.tool_calls([("lookup", {"key": "k"})])
            return reply.but(
                reasoning="I should look k up.",
                reasoning_field=field,
                fields={"provider_trace": {"id": "tr-1"}},
            )
        return Reply.text("k is known.").but(reasoning="The tool told me.", reasoning_field=field)

    return handler


async def turn(
    tmp_path: Path, server: ScriptedServer, **knobs: Any
) -> tuple[list[Event], list[ChatMessage]]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"
    settings = Settings.from_env({"REACTQ_DATABASE_URL": url})
    agent = Agent(name="thinker", model="m", base_url=server.base_url, tools=[lookup], **knobs)
    events: list[Event] = []
    final = await run_local_turn(settings, agent, "s", "what is k?", on_event=events.append)
    assert final.status == "completed", events
    store = await open_store(url)
    try:
        return events, await store.get_messages("s")
    finally:
        await store.close()


@pytest.mark.parametrize("stream", [False, True])
async def test_reasoning_is_replayed_with_tool_calls_and_stored(
    tmp_path: Path, stream: bool
) -> None:
    async with ScriptedServer(thinking_provider()) as server:
        events, stored = await turn(tmp_path, server, stream=stream)
        replayed = server.requests[1]["messages"][-2]
    assert replayed["tool_calls"] and replayed["reasoning_content"] == "I should look k up."
    call, _result, answer = stored[1:]
    assert (call.reasoning, call.extra) == (
        "I should look k up.",
        {"provider_trace": {"id": "tr-1"}},
    )
    assert (answer.content, answer.reasoning) == ("k is known.", "The tool told me.")
    shown = "".join(e.text for e in events if isinstance(e, ReasoningEvent))
    assert shown == "I should look k up.The tool told me."
    if stream:  # in pieces, as they came
        assert len([e for e in events if isinstance(e, ReasoningEvent)]) >= 2


async def test_reasoning_sent_as_reasoning_is_kept_too(tmp_path: Path) -> None:
    async with ScriptedServer(thinking_provider("reasoning")) as server:
        events, stored = await turn(tmp_path, server, stream=True, delta_interval=0)
    assert stored[1].reasoning == "I should look k up."
    assert [e.text for e in events if isinstance(e, ReasoningEvent)][:3] == [
        "I shoul",
        "d look ",
        "k up.",
    ]


async def test_replay_reasoning_false_leaves_it_out_of_requests(tmp_path: Path) -> None:
    def refuses_the_field(request: dict[str, Any]) -> Reply:
        if any("reasoning_content" in m for m in request["messages"]):
            return Reply.error(400, "Additional properties are not allowed ('reasoning_content')")
        if request["messages"][-1]["role"] == "user":
            return Reply.tool_calls([("lookup", {"key": "k"})]).but(reasoning="I should look k up.")
        return Reply.text("k is known.")

    async with ScriptedServer(refuses_the_field) as server:
        _events, stored = await turn(tmp_path, server, replay_reasoning=False)
        assert server.request_count == 2
    assert stored[1].reasoning == "I should look k up."  # kept, only not sent


async def test_every_store_keeps_reasoning_and_provider_fields(store: StateStore) -> None:
    session = sid()
    said = ChatMessage(
        role="assistant",
        content=None,
        tool_calls=[ToolCall(id="c1", name="lookup", arguments="{}")],
        reasoning="thinking \ud800 aloud",
        extra={"provider_trace": {"id": "tr-1"}, "annotations": ["a"]},
    )
    answered = ChatMessage(role="tool", content="ok", tool_call_id="c1", name="lookup")
    await store.begin_turn(session, "thinker")
    await store.commit_turn(
        session, [ChatMessage(role="user", content="hi"), said, answered], record(session, "t1")
    )
    kept = (await store.get_messages(session))[1]
    assert (kept.reasoning, kept.extra) == (said.reasoning, said.extra)
