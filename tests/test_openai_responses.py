"""Issue 33: ``POST /v1/responses`` runs a turn of a pool's agent for the real
``openai`` SDK: plain, streamed, in the background (polled and cancelled), continued
with ``previous_response_id``, its steps as output items, its approvals as
``mcp_approval_request`` items, and its errors worded as OpenAI's."""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from tests.gateway_support import Gateway, close_openai_clients, openai_client, start_gateway
from tests.helpers import Reply, last_user_text, running_pool, sleepy_lookup

pytestmark = pytest.mark.e2e

KEY = "openai-responses-key"
LIMITED = "openai-responses-limited"
KEYS = f"{KEY},acme:{LIMITED};prefix=acme-"


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("openai-responses")
    with running_pool(
        redis_url, f"{namespace}-oair", tmp, model, agents="tests.pool_agents:agents"
    ) as env:
        gw = start_gateway({**env, "REACTQ_API_KEYS": KEYS}, Path(tmp), KEY)
        try:
            yield gw
        finally:
            close_openai_clients()
            gw.stop()


def model(request: Mapping[str, Any]) -> Reply:
    """``pay PATH``: the durable agent's ``pay`` (a person approves it first), then its
    result as the answer; ``think ...``: a lookup with reasoning; else a lookup."""
    text = last_user_text(request)
    last = request["messages"][-1]
    if "get_secret" in [t["function"]["name"] for t in request.get("tools") or ()]:
        # The client's own tool: the agent asks for it, then answers with its result.
        if last["role"] == "user":
            return Reply.tool_calls([("get_secret", {"name": text})])
        return Reply.text(f"the secret is: {last['content']}")
    if text.startswith("pay "):
        if last["role"] == "user":
            return Reply.tool_calls([("pay", {"path": text.split()[1], "amount": 5})])
        return Reply.text(f"done: {last['content']}")
    reply = sleepy_lookup(request)
    if text.startswith("think") and last["role"] == "user":
        return reply.but(reasoning="the user wants a lookup")
    return reply


def client(gateway: Gateway, key: str = KEY) -> openai.OpenAI:
    client: openai.OpenAI = openai_client(gateway, key)
    return client


def test_a_response_is_the_agents_answer(gateway: Gateway) -> None:
    response = client(gateway).responses.create(
        model="reactq/e2e", input="hello there", metadata={"who": "test"}
    )
    assert response.status == "completed"
    assert response.output_text == "answer to: hello there"
    assert response.model == "reactq/e2e" and response.metadata == {"who": "test"}
    assert client(gateway).responses.retrieve(response.id).output_text == response.output_text


def test_previous_response_id_continues_the_session(gateway: Gateway) -> None:
    first = client(gateway).responses.create(model="e2e", input="one")
    second = client(gateway).responses.create(
        model="e2e",
        input=[{"role": "user", "content": "two"}],
        previous_response_id=first.id,
    )
    assert second.output_text == "answer to: two"
    assert second.previous_response_id == first.id


def test_background_is_polled_then_cancelled(gateway: Gateway) -> None:
    done = client(gateway).responses.create(model="e2e", input="later", background=True)
    assert done.status in ("queued", "in_progress", "completed")
    deadline = time.monotonic() + 30
    while done.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.2)
        done = client(gateway).responses.retrieve(done.id)
    assert done.status == "completed" and done.output_text == "answer to: later"
    slow = client(gateway).responses.create(model="e2e", input="sleep=3 slow", background=True)
    cancelled = client(gateway).responses.cancel(slow.id)
    assert cancelled.status == "cancelled"


def test_errors_are_worded_as_openai(gateway: Gateway) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client(gateway).responses.create(model="reactq/nobody", input="x")
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        client(gateway).responses.create(model="e2e", input="")
    with pytest.raises(openai.NotFoundError):
        client(gateway).responses.retrieve("resp_nope")


def test_a_limited_key_cannot_see_another_tenants_response(gateway: Gateway) -> None:
    theirs = client(gateway).responses.create(model="e2e", input="private")
    with pytest.raises(openai.NotFoundError):
        client(gateway, LIMITED).responses.retrieve(theirs.id)
    with pytest.raises(openai.NotFoundError):
        client(gateway, LIMITED).responses.create(
            model="e2e", input="x", previous_response_id=theirs.id
        )
    mine = client(gateway, LIMITED).responses.create(model="e2e", input="mine")
    assert client(gateway, LIMITED).responses.retrieve(mine.id).output_text == "answer to: mine"


def _items(response: Any) -> list[tuple[str, str]]:
    return [(item.type, item.id) for item in response.output]


