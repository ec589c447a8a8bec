"""Per-agent endpoints and client knobs (issue 22, item 2): an agent names its own
endpoint, key variable, timeout, retries and headers, or a client factory; the pool's
defaults come from Settings; keys never reach the logs. On real parts: the scripted
server over HTTP, the openai SDK, and real `reactq worker` processes."""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from reactq import Agent, LLMEndpoint, LLMResponse, Model
from reactq.producer import Producer
from reactq.shared.errors import ConfigError
from reactq.shared.events import Event, FinalEvent, ModelFallbackEvent, UsageEvent
from reactq.shared.logs import configure_logging
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.endpoint import ClientCache
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from reactq.worker.definitions import AgentConfigError
from reactq.worker.local import run_local_turn
from tests.helpers import WorkerPool, last_user_text

LEFT_KEY = "left-credential-4711"
RIGHT_KEY = "right-credential-0815"


def settings_for(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env(
        {"REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}", **env}
    )


def test_an_agent_names_its_endpoint_and_knobs_else_the_settings_give_them() -> None:
    settings = Settings.from_env(
        {
            "OPENAI_BASE_URL": "http://127.0.0.1:8/v1",
            "OPENAI_API_KEY": "sk-settings-key",
            "REACTQ_LLM_TIMEOUT_SECONDS": "7.5",
            "REACTQ_LLM_MAX_RETRIES": "5",
            "TENANT_CREDS": LEFT_KEY,
        }
    )
    (plain,) = Agent(name="plain").endpoints(settings)
    assert (plain.base_url, plain.api_key, plain.timeout, plain.max_retries) == (
        "http://127.0.0.1:8/v1",
        "sk-settings-key",
        7.5,
        5,
    )
    own = Agent(
        name="own",
        base_url="http://127.0.0.1:9/v1",
        api_key_env="TENANT_CREDS",
        timeout=3,
        max_retries=0,
        headers={"X-Tenant": "a"},
    )
    (endpoint,) = own.endpoints(settings)
    assert endpoint == LLMEndpoint("http://127.0.0.1:9/v1", LEFT_KEY, 3, 0, (("X-Tenant", "a"),))
    assert LEFT_KEY not in repr(endpoint) and LEFT_KEY not in repr(own)


def test_client_knobs_are_checked_at_construction() -> None:
    with pytest.raises(AgentConfigError, match="api_key= conflicts with api_key_env="):
        Agent(name="a", api_key="k", api_key_env="K")
    for knobs, match in (
        ({"timeout": 0}, "timeout must be > 0"),
        ({"max_retries": -1}, "max_retries must be an int >= 0"),
        ({"headers": {"X-A": 1}}, "headers must map"),
        ({"client_factory": "no"}, "client_factory must be callable"),
    ):
        with pytest.raises(AgentConfigError, match=match):
            Agent(name="a", **knobs)
    with pytest.raises(ConfigError, match="api_key_env names NOT_SET_ANYWHERE, which is not set"):
        Agent(name="a", api_key_env="NOT_SET_ANYWHERE").endpoints(Settings.from_env({}))


async def test_the_agents_timeout_retries_key_and_headers_reach_the_endpoint(
    tmp_path: Path,
) -> None:
    def handler(request: dict[str, Any]) -> Reply:
        if "slow" in last_user_text(request):
            return Reply.text("late").but(delay=3)
        if "fail" in last_user_text(request):
            return Reply.error(503, "overloaded")
        return Reply.text("hello")

    async with ScriptedServer(handler) as server:
        settings = settings_for(tmp_path, TENANT_CREDS=LEFT_KEY)
        agent = Agent(
            name="knobs",
            model="m",
            base_url=server.base_url,
            api_key_env="TENANT_CREDS",
            headers={"X-Tenant": "left"},
            timeout=0.5,
            max_retries=1,
        )
        final = await run_local_turn(settings, agent, "s1", "hi")
        assert (final.status, final.text) == ("completed", "hello")
        sent = server.request_headers[-1]
        assert sent["authorization"] == f"Bearer {LEFT_KEY}" and sent["x-tenant"] == "left"

        started = time.monotonic()
        final = await run_local_turn(settings, agent, "s2", "slow")
        assert final.code == "llm_connection"
        assert time.monotonic() - started < 2.5  # two tries of 0.5 s, not the SDK's 60 s

        before = server.request_count
        final = await run_local_turn(settings, agent, "s3", "fail")
        assert final.code == "llm_server_error"
        assert server.request_count - before == 2  # max_retries=1: one try and one retry


class EchoClient:
    """A custom LLMClient: it answers with the endpoint it was built for."""

    def __init__(self, endpoint: LLMEndpoint) -> None:
        self.endpoint = endpoint

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> LLMResponse:
        return LLMResponse(content=f"{kwargs['model']} at {self.endpoint.base_url}")


async def test_a_client_factory_builds_the_agents_clients(tmp_path: Path) -> None:
    agent = Agent(
        name="custom",
        model="house-model",
        base_url="custom://llm",
        client_factory=EchoClient,
        fallback_models=["spare"],
    )
    settings = settings_for(tmp_path)
    final = await run_local_turn(settings, agent, "s1", "hi")
    assert final.text == "house-model at custom://llm"
    cache = ClientCache()
    own, spare = cache.for_agent(agent, settings)
    assert isinstance(own, EchoClient) and own is spare  # one endpoint, one client
    assert isinstance(agent.build_llm(settings), EchoClient)


def test_keys_from_any_variable_and_header_values_are_redacted_in_logs(tmp_path: Path) -> None:
    stream = io.StringIO()
    # Named so that secrets_of's scan of secret-looking variable names misses it.
    settings = settings_for(tmp_path, TENANT_CONFIG=LEFT_KEY)
    handler = configure_logging(settings, stream=stream)
    try:
        agent = Agent(
            name="secretive",
            base_url="custom://llm",
            api_key_env="TENANT_CONFIG",
            headers={"X-Portkey-Config": RIGHT_KEY},
            client_factory=EchoClient,
        )
        ClientCache().for_agent(agent, settings)
        logging.getLogger("reactq.test").warning("key %s header %s", LEFT_KEY, RIGHT_KEY)
    finally:
        logging.getLogger().removeHandler(handler)
    out = stream.getvalue()
    assert "key [REDACTED] header [REDACTED]" in out, out
    assert LEFT_KEY not in out and RIGHT_KEY not in out


# -- two agents on two endpoints in one real worker process ------------------------------


def _serve(name: str) -> Any:
    def handler(request: Mapping[str, Any]) -> Reply:
        text = last_user_text(request)
        if name == "right" and "outage" in text:
            return Reply.error(503, "the right endpoint is down")
        return Reply.text(f"{request['model']}@{name}: {text}")

    return handler


@pytest.fixture
def endpoints() -> Iterator[tuple[ScriptedServer, ScriptedServer]]:
    left = ScriptedServer(_serve("left")).start_in_thread()
    right = ScriptedServer(_serve("right")).start_in_thread()
    yield left, right
    left.stop()
    right.stop()


@pytest.mark.e2e
async def test_two_agents_on_two_endpoints_in_one_worker(
    redis_url: str,
    namespace: str,
    tmp_path: Path,
    endpoints: tuple[ScriptedServer, ScriptedServer],
) -> None:
    left, right = endpoints
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-endpoints",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        # The pool's endpoint: neither agent may use it.
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_API_KEY": "sk-pool-default-key",
        "E2E_LEFT_URL": left.base_url,
        "E2E_RIGHT_URL": right.base_url,
        "E2E_LEFT_CREDS": LEFT_KEY,
        "E2E_RIGHT_CREDS": RIGHT_KEY,
    }
    pool = WorkerPool(env, tmp_path, agents="tests.endpoint_agents:agents")
    pool.start(1)
    try:
        pool.wait_ready(redis_url, env["REACTQ_NAMESPACE"], 1)
        async with Producer(Settings.from_env(env)) as producer:
            finals = await asyncio.gather(
                _final(producer, "ep-left", "to the left", "left"),
                _final(producer, "ep-right", "to the right", "right"),
            )
            assert [f.text for f in finals] == [
                "left-model@left: to the left",
                "right-model@right: to the right",
            ]
            handle = await producer.submit("ep-outage", "outage", agent="right")
            events = [e async for e in handle.events()]
    finally:
        pool.stop()
    assert {h["authorization"] for h in left.request_headers} == {f"Bearer {LEFT_KEY}"}
    assert {h["authorization"] for h in right.request_headers} == {f"Bearer {RIGHT_KEY}"}
    assert {h["x-tenant"] for h in right.request_headers} == {"right"}
    # The right endpoint's outage: the turn went on with the fallback model on the left.
    final = events[-1]
    assert isinstance(final, FinalEvent) and final.text == "big-model@left: outage"
    (switch,) = [e for e in events if isinstance(e, ModelFallbackEvent)]
    assert (switch.from_model, switch.to_model, switch.code) == (
        "right-model",
        "big-model",
        "llm_server_error",
    )
    assert [e.model for e in events if isinstance(e, UsageEvent)] == ["big-model"]
    logs = pool.logs()
    assert "ready" in logs
    for key in (LEFT_KEY, RIGHT_KEY, "sk-pool-default-key"):
        assert key not in logs


async def _final(producer: Producer, session: str, text: str, agent: str) -> FinalEvent:
    handle = await producer.submit(session, text, agent=agent)
    events: list[Event] = [e async for e in handle.events()]
    final = events[-1]
    assert isinstance(final, FinalEvent)
    return final


def test_a_fallback_on_another_endpoint_never_gets_the_agents_key() -> None:
    settings = Settings.from_env({"BIG_CREDS": RIGHT_KEY})
    agent = Agent(
        name="a",
        base_url="http://127.0.0.1:9/v1",
        api_key=LEFT_KEY,
        fallback_models=[
            "same-endpoint",
            Model("elsewhere", base_url="http://127.0.0.1:8/v1"),
            Model("elsewhere-keyed", base_url="http://127.0.0.1:8/v1", api_key_env="BIG_CREDS"),
        ],
    )
    own, same, elsewhere, keyed = agent.endpoints(settings)
    assert same == own and own.api_key == LEFT_KEY
    assert (elsewhere.base_url, elsewhere.api_key) == ("http://127.0.0.1:8/v1", None)
    assert keyed.api_key == RIGHT_KEY
