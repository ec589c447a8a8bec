"""Integers beyond what the state database holds (reactq issue 28, item 8b): every route
that takes a schedule's interval or a message sequence answers 422 naming the field and
the range for 2**31 and 10**30, on a real ``reactq serve`` over SQLite and PostgreSQL,
and stores nothing. Before, PostgreSQL's 32-bit columns (and SQLite's 64-bit ones)
made them a 500."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reactq import Producer
from reactq.shared.messages import ChatMessage
from reactq.shared.settings import Settings
from tests.gateway_support import Gateway, start_gateway

pytestmark = pytest.mark.e2e

KEY = "ranges-admin-key"
HUGE = (2**31, 10**30)


async def _prepare(settings: Settings, session: str) -> None:
    """The agents a worker would announce, and a session of four messages."""
    async with Producer(settings) as p:
        await p.registry.register_agents(["alpha"], "test-registry")
        store = await p.state_store()
        await store.ensure_session(session, "alpha")
        await store.append(
            session,
            [
                ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"m{i}")
                for i in range(4)
            ],
        )


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def gateway(
    request: pytest.FixtureRequest,
    redis_url: str,
    namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Gateway, str]]:
    tmp = tmp_path_factory.mktemp(f"gateway-ranges-{request.param}")
    if request.param == "postgres":
        database = request.getfixturevalue("postgres_url")
    else:
        database = f"sqlite+aiosqlite:///{tmp / 'state.db'}"
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-gwrange-{request.param}",
        "REACTQ_DATABASE_URL": database,
        "REACTQ_API_KEYS": f"admin:{KEY}",
    }
    session = f"r-{uuid.uuid4().hex[:8]}"
    settings = Settings.from_env(env)
    asyncio.run(_prepare(settings, session))
    with start_gateway(env, Path(tmp), KEY) as gw:
        yield gw, session


@pytest.mark.parametrize("value", HUGE)
def test_an_interval_beyond_the_column_is_refused(gateway: tuple[Gateway, str], value: int) -> None:
    gw, session = gateway
    with gw.client() as http:
        before = http.get("/v1/schedules").json()["schedules"]
        body = {"session_id": session, "agent": "alpha", "message": "report", "every": value}
        answer = http.post("/v1/schedules", json=body)
        assert answer.status_code == 422, answer.text
        error = answer.json()
        assert error["code"] == "invalid_schedule" and error["field"] == "body.every"
        assert "2147483647" in error["message"], error
        assert http.get("/v1/schedules").json()["schedules"] == before


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize(
    ("path", "field", "extra"),
    [
        ("/v1/sessions/{}/truncate", "after", {}),
        ("/v1/sessions/{}/branches", "from_sequence", {"name": "far"}),
    ],
)
def test_a_sequence_beyond_the_column_is_refused(
    gateway: tuple[Gateway, str], value: int, path: str, field: str, extra: dict[str, str]
) -> None:
    gw, session = gateway
    with gw.client() as http:
        answer = http.post(path.format(session), json={field: value, **extra})
        assert answer.status_code == 422, answer.text
        error = answer.json()
        assert error["field"] == f"body.{field}", error
        assert "2147483647" in error["message"], error
        branches = http.get(f"/v1/sessions/{session}/branches").json()
        assert [(b["branch_id"], b["length"]) for b in branches] == [("trunk", 4)]
