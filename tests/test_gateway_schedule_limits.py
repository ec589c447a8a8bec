"""The schedule limits of reactq issue 29 on a real ``reactq serve``: an interval (or a
cron expression's gap) under REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS answers 422
``schedule_too_frequent``; a tenant (a scoped key's session prefix; a key without one:
the whole namespace) at REACTQ_MAX_SCHEDULES_PER_TENANT answers 409
``too_many_schedules``, and a removed schedule makes room. Nothing refused is stored."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from reactq import Producer
from reactq.shared.settings import Settings
from tests.gateway_support import Gateway, start_gateway

pytestmark = pytest.mark.e2e

MIN_INTERVAL = 120
CAP = 3
KEYS = {"admin": "admin-key-1", "acme": "acme-key-1", "globex": "globex-key-1", "umb": "umb-key-1"}
API_KEYS = ",".join(
    [
        f"admin:{KEYS['admin']}",
        f"acme:{KEYS['acme']};prefix=acme-",
        f"globex:{KEYS['globex']};prefix=globex-",
        f"umb:{KEYS['umb']};prefix=umb-",
    ]
)


async def _announce(settings: Settings) -> None:
    async with Producer(settings) as p:
        await p.registry.register_agents(["alpha"], "test-registry")


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gateway-schedule-limits")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-gwschedlim",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "REACTQ_API_KEYS": API_KEYS,
        "REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS": str(MIN_INTERVAL),
        "REACTQ_MAX_SCHEDULES_PER_TENANT": str(CAP),
    }
    asyncio.run(_announce(Settings.from_env(env)))
    with start_gateway(env, Path(tmp), KEYS["admin"]) as gw:
        yield gw


def _add(http: httpx2.Client, session_id: str, **timing: object) -> httpx2.Response:
    body = {"session_id": session_id, "agent": "alpha", "message": "report", **timing}
    return http.post("/v1/schedules", json=body)


def _ids(http: httpx2.Client) -> set[str]:
    return {s["schedule_id"] for s in http.get("/v1/schedules").json()["schedules"]}


@pytest.mark.parametrize(
    ("timing", "field"),
    [
        ({"every": 1}, "body.every"),
        ({"every": MIN_INTERVAL - 1}, "body.every"),
        ({"cron": "* * * * *"}, "body.cron"),  # a minute apart
        ({"cron": "0,1 9 * * *"}, "body.cron"),
    ],
)
def test_ticks_closer_than_the_minimum_are_refused(
    gateway: Gateway, timing: dict[str, object], field: str
) -> None:
    with gateway.client(KEYS["umb"]) as http:
        before = _ids(http)
        answer = _add(http, f"umb-{uuid.uuid4().hex[:8]}", **timing)
        assert answer.status_code == 422, answer.text
        error = answer.json()
        assert (error["code"], error["field"]) == ("schedule_too_frequent", field), error
        assert f"{MIN_INTERVAL} s" in error["message"]
        assert "REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS" in error["message"]
        assert _ids(http) == before


def test_the_minimum_itself_is_accepted(gateway: Gateway) -> None:
    with gateway.client(KEYS["umb"]) as http:
        for timing in ({"every": MIN_INTERVAL}, {"cron": "*/2 * * * *"}):
            answer = _add(http, f"umb-{uuid.uuid4().hex[:8]}", **timing)
            assert answer.status_code == 201, answer.text
            assert http.delete(f"/v1/schedules/{answer.json()['schedule_id']}").status_code == 204


def test_each_tenant_has_its_own_cap_and_a_key_without_a_prefix_counts_all(
    gateway: Gateway,
) -> None:
    tag = uuid.uuid4().hex[:6]
    with gateway.client(KEYS["acme"]) as acme, gateway.client(KEYS["globex"]) as globex:
        added = [_add(acme, f"acme-{tag}-{i}", every=3600) for i in range(CAP)]
        assert [a.status_code for a in added] == [201] * CAP, [a.text for a in added]
        over = _add(acme, f"acme-{tag}-x", every=3600)
        assert over.status_code == 409, over.text
        error = over.json()
        assert error["code"] == "too_many_schedules"
        assert (
            "'acme-'" in error["message"] and "REACTQ_MAX_SCHEDULES_PER_TENANT" in error["message"]
        )
        assert len(_ids(acme)) == CAP  # the refused one was not stored
        # Another tenant's count is its own.
        assert _add(globex, f"globex-{tag}", every=3600).status_code == 201
        # A removed schedule makes room.
        first = added[0].json()["schedule_id"]
        assert acme.delete(f"/v1/schedules/{first}").status_code == 204
        assert _add(acme, f"acme-{tag}-y", every=3600).status_code == 201

    with gateway.client(KEYS["admin"]) as admin:
        # No prefix: the whole namespace is its tenant, and it holds more than CAP.
        assert len(_ids(admin)) > CAP
        refused = _add(admin, f"ops-{tag}", every=3600)
        assert refused.status_code == 409 and refused.json()["code"] == "too_many_schedules"
        assert "this namespace" in refused.json()["message"]