def test_the_turns_steps_are_its_output_items(gateway: Gateway) -> None:
    response = client(gateway).responses.create(model="e2e", input="think about keys")
    kinds = [item.type for item in response.output]
    # The agent's own tool ran on the pool: a hosted call, with its output.
    assert kinds == ["reasoning", "mcp_call", "message"]
    reasoning, call, _answer = response.output
    assert reasoning.content is not None
    assert reasoning.content[0].text == "the user wants a lookup"
    assert call.name == "lookup" and json.loads(call.arguments) == {"key": "think about keys"}
    assert call.server_label == "reactq" and call.status == "completed"
    assert "think about keys" in str(call.output)
    assert response.output_text == "answer to: think about keys"
    # A stored response reads back with the same items.
    assert _items(client(gateway).responses.retrieve(response.id)) == _items(response)


def test_a_streamed_response_is_the_semantic_events_in_order(gateway: Gateway) -> None:
    with client(gateway).responses.create(model="e2e", input="streamed", stream=True) as stream:
        events = list(stream)
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "answer to: streamed"
    arguments = [e for e in events if e.type == "response.mcp_call_arguments.done"]
    assert [json.loads(a.arguments) for a in arguments] == [{"key": "streamed"}]
    assert "response.mcp_call.completed" in kinds
    done = events[-1].response
    assert done.status == "completed" and done.output_text == text
    assert done.usage is not None and done.usage.total_tokens > 0
    # Each item is announced, then done, at its own place in the output.
    added = [(e.output_index, e.item.id) for e in events if e.type == "response.output_item.added"]
    ended = [(e.output_index, e.item.id) for e in events if e.type == "response.output_item.done"]
    assert added == ended == [(i, item.id) for i, item in enumerate(done.output)]
    # The stored response is what the stream built.
    assert _items(client(gateway).responses.retrieve(done.id)) == _items(done)


def test_the_sdks_stream_helper_accumulates_the_answer(gateway: Gateway) -> None:
    with client(gateway).responses.stream(model="e2e", input="helper") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "answer to: helper"


def test_an_approval_is_an_item_and_its_response_resumes_the_turn(
    gateway: Gateway, tmp_path: Path
) -> None:
    ledger = tmp_path / "pay.log"
    waiting = client(gateway).responses.create(model="durable", input=f"pay {ledger}")
    # As OpenAI answers: completed, its last item the request for a person.
    assert waiting.status == "completed"
    [request] = waiting.output
    assert request.type == "mcp_approval_request" and request.name == "pay"
    assert json.loads(request.arguments)["amount"] == 5
    assert not ledger.exists()  # nothing paid before a person said yes
    approval = {"type": "mcp_approval_response", "approval_request_id": request.id}
    # A client cannot give the result of the agent's own tool: a person decides it.
    faked = {"type": "function_call_output", "call_id": request.id[5:], "output": "paid 0"}
    with pytest.raises(openai.ConflictError):
        client(gateway).responses.create(
            model="durable",
            previous_response_id=waiting.id,
            input=[faked],  # type: ignore[list-item]
        )
    done = client(gateway).responses.create(
        model="durable",
        previous_response_id=waiting.id,
        input=[{**approval, "approve": True}],  # type: ignore[list-item]
    )
    assert done.status == "completed" and done.output_text == "done: paid 5"
    assert [i.type for i in done.output] == ["mcp_call", "message"]
    assert done.output[0].output == "paid 5"
    assert ledger.read_text().count("pay 5") == 1
    # Deciding it again is refused: the turn waits for nothing now.
    with pytest.raises(openai.ConflictError):
        client(gateway).responses.create(
            model="durable",
            previous_response_id=waiting.id,
            input=[{**approval, "approve": True}],  # type: ignore[list-item]
        )


def test_a_denied_approval_streams_the_rest_of_the_turn(gateway: Gateway, tmp_path: Path) -> None:
    ledger = tmp_path / "pay.log"
    with client(gateway).responses.create(
        model="durable", input=f"pay {ledger}", stream=True
    ) as stream:
        waiting = list(stream)
    assert waiting[-1].type == "response.completed"
    [request] = [i for i in waiting[-1].response.output if i.type == "mcp_approval_request"]
    with client(gateway).responses.create(
        model="durable",
        previous_response_id=waiting[-1].response.id,
        input=[  # type: ignore[list-item]
            {
                "type": "mcp_approval_response",
                "approval_request_id": request.id,
                "approve": False,
                "reason": "not today",
            }
        ],
        stream=True,
    ) as stream:
        rest = list(stream)
    assert rest[-1].type == "response.completed"
    items = [e.item for e in rest if e.type == "response.output_item.done"]
    [call] = [i for i in items if i.type == "mcp_call"]
    assert call.id == "mcp_" + request.id.removeprefix("mcpr_") and call.status == "failed"
    assert "not today" in str(call.error)
    assert rest[-1].response.output_text.startswith("done: ")
    assert not ledger.exists()


