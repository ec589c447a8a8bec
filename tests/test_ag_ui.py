"""Issue 33 item 3: the gateway's AG-UI endpoint (``POST /ag-ui/{agent}``) against a real
pool (`reactq serve`, real workers, the scripted model); every SSE event parsed with
``ag-ui-protocol``'s models."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Event, EventType
from pydantic import TypeAdapter

from reactq.worker.agent.llm.replies import Reply
from tests.gateway_support import Gateway, start_gateway
from tests.helpers import last_user_text, running_pool
from tests.js_support import run_script

pytestmark = pytest.mark.e2e

KEY = "agui-key"
EVENTS: TypeAdapter[Event] = TypeAdapter(Event)


def pool_model(request: Mapping[str, Any]) -> Reply:
    """``fail`` gets a 400; a user message calls ``lookup``, whose result is answered."""
    text = last_user_text(request)
    if "fail" in text:
        return Reply.error(400, "the scripted model refuses")
    last = request["messages"][-1]
    frontend = [t["function"]["name"] for t in request.get("tools") or ()]
    if "confirm_order" in frontend:
        # A frontend tool: the browser asks the user; its answer is the call's result.
        if last["role"] == "user":
            return Reply.tool_calls([("confirm_order", {"item": text})])
        return Reply.text(f"order {text}: {last['content']}")
    if last["role"] == "user" and text.startswith("pay "):
        return Reply.tool_calls([("pay", {"amount": int(text.split()[1])})])
    if last["role"] == "user":
        reasoning = "weighing the lookup" if text.startswith("think") else None
        return Reply.tool_calls([("lookup", {"key": text})]).but(reasoning=reasoning)
    return Reply.text(f"answer to: {text} tool said: {last['content']}")


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("ag-ui")
    with running_pool(
        redis_url,
        f"{namespace}-agui",
        tmp,
        pool_model,
        agents="tests.mcp_servers.gateway_agents:agents",
    ) as env:
        gw = start_gateway({**env, "REACTQ_API_KEYS": KEY}, Path(tmp), KEY)
        try:
            yield gw
        finally:
            gw.stop()


def run_input(text: str, thread: str | None = None) -> dict[str, Any]:
    return {
        "threadId": thread or f"agui-{uuid.uuid4().hex}",
        "runId": f"run-{uuid.uuid4().hex}",
        "messages": [{"id": "m1", "role": "user", "content": text}],
        "tools": [],
        "state": {},
        "context": [],
        "forwardedProps": {},
    }


def run(gateway: Gateway, body: dict[str, Any]) -> list[Any]:
    """POST the run and parse every SSE event with AG-UI's models, checking the run's
    frame: RUN_STARTED first, exactly one RUN_FINISHED / RUN_ERROR, last."""
    with gateway.client(timeout=60) as http:
        reply = http.post("/ag-ui/helper", json=body)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = [
        EVENTS.validate_python(json.loads(chunk.removeprefix("data: ")))
        for chunk in reply.text.split("\n\n")
        if chunk.strip()
    ]
    assert events[0].type is EventType.RUN_STARTED
    assert events[0].thread_id == body["threadId"]
    ends = [e for e in events if e.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)]
    assert ends == [events[-1]]
    open_ids: set[str] = set()
    for event in events:
        if event.type is EventType.TEXT_MESSAGE_START:
            open_ids.add(event.message_id)
        elif event.type is EventType.TEXT_MESSAGE_CONTENT:
            assert event.message_id in open_ids
        elif event.type is EventType.TEXT_MESSAGE_END:
            open_ids.remove(event.message_id)
    assert not open_ids
    return events


def test_a_turn_streams_tool_call_and_text_events(gateway: Gateway) -> None:
    events = run(gateway, run_input("weather"))
    kinds = [e.type for e in events]
    assert kinds[-1] is EventType.RUN_FINISHED
    start = next(e for e in events if e.type is EventType.TOOL_CALL_START)
    assert start.tool_call_name == "lookup"
    args = "".join(
        e.delta
        for e in events
        if e.type is EventType.TOOL_CALL_ARGS and e.tool_call_id == start.tool_call_id
    )
    assert json.loads(args) == {"key": "weather"}
    assert kinds.index(EventType.TOOL_CALL_END) < kinds.index(EventType.TOOL_CALL_RESULT)
    result = next(e for e in events if e.type is EventType.TOOL_CALL_RESULT)
    assert result.tool_call_id == start.tool_call_id
    text = "".join(e.delta for e in events if e.type is EventType.TEXT_MESSAGE_CONTENT)
    assert text.startswith("answer to: weather")
    # Two ReAct steps: the call, then the answer after its result.
    steps = [(e.type, e.step_name) for e in events if e.type.name.startswith("STEP_")]
    assert steps == [
        (EventType.STEP_STARTED, "step 1"),
        (EventType.STEP_FINISHED, "step 1"),
        (EventType.STEP_STARTED, "step 2"),
        (EventType.STEP_FINISHED, "step 2"),
    ]
    assert kinds.index(EventType.TOOL_CALL_RESULT) < kinds.index(EventType.STEP_FINISHED)


def test_the_runs_context_and_state_reach_the_agents_tools(gateway: Gateway) -> None:
    body = {
        **run_input("weather"),
        "context": [{"description": "user's city", "value": "Lyon"}],
        "state": {"theme": "dark"},
    }
    events = run(gateway, body)
    [result] = [e for e in events if e.type is EventType.TOOL_CALL_RESULT]
    seen = json.loads(result.content)["context"]["ag_ui"]
    assert seen == {
        "context": [{"description": "user's city", "value": "Lyon"}],
        "state": {"theme": "dark"},
    }


def test_todos_are_state_and_a_failed_tool_a_result() -> None:
    from reactq.producer.gateway.ag_ui.events import EventMapper
    from reactq.shared.events import TodosEvent, ToolFailedEvent

    todos = TodosEvent(session_id="s", turn_id="t", items=[{"id": "1", "text": "buy"}])
    [delta] = EventMapper(state={"theme": "dark"}).map(todos)
    assert delta.type is EventType.STATE_DELTA
    assert [op.model_dump() for op in delta.delta] == [
        {"op": "add", "path": "/todos", "value": [{"id": "1", "text": "buy"}]}
    ]
    [snapshot] = EventMapper(state=None).map(todos)
    assert snapshot.type is EventType.STATE_SNAPSHOT
    assert snapshot.snapshot == {"todos": [{"id": "1", "text": "buy"}]}
    failed = ToolFailedEvent(session_id="s", turn_id="t", tool="x", call_id="c1", error="boom")
    [result] = EventMapper().map(failed)
    assert result.type is EventType.TOOL_CALL_RESULT and result.content == "error: boom"
    for event in (delta, snapshot, result):
        EVENTS.validate_python(event.model_dump(by_alias=True))


def test_a_failed_turn_is_run_error(gateway: Gateway) -> None:
    events = run(gateway, run_input("please fail"))
    assert events[-1].type is EventType.RUN_ERROR
    assert events[-1].message


def test_bad_input_is_a_422_not_a_500(gateway: Gateway) -> None:
    with gateway.client() as http:
        assert http.post("/ag-ui/helper", json={"threadId": "x"}).status_code == 422
        assert (
            http.post(
                "/ag-ui/helper", json=run_input("x"), headers={"Authorization": ""}
            ).status_code
            == 401
        )


def test_a_run_without_a_user_message_is_run_error(gateway: Gateway) -> None:
    events = run(gateway, {**run_input("x"), "messages": []})
    assert [e.type for e in events] == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    assert "user message" in events[-1].message


CONFIRM = {
    "name": "confirm_order",
    "description": "Ask the user to confirm the order in the browser.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}},
}


def test_a_frontend_tool_round_trips_through_the_client(gateway: Gateway) -> None:
    body = {**run_input("two lamps"), "tools": [CONFIRM]}
    first = run(gateway, body)
    # The run ends with the frontend tool's call: the client runs it.
    assert first[-1].type is EventType.RUN_FINISHED
    [start] = [e for e in first if e.type is EventType.TOOL_CALL_START]
    assert start.tool_call_name == "confirm_order"
    args = "".join(e.delta for e in first if e.type is EventType.TOOL_CALL_ARGS)
    assert json.loads(args) == {"item": "two lamps"}
    assert not [e for e in first if e.type is EventType.TEXT_MESSAGE_CONTENT]
    # The client's next run carries the call and its result; the turn goes on.
    call = {
        "id": "a1",
        "role": "assistant",
        "toolCalls": [
            {
                "id": start.tool_call_id,
                "type": "function",
                "function": {"name": "confirm_order", "arguments": args},
            }
        ],
    }
    result = {"id": "t1", "role": "tool", "toolCallId": start.tool_call_id, "content": "yes"}
    second = run(
        gateway,
        {**body, "runId": "run-2", "messages": [*body["messages"], call, result]},
    )
    assert second[-1].type is EventType.RUN_FINISHED
    text = "".join(e.delta for e in second if e.type is EventType.TEXT_MESSAGE_CONTENT)
    assert text == "order two lamps: yes"
    # The client has the call already: it is not streamed to it again.
    assert not [e for e in second if e.type is EventType.TOOL_CALL_START]
    # A result for a call nothing waits for is the run's error, in-stream.
    again = run(gateway, {**body, "runId": "run-3", "messages": [*body["messages"], call, result]})
    assert again[-1].type is EventType.RUN_ERROR and again[-1].code == "no_waiting_call"


def test_a_frontend_tool_reactq_cannot_offer_is_run_error(gateway: Gateway) -> None:
    bad = {**CONFIRM, "name": "has spaces"}
    events = run(gateway, {**run_input("x"), "tools": [bad]})
    assert events[-1].type is EventType.RUN_ERROR and "client_tools" in events[-1].message


def test_reasoning_streams_as_reasoning_events(gateway: Gateway) -> None:
    events = run(gateway, run_input("think first"))
    kinds = [e.type for e in events]
    said = "".join(e.delta for e in events if e.type is EventType.REASONING_MESSAGE_CONTENT)
    assert said == "weighing the lookup"
    # Opened, then closed before the tool call.
    assert kinds.index(EventType.REASONING_START) < kinds.index(EventType.REASONING_END)
    assert kinds.index(EventType.REASONING_END) < kinds.index(EventType.TOOL_CALL_START)


def test_ag_uis_own_javascript_client_runs_a_turn_and_a_frontend_tool(gateway: Gateway) -> None:
    seen = run_script("ag_ui_client.mjs", gateway.url, KEY, "helper", packages=("@ag-ui/client@1",))
    assert seen["plainTypes"][0] == "RUN_STARTED" and seen["plainTypes"][-1] == "RUN_FINISHED"
    assert "TOOL_CALL_RESULT" in seen["plainTypes"]
    assert seen["plainAnswer"].startswith("answer to: weather")
    assert seen["first"][-1] == "RUN_FINISHED" and "TOOL_CALL_START" in seen["first"]
    assert seen["tool"] == "confirm_order" and seen["args"] == {"item": "two lamps"}
    assert seen["second"][-1] == "RUN_FINISHED"
    assert seen["answer"] == "order two lamps: yes"


def test_an_approval_is_an_interrupt_the_next_run_resumes(gateway: Gateway) -> None:
    body = run_input("pay 5")
    first = run(gateway, body)
    end = first[-1]
    assert end.type is EventType.RUN_FINISHED and end.outcome is not None
    assert end.outcome.type == "interrupt"
    [interrupt] = end.outcome.interrupts
    [start] = [e for e in first if e.type is EventType.TOOL_CALL_START]
    assert start.tool_call_name == "pay" and interrupt.tool_call_id == start.tool_call_id
    # A client cannot give the result of the agent's own tool: it decides it.
    faked = {"id": "t9", "role": "tool", "toolCallId": start.tool_call_id, "content": "paid 0"}
    refused = run(gateway, {**body, "runId": "run-f", "messages": [*body["messages"], faked]})
    assert refused[-1].type is EventType.RUN_ERROR and refused[-1].code == "no_waiting_call"
    resume = [{"interruptId": interrupt.id, "status": "resolved"}]
    second = run(gateway, {**body, "runId": "run-2", "resume": resume})
    assert second[-1].type is EventType.RUN_FINISHED and second[-1].outcome is None
    [result] = [e for e in second if e.type is EventType.TOOL_CALL_RESULT]
    assert result.tool_call_id == start.tool_call_id and result.content == "paid 5"
    assert not [e for e in second if e.type is EventType.TOOL_CALL_START]
    text = "".join(e.delta for e in second if e.type is EventType.TEXT_MESSAGE_CONTENT)
    assert text == "answer to: pay 5 tool said: paid 5"
    # Cancelled: the call is denied, with the reason the payload gives.
    other = run_input("pay 7")
    [waiting] = run(gateway, other)[-1].outcome.interrupts
    cancel = [{"interruptId": waiting.id, "status": "cancelled", "payload": {"reason": "no"}}]
    denied = run(gateway, {**other, "runId": "run-3", "resume": cancel})
    [refusal] = [e for e in denied if e.type is EventType.TOOL_CALL_RESULT]
    assert refusal.content.startswith("error: ") and "no" in refusal.content
    assert denied[-1].type is EventType.RUN_FINISHED
