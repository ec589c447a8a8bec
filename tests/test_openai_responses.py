"""Issue 33: ``POST /v1/responses`` runs a turn of a pool's agent for the real
``openai`` SDK: plain, in the background (polled and cancelled), continued with
``previous_response_id``, and its errors worded as OpenAI's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.gateway_support import Gateway, start_gateway
from tests.helpers import running_pool, sleepy_lookup

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
        redis_url, f"{namespace}-oair", tmp, sleepy_lookup, agents="tests.pool_agents:agents"
    ) as env:
        gw = start_gateway({**env, "REACTQ_API_KEYS": KEYS}, Path(tmp), KEY)
        try:
            yield gw
        finally:
            gw.stop()


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
