"""Client tools through real workers: a tool the caller declares is shown to the model,
a call to it parks the turn with no worker held, and the caller's result (or error),
given with ``Producer.complete_tool``, resumes it as that call's observation."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import pytest

from reactq.producer import Producer
from reactq.shared.errors import ApprovalClosedError, InvalidTurnError
from reactq.shared.events import ApprovalRequestedEvent, Event, FinalEvent
from reactq.shared.settings import Settings
from reactq.shared.turns import TurnStatus
from tests.helpers import Reply, last_user_text, running_pool, sleepy_lookup, wait_until

pytestmark = pytest.mark.e2e

PICK = {
    "name": "pick_color",
    "description": "Ask the user to pick a color.",
    "parameters": {"type": "object", "properties": {"hint": {"type": "string"}}},
}


def model(request: Mapping[str, Any]) -> Reply:
    """With ``pick_color`` among its tools: call it, then answer with its result."""
    names = [t["function"]["name"] for t in request.get("tools") or []]
    last = request["messages"][-1]
    if "pick_color" in names:
        if last["role"] == "user":
            return Reply.tool_calls([("pick_color", {"hint": last_user_text(request)})])
        return Reply.text(f"the client chose: {last['content']}")
    return sleepy_lookup(request)


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("client-tools")
    with running_pool(redis_url, f"{namespace}-ctools", tmp, model) as env:
        yield env


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool_env)) as p:
        yield p


def sid() -> str:
    return f"ctools-{uuid.uuid4().hex[:10]}"


async def parked_call(events: AsyncIterator[Event]) -> dict[str, Any]:
    async for event in events:
        assert not isinstance(event, FinalEvent), event
        if isinstance(event, ApprovalRequestedEvent):
            [call] = event.calls
            return call
    raise AssertionError("the stream ended before the turn parked")


async def test_a_client_tool_parks_the_turn_until_its_result_arrives(producer: Producer) -> None:
    handle = await producer.submit(sid(), "a warm one", agent="e2e", client_tools=[PICK])
    call = await parked_call(handle.events())
    assert call["tool"] == "pick_color" and call["arguments"] == {"hint": "a warm one"}
    info = await producer.turn_info(handle.turn_id)
    assert info is not None and info.status is TurnStatus.AWAITING_APPROVAL
    await producer.complete_tool(handle.turn_id, call["call_id"], {"color": "orange"})
    final = await handle.result(timeout=30)
    assert final.status is TurnStatus.COMPLETED
    assert final.text == 'the client chose: {"color": "orange"}'
    # The call and its result are the turn's history, like any tool's.
    tool_messages = [m for m in await producer.history(handle.session_id) if m.role == "tool"]
    assert [(m.name, m.content) for m in tool_messages] == [("pick_color", '{"color": "orange"}')]
    # A result given twice is refused: the turn waits for nothing now.
    with pytest.raises(ApprovalClosedError):
        await producer.complete_tool(handle.turn_id, call["call_id"], "again")


async def test_an_error_from_the_client_is_the_calls_tool_error(producer: Producer) -> None:
    handle = await producer.submit(sid(), "any", agent="e2e", client_tools=[PICK])
    call = await parked_call(handle.events())
    await producer.complete_tool(handle.turn_id, call["call_id"], error="the user closed the tab")
    final = await handle.result(timeout=30)
    assert final.status is TurnStatus.COMPLETED
    events = await producer.bus.read(handle.session_id, after="0")
    [error] = [e for e in events if e.type == "tool_failed"]
    assert "the user closed the tab" in error.error  # type: ignore[attr-defined]
    assert "the user closed the tab" in final.text


async def test_the_agents_own_tools_still_run_on_the_pool(producer: Producer) -> None:
    """A turn without client tools is untouched: the model sees only the agent's."""
    handle = await producer.submit(sid(), "plain", agent="e2e")
    final = await handle.result(timeout=30)
    assert final.text == "answer to: plain"


async def test_bad_client_tools_are_refused_before_anything_is_queued(
    producer: Producer,
) -> None:
    session = sid()
    for bad, says in [
        ([{"name": "has space"}], "client_tools[0]"),
        ([PICK, PICK], "named twice"),
        ([{"name": "x", "parameters": {}, "extra": 1}], "client_tools[0]"),
        ("pick_color", "a list of tools"),
    ]:
        with pytest.raises(InvalidTurnError, match=says.replace("[", r"\[")):
            await producer.submit(session, "x", agent="e2e", client_tools=bad)  # type: ignore[arg-type]
    assert await producer.get_session(session) is None


async def test_a_client_tool_named_as_the_agents_own_ends_the_turn_clearly(
    producer: Producer,
) -> None:
    handle = await producer.submit(
        sid(), "x", agent="e2e", client_tools=[{**PICK, "name": "lookup"}]
    )
    final = await handle.result(timeout=30)
    assert final.status is TurnStatus.ERROR and final.code == "invalid_override"
    events = await producer.bus.read(handle.session_id, after="0")
    [error] = [e for e in events if e.type == "error"]
    assert "lookup" in error.message  # type: ignore[attr-defined]

    async def unlocked() -> bool:
        again = await producer.submit(handle.session_id, "after", agent="e2e")
        return (await again.result(timeout=30)).text == "answer to: after"

    await wait_until(unlocked, 30, "the session to take its next turn")