def test_a_conversation_is_a_session_each_response_continues(gateway: Gateway) -> None:
    first = client(gateway).responses.create(model="e2e", input="one", conversation="conv-a")
    second = client(gateway).responses.create(
        model="e2e", input="two", conversation={"id": "conv-a"}
    )
    assert first.conversation is not None and first.conversation.id == "conv-a"
    assert second.output_text == "answer to: two"
    turns = httpx2.get(
        f"{gateway.url}/v1/sessions/conv-a/turns",
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=10,
    ).json()
    assert [t["turn_id"] for t in turns] == [
        first.id.removeprefix("resp_"),
        second.id.removeprefix("resp_"),
    ]
    # A tenant's conversation is under its prefix; it cannot name another's session.
    mine = client(gateway, LIMITED).responses.create(model="e2e", input="x", conversation="c")
    assert mine.conversation is not None and mine.conversation.id == "acme-c"
    with pytest.raises(openai.BadRequestError):
        client(gateway).responses.create(
            model="e2e", input="x", conversation="conv-a", previous_response_id=first.id
        )


SECRET = {
    "type": "function",
    "name": "get_secret",
    "description": "The client's secret of a name.",
    "parameters": {"type": "object", "properties": {"name": {"type": "string"}}},
}


def test_a_client_function_tool_is_a_function_call_the_client_answers(gateway: Gateway) -> None:
    first = client(gateway).responses.create(model="e2e", input="alpha", tools=[SECRET])  # type: ignore[list-item]
    assert first.status == "completed"
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_secret"
    assert json.loads(call.arguments) == {"name": "alpha"}
    second = client(gateway).responses.create(
        model="e2e",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "42"}],
        tools=[SECRET],  # type: ignore[list-item]
    )
    assert second.output_text == "the secret is: 42"
    # What the client ran is not asked of it again.
    assert [i.type for i in second.output] == ["message"]
    # Streamed: the call is the stream's last item; the answer streams after its result.
    with client(gateway).responses.create(
        model="e2e",
        input="beta",
        tools=[SECRET],
        stream=True,  # type: ignore[list-item]
    ) as stream:
        events = list(stream)
    assert events[-1].type == "response.completed"
    [asked] = [e.item for e in events if e.type == "response.output_item.done"]
    assert asked.type == "function_call"
    with client(gateway).responses.create(
        model="e2e",
        previous_response_id=events[-1].response.id,
        input=[{"type": "function_call_output", "call_id": asked.call_id, "output": "7"}],
        stream=True,
    ) as stream:
        rest = list(stream)
    text = "".join(e.delta for e in rest if e.type == "response.output_text.delta")
    assert text == "the secret is: 7"
    assert not [e for e in rest if e.type == "response.function_call_arguments.done"]


def test_other_tool_types_and_unanswerable_outputs_are_refused(gateway: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as hosted:
        client(gateway).responses.create(
            model="e2e",
            input="x",
            tools=[{"type": "web_search"}],  # type: ignore[list-item]
        )
    assert hosted.value.param == "tools.0"
    with pytest.raises(openai.BadRequestError) as named:
        client(gateway).responses.create(
            model="e2e",
            input="x",
            tools=[{**SECRET, "name": "has space"}],  # type: ignore[list-item]
        )
    assert named.value.param is not None and named.value.param.startswith("tools")
    output = [{"type": "function_call_output", "call_id": "call_nope", "output": "1"}]
    with pytest.raises(openai.BadRequestError):
        client(gateway).responses.create(model="e2e", input=output)  # type: ignore[arg-type]
    done = client(gateway).responses.create(model="e2e", input="done")
    with pytest.raises(openai.ConflictError):
        client(gateway).responses.create(
            model="e2e",
            previous_response_id=done.id,
            input=output,  # type: ignore[arg-type]
        )


# The SDK's streamed runner stops reading at response.completed without closing its
# HTTP stream (a socket of the client's own, left to the garbage collector).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_openai_agents_sdk_runs_its_own_tool_against_a_reactq_agent(
    gateway: Gateway,
) -> None:
    """The OpenAI Agents SDK's runner, its model a reactq agent: the agent calls the
    SDK's local function tool, and the runner sends its result back."""
    import asyncio

    import agents

    agents.set_tracing_disabled(True)

    @agents.function_tool
    def get_secret(name: str) -> str:
        """The client's secret of a name."""
        return f"s3cret-{name}"

    async def main() -> tuple[str, str]:
        async with openai.AsyncOpenAI(
            base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0
        ) as api:
            model = agents.OpenAIResponsesModel(model="reactq/e2e", openai_client=api)
            local = agents.Agent(
                name="local", instructions="Use reactq.", tools=[get_secret], model=model
            )
            plain = await agents.Runner.run(local, "alpha", auto_previous_response_id=True)
            streamed = agents.Runner.run_streamed(local, "beta", auto_previous_response_id=True)
            async for _ in streamed.stream_events():
                pass
        return str(plain.final_output), str(streamed.final_output)

    plain, streamed = asyncio.run(main())
    gc.collect()  # the SDK's unclosed stream goes here, under this test's filter
    assert plain == "the secret is: s3cret-alpha"
    assert streamed == "the secret is: s3cret-beta"
