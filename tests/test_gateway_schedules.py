"""``/v1/schedules`` on a real ``reactq serve``: add, list, show, pause, resume and
remove scheduled turns; a clear error for each bad input; and scoped keys: a tenant's
key sees and touches only its sessions' schedules (404 for the others, as if they did
not exist), a read-only key writes nothing.

No worker runs: the agents are announced in the registry as a worker would, and no
beat fires anything here (tests/test_schedules_beat.py does).
"""

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

KEYS = {"admin": "admin-key", "acme": "acme-key", "acme_ro": "acme-ro-key", "acme_ag": "ag-key"}
API_KEYS = ",".join(
    [
        "admin:admin-key",
        "acme:acme-key;prefix=acme-",
        "acmero:acme-ro-key;prefix=acme-;ro",
        "acmeag:ag-key;prefix=acme-;agents=beta",
    ]
)


async def _announce(settings: Settings) -> None:
    async with Producer(settings) as p:
        await p.registry.register_agents(["alpha", "beta"], "test-registry")


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gateway-schedules")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-gwsched",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "REACTQ_API_KEYS": API_KEYS,
    }
    settings = Settings.from_env(
        {},
        redis_url=redis_url,
        namespace=env["REACTQ_NAMESPACE"],
        database_url=env["REACTQ_DATABASE_URL"],
    )
    asyncio.run(_announce(settings))
    with start_gateway(env, Path(tmp), KEYS["admin"]) as gw:
        yield gw


def client(gateway: Gateway, who: str) -> httpx2.Client:
    return gateway.client(KEYS[who])


def _add(http: httpx2.Client, session_id: str, **body: object) -> httpx2.Response:
    payload = {"session_id": session_id, "agent": "alpha", "message": "report", **body}
    if "cron" not in payload and "every" not in payload:
        payload["cron"] = "0 9 * * 1-5"
    return http.post("/v1/schedules", json=payload)


