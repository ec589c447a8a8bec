"""Issue 33: ``POST /v1/responses`` runs a turn of a pool's agent for the real
``openai`` SDK: plain, streamed, in the background (polled and cancelled), continued
with ``previous_response_id``, its steps as output items, its approvals as
``mcp_approval_request`` items, and its errors worded as OpenAI's."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from tests.gateway_support import Gateway, start_gateway
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
            gw.stop()


def model(request: Mapping[str, Any]) -> Reply:
    """``pay PATH``: the durable agent's ``pay`` (a person approves it first), then its
    result as the answer; ``think ...``: a lookup with reasoning; else a lookup."""
    text = last_user_text(request)
    last = request["messages"][-1]
    if text.startswith("pay "):
        if last["role"] == "user":
            return Reply.tool_calls([("pay", {"path": text.split()[1], "amount": 5})])
        return Reply.text(f"done: {last['content']}")
    reply = sleepy_lookup(request)
    if text.startswith("think") and last["role"] == "user":
        return reply.but(reasoning="the user wants a lookup")
    return reply


def client(gateway: Gateway, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)


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
    assert kinds == ["reasoning", "function_call", "function_call_output", "message"]
    reasoning, call, result, _answer = response.output
    assert reasoning.content is not None
    assert reasoning.content[0].text == "the user wants a lookup"
    assert call.name == "lookup" and json.loads(call.arguments) == {"key": "think about keys"}
    assert result.call_id == call.call_id and "think about keys" in str(result.output)
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
    arguments = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(a.arguments) for a in arguments] == [{"key": "streamed"}]
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
    assert waiting.status == "incomplete"
    [request] = waiting.output
    assert request.type == "mcp_approval_request" and request.name == "pay"
    assert json.loads(request.arguments)["amount"] == 5
    assert not ledger.exists()  # nothing paid before a person said yes
    approval = {"type": "mcp_approval_response", "approval_request_id": request.id}
    done = client(gateway).responses.create(
        model="durable",
        previous_response_id=waiting.id,
        input=[{**approval, "approve": True}],  # type: ignore[list-item]
    )
    assert done.status == "completed" and done.output_text == "done: paid 5"
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
    assert waiting[-1].type == "response.incomplete"
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
    [result] = [i for i in items if i.type == "function_call_output"]
    assert result.call_id == request.id.removeprefix("mcpr_") and "not today" in str(result.output)
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
