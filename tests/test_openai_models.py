"""Issue 33: ``GET /v1/models`` lists the pool's agents to the real ``openai`` SDK, and
an error under OpenAI's front doors is worded as OpenAI's (the SDK raises the
exception its status maps to, with the body's code)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.gateway_support import Gateway, close_openai_clients, openai_client, start_gateway
from tests.helpers import running_pool, sleepy_lookup

pytestmark = pytest.mark.e2e

KEY = "openai-models-key"
LIMITED = "openai-limited-key"
KEYS = f"{KEY},acme:{LIMITED};prefix=acme-;agents=durable"


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("openai-models")
    with running_pool(
        redis_url, f"{namespace}-oaim", tmp, sleepy_lookup, agents="tests.pool_agents:agents"
    ) as env:
        gw = start_gateway({**env, "REACTQ_API_KEYS": KEYS}, Path(tmp), KEY)
        try:
            yield gw
        finally:
            close_openai_clients()
            gw.stop()


def client(gateway: Gateway, key: str = KEY) -> openai.OpenAI:
    client: openai.OpenAI = openai_client(gateway, key)
    return client


def test_models_are_the_agents_a_key_may_use(gateway: Gateway) -> None:
    ids = [m.id for m in client(gateway).models.list()]
    assert "reactq/e2e" in ids and "reactq/durable" in ids
    assert ids == sorted(ids)
    assert client(gateway).models.retrieve("reactq/e2e").owned_by == "reactq"
    # The bare name names it too.
    assert client(gateway).models.retrieve("e2e").id == "reactq/e2e"
    # A key limited to one agent sees that one only; another is not there.
    assert [m.id for m in client(gateway, LIMITED).models.list()] == ["reactq/durable"]
    with pytest.raises(openai.NotFoundError) as hidden:
        client(gateway, LIMITED).models.retrieve("reactq/e2e")
    assert hidden.value.code == "model_not_found"


def test_errors_are_worded_as_openai(gateway: Gateway) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client(gateway).models.retrieve("reactq/nobody")
    body = missing.value.body
    assert isinstance(body, dict)
    assert body["code"] == "model_not_found" and body["type"] == "invalid_request_error"
    assert "nobody" in body["message"]
    with pytest.raises(openai.AuthenticationError):
        client(gateway, "wrong-key").models.list()