def test_add_list_show_pause_resume_remove(gateway: Gateway) -> None:
    session = f"s-{uuid.uuid4().hex[:8]}"
    with client(gateway, "admin") as admin:
        added = _add(admin, session, metadata={"team": "ops"})
        assert added.status_code == 201, added.text
        schedule = added.json()
        sid = schedule["schedule_id"]
        assert schedule["cron"] == "0 9 * * 1-5" and schedule["paused"] is False
        assert schedule["metadata"] == {"team": "ops"} and schedule["last_run_at"] is None
        every = _add(admin, session, every=60)
        assert every.status_code == 201 and every.json()["every"] == 60

        listed = admin.get("/v1/schedules", params={"session_id": session}).json()["schedules"]
        assert [s["schedule_id"] for s in listed] == [sid, every.json()["schedule_id"]]
        assert admin.get(f"/v1/schedules/{sid}").json() == schedule

        assert admin.post(f"/v1/schedules/{sid}/pause").json()["paused"] is True
        assert admin.get(f"/v1/schedules/{sid}").json()["paused"] is True
        resumed = admin.post(f"/v1/schedules/{sid}/resume").json()
        assert resumed["paused"] is False and resumed["last_run_at"] is not None

        assert admin.delete(f"/v1/schedules/{sid}").status_code == 204
        gone = admin.get(f"/v1/schedules/{sid}")
        assert gone.status_code == 404 and gone.json()["code"] == "schedule_not_found"
        for method, path in (
            ("POST", f"/v1/schedules/{sid}/pause"),
            ("POST", f"/v1/schedules/{sid}/resume"),
            ("DELETE", f"/v1/schedules/{sid}"),
        ):
            answer = admin.request(method, path)
            assert answer.status_code == 404 and answer.json()["code"] == "schedule_not_found"


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ({"cron": "0 9 * *"}, 422, "invalid_schedule", "body.cron"),
        ({"cron": "0 25 * * *"}, 422, "invalid_schedule", "body.cron"),
        ({"every": 0}, 422, "invalid_schedule", "body.every"),
        ({"cron": "* * * * *", "every": 5}, 422, "invalid_schedule", "body.cron"),
        ({"session_id": "bad id"}, 422, "invalid_session_id", "body.session_id"),
        ({"agent": "nobody"}, 422, "unknown_agent", "body.agent"),
        ({"message": "   "}, 422, "empty_message", "body.message"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_stored(
    gateway: Gateway, body: dict[str, object], status: int, code: str, field: str
) -> None:
    session = str(body.pop("session_id", f"s-{uuid.uuid4().hex[:8]}"))
    with client(gateway, "admin") as admin:
        before = admin.get("/v1/schedules").json()["schedules"]
        answer = _add(admin, session, **body)
        assert answer.status_code == status, answer.text
        assert answer.json()["code"] == code and answer.json()["field"] == field
        assert admin.get("/v1/schedules").json()["schedules"] == before


def test_a_tenants_key_sees_and_touches_its_schedules_only(gateway: Gateway) -> None:
    tag = uuid.uuid4().hex[:8]
    with client(gateway, "admin") as admin:
        ours = _add(admin, f"acme-{tag}").json()["schedule_id"]
        theirs = _add(admin, f"globex-{tag}").json()["schedule_id"]
        everything = {s["schedule_id"] for s in admin.get("/v1/schedules").json()["schedules"]}
        assert {ours, theirs} <= everything

    with client(gateway, "acme") as acme:
        seen = {s["schedule_id"] for s in acme.get("/v1/schedules").json()["schedules"]}
        assert ours in seen and theirs not in seen
        assert all(s.startswith("acme-") for s in _sessions(acme))
        for method, path in (
            ("GET", "/v1/schedules/{}"),
            ("POST", "/v1/schedules/{}/pause"),
            ("POST", "/v1/schedules/{}/resume"),
            ("DELETE", "/v1/schedules/{}"),
        ):
            other = acme.request(method, path.format(theirs))
            assert other.status_code == 404, (method, path, other.text)
            assert other.json()["code"] == "schedule_not_found"
            # The same answer as for an id nobody has.
            missing = acme.request(method, path.format("sch_0000000000000000"))
            assert missing.status_code == 404
            assert other.json()["message"].replace(theirs, "X") == missing.json()[
                "message"
            ].replace("sch_0000000000000000", "X")
        assert acme.get(f"/v1/schedules/{ours}").status_code == 200
        assert acme.post(f"/v1/schedules/{ours}/pause").json()["paused"] is True
        outside = _add(acme, f"globex-{tag}-2")
        assert outside.status_code == 404 and outside.json()["code"] == "session_not_found"
        inside = _add(acme, f"acme-{tag}-2")
        assert inside.status_code == 201

    with client(gateway, "acme_ag") as limited:
        refused = _add(limited, f"acme-{tag}-3", agent="alpha")
        assert refused.status_code == 422 and refused.json()["code"] == "unknown_agent"
        assert _add(limited, f"acme-{tag}-3", agent="beta").status_code == 201

    with client(gateway, "acme_ro") as ro:
        assert ro.get(f"/v1/schedules/{ours}").status_code == 200
        assert ro.get(f"/v1/schedules/{theirs}").status_code == 404
        for answer in (
            _add(ro, f"acme-{tag}-4"),
            ro.post(f"/v1/schedules/{ours}/resume"),
            ro.delete(f"/v1/schedules/{ours}"),
        ):
            assert answer.status_code == 403 and answer.json()["code"] == "read_only"

    with client(gateway, "admin") as admin:
        # Untouched by the keys that could not reach it.
        assert admin.get(f"/v1/schedules/{theirs}").json()["paused"] is False
        assert admin.get(f"/v1/schedules/{ours}").json()["paused"] is True


def _sessions(http: httpx2.Client) -> list[str]:
    return [s["session_id"] for s in http.get("/v1/schedules").json()["schedules"]]
