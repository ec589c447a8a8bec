"""Issue 20, item 7: scoped API keys on a real `reactq serve` and a real worker.

A key with ``prefix=`` sees and touches only the sessions whose id starts with it
(and their turns): the rest answer 404 as if they did not exist, on every route. A
read-only key gets 403 ``read_only`` on every write; a key limited to some agents
cannot submit to others (answered like an unknown agent). Keys without scopes keep
full access.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from reactq.producer.gateway import create_app
from reactq.producer.gateway.scopes import Scoped, Touches, declared, v1_routes
from reactq.shared.settings import Settings
from tests.gateway_support import REACTQ, Gateway, read_until, start_gateway
from tests.helpers import ROOT, running_pool, sleepy_lookup

pytestmark = pytest.mark.e2e

KEYS = {
    "admin": "admin-key",
    "acme": "acme-key",
    "acme_ro": "acme-ro-key",
    "acme_other_agents": "acme-ag-key",
}
API_KEYS = ",".join(
    [
        "admin:admin-key",
        "acme:acme-key;prefix=acme-",
        "acmero:acme-ro-key;prefix=acme-;ro",
        "acmeag:acme-ag-key;prefix=acme-;agents=support|billing",
    ]
)


@dataclass
class World:
    """Sessions and turns the admin key made before the tests."""

    acme: str
    acme_turn: str
    acme_doomed: str
    globex: str
    globex_turn: str
    globex_schedule: str
    """A schedule of the globex session."""
    acme_schedule: str
    """A schedule of the acme session (agent e2e)."""


GLOBEX_NAMESPACE = "globex-notes"
"""A long-term store namespace of globex's, holding the document ``k``."""


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("scoped-keys")
    with running_pool(redis_url, f"{namespace}-sk", tmp, sleepy_lookup) as env:
        yield {**env, "REACTQ_TMP": str(tmp)}


@pytest.fixture(scope="module")
def gateway(pool_env: dict[str, str]) -> Iterator[Gateway]:
    env = {**pool_env, "REACTQ_API_KEYS": API_KEYS}
    with start_gateway(env, Path(pool_env["REACTQ_TMP"]), KEYS["admin"]) as gw:
        yield gw


def client(gateway: Gateway, who: str) -> httpx2.Client:
    return gateway.client(KEYS[who])


def finished_turn(admin: httpx2.Client, session_id: str, message: str = "hello") -> str:
    """Submit as the admin and wait for the turn's end; its id."""
    accepted = admin.post(
        f"/v1/sessions/{session_id}/turns", json={"message": message, "agent": "e2e"}
    )
    assert accepted.status_code == 202, accepted.text
    turn_id: str = accepted.json()["turn_id"]
    deadline = time.monotonic() + 30
    while admin.get(f"/v1/turns/{turn_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline, f"turn {turn_id} did not complete"
        time.sleep(0.05)
    return turn_id


@pytest.fixture(scope="module")
def world(gateway: Gateway) -> World:
    tag = uuid.uuid4().hex[:8]
    acme, doomed, globex = f"acme-{tag}", f"acme-doomed-{tag}", f"globex-{tag}"
    with client(gateway, "admin") as admin:
        acme_turn = finished_turn(admin, acme)
        finished_turn(admin, doomed)
        globex_turn = finished_turn(admin, globex)
        stored = admin.put(f"/v1/store/{GLOBEX_NAMESPACE}/k", json={"value": {"text": "secret"}})
        assert stored.status_code == 200, stored.text
        schedules = [
            admin.post(
                "/v1/schedules",
                json={"session_id": sid, "agent": "e2e", "message": "tick", "every": 86400},
            )
            for sid in (globex, acme)
        ]
        assert all(s.status_code == 201 for s in schedules), [s.text for s in schedules]
    return World(
        acme,
        acme_turn,
        doomed,
        globex,
        globex_turn,
        schedules[0].json()["schedule_id"],
        schedules[1].json()["schedule_id"],
    )


@dataclass(frozen=True)
class Route:
    """One route: how to call it, and what it answers a key that may."""

    method: str
    path: str
    """``{sid}`` and ``{tid}`` are filled in from the world."""
    allowed: int
    """The status a key of the session's tenant gets."""
    body: dict[str, Any] | None = None
    write: bool = False

    @property
    def missing(self) -> str:
        return "turn_not_found" if "{tid}" in self.path else "session_not_found"


ROUTES = [
    Route("GET", "/v1/sessions/{sid}", 200),
    Route("GET", "/v1/sessions/{sid}/messages", 200),
    Route("GET", "/v1/sessions/{sid}/turns", 200),
    Route("GET", "/v1/sessions/{sid}/usage", 200),
    Route("GET", "/v1/sessions/{sid}/todos", 200),
    Route("GET", "/v1/sessions/{sid}/branches", 200),
    Route("GET", "/v1/turns/{tid}", 200),
    Route("PATCH", "/v1/sessions/{sid}", 200, {"metadata": {"seen": True}}, write=True),
    Route("POST", "/v1/sessions/{sid}/branches", 201, {"from_sequence": 1}, write=True),
    Route("PUT", "/v1/sessions/{sid}/active_branch", 200, {"branch": "trunk"}, write=True),
    Route("POST", "/v1/sessions/{sid}/truncate", 200, {"after": 1000}, write=True),
    # A finished turn: cancel and decide pass the scope check and hit the turn's state.
    Route("POST", "/v1/turns/{tid}/cancel", 409, write=True),
    Route(
        "POST",
        "/v1/turns/{tid}/decisions",
        409,
        {"decisions": {"c1": True}},
        write=True,
    ),
    Route("DELETE", "/v1/sessions/{sid}", 200, write=True),
    Route(
        "POST",
        "/v1/sessions/{sid}/turns",
        202,
        {"message": "hello again", "agent": "e2e"},
        write=True,
    ),
]
ROUTE_IDS = [f"{r.method} {r.path}" for r in ROUTES]


def call(c: httpx2.Client, route: Route, sid: str, tid: str) -> httpx2.Response:
    path = route.path.format(sid=sid, tid=tid)
    return c.request(route.method, path, json=route.body)


def target(route: Route, world: World, tenant: str) -> tuple[str, str]:
    if tenant == "globex":
        return world.globex, world.globex_turn
    if route.method == "DELETE":
        return world.acme_doomed, world.acme_turn
    if route.path.endswith("/turns") and route.method == "POST":
        return f"acme-new-{uuid.uuid4().hex[:8]}", world.acme_turn
    return world.acme, world.acme_turn


@pytest.mark.parametrize("case", ["other_tenant", "read_only", "own_tenant"])
@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_every_route_keeps_a_key_to_its_scope(
    gateway: Gateway, world: World, route: Route, case: str
) -> None:
    """Another tenant's ids are not found (and stay untouched); a read-only key reads
    its tenant and writes nothing; a tenant's key reaches its own on every route."""
    who = "acme_ro" if case == "read_only" else "acme"
    sid, tid = target(route, world, "globex" if case == "other_tenant" else "acme")
    with client(gateway, who) as c, client(gateway, "admin") as admin:
        answer = call(c, route, sid, tid)
        if case == "other_tenant":
            assert answer.status_code == 404, answer.text
            assert answer.json()["code"] == route.missing
            shown = admin.get(f"/v1/sessions/{world.globex}")
            assert shown.status_code == 200 and shown.json()["metadata"] == {}
            assert shown.json()["turns"] == 1
            assert admin.get(f"/v1/turns/{world.globex_turn}").json()["status"] == "completed"
        elif case == "read_only" and route.write:
            assert answer.status_code == 403, answer.text
            assert answer.json()["code"] == "read_only"
        else:
            assert answer.status_code == route.allowed, answer.text
            if answer.status_code == 409:
                # Past the scope check: the turn's own state answered.
                assert answer.json()["code"] not in ("turn_not_found", "session_not_found")
        if case == "read_only" and not route.write:
            # Reading says nothing about another tenant: its ids are still not found.
            other = call(c, route, *target(route, world, "globex"))
            assert other.status_code == 404 and other.json()["code"] == route.missing


def test_the_listing_shows_only_the_tenants_sessions(gateway: Gateway, world: World) -> None:
    with client(gateway, "acme") as acme, client(gateway, "admin") as admin:
        listed = acme.get("/v1/sessions", params={"limit": 1000}).json()["sessions"]
        ids = {s["session_id"] for s in listed}
        assert world.acme in ids and world.globex not in ids
        assert all(i.startswith("acme-") for i in ids)
        assert world.globex in {
            s["session_id"]
            for s in admin.get("/v1/sessions", params={"limit": 1000}).json()["sessions"]
        }
        # Pages of one: every page is the tenant's, and the cursor walks them all.
        seen: list[str] = []
        params: dict[str, Any] = {"limit": 1}
        while True:
            page = acme.get("/v1/sessions", params=params)
            assert page.status_code == 200, page.text
            seen += [s["session_id"] for s in page.json()["sessions"]]
            if page.json()["next_cursor"] is None:
                break
            params["cursor"] = page.json()["next_cursor"]
        assert seen == [s["session_id"] for s in listed]


def test_event_streams_follow_the_tenant(gateway: Gateway, world: World) -> None:
    with client(gateway, "acme_ro") as ro:
        events = read_until(
            ro,
            f"/v1/sessions/{world.acme}/events?turn_id={world.acme_turn}",
            lambda m: m.event == "final",
        )
        assert events[-1].data["turn_id"] == world.acme_turn
        refused = ro.get(f"/v1/sessions/{world.globex}/events")
        assert refused.status_code == 404 and refused.json()["code"] == "session_not_found"


def test_an_agent_the_key_may_not_run_is_answered_as_an_unknown_agent(
    gateway: Gateway, world: World
) -> None:
    session = f"acme-ag-{uuid.uuid4().hex[:8]}"
    with client(gateway, "acme_other_agents") as limited:
        refused = limited.post(
            f"/v1/sessions/{session}/turns", json={"message": "hi", "agent": "e2e"}
        )
        unknown = limited.post(
            f"/v1/sessions/{session}/turns", json={"message": "hi", "agent": "support"}
        )
    assert refused.status_code == unknown.status_code == 422, refused.text
    assert refused.json()["code"] == unknown.json()["code"] == "unknown_agent"
    assert refused.json()["field"] == "body.agent"
    assert refused.json()["message"] == unknown.json()["message"].replace("support", "e2e")
    with client(gateway, "admin") as admin:
        assert admin.get(f"/v1/sessions/{session}").status_code == 404


def test_unscoped_keys_keep_full_access_and_metrics_are_not_a_tenants(
    gateway: Gateway, world: World
) -> None:
    with client(gateway, "admin") as admin, client(gateway, "acme") as acme:
        assert admin.get(f"/v1/sessions/{world.globex}").status_code == 200
        assert admin.get(f"/v1/turns/{world.acme_turn}").status_code == 200
        assert admin.get("/metrics").status_code in (200, 501)
        # Pool-wide numbers (queue depth per agent) are no tenant's.
        refused = acme.get("/metrics")
        assert refused.status_code == 404 and refused.json()["code"] == "not_found"


def test_a_malformed_entry_stops_serve_with_a_config_error(tmp_path: Path) -> None:
    env = {**os.environ, "REACTQ_API_KEYS": "ops:secret-k;prefix=acme-;tenant=x"}
    done = subprocess.run(
        [REACTQ, "serve", "--host", "127.0.0.1", "--port", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "[config_error]" in done.stderr and "REACTQ_API_KEYS" in done.stderr
    assert "'tenant=x'" in done.stderr and "secret-k" not in done.stderr


# --- issue 29, item 6: every route, walked from the app itself ------------------------

# What a route's declaration reaches -> the key that must not reach the world's thing,
# the path parameters naming that thing, and the code of the 404 it gets.
_FOREIGN: dict[Touches, tuple[str, str]] = {
    Touches.SESSION: ("acme", "session_not_found"),
    Touches.TURN: ("acme", "turn_not_found"),
    Touches.NAMESPACE: ("acme", "document_not_found"),
    Touches.SCHEDULE: ("acme", "schedule_not_found"),
    # Agents are the pool's, not a tenant's: a key limited to others does not see them.
    Touches.AGENT: ("acme_other_agents", "unknown_agent"),
    Touches.BODY: ("acme", "session_not_found"),
}


def _walked(gateway: Gateway) -> list[tuple[str, str, Scoped]]:
    """Every /v1 route of the app `reactq serve` runs, with its declaration."""
    app = create_app(Settings.from_env({"REACTQ_API_KEYS": API_KEYS}))
    out = []
    for method, path, route in v1_routes(app):
        found = declared(route)
        assert len(found) == 1, f"{method} {path} declares what it touches {len(found)} times"
        out.append((method, path, found[0]))
    return out


def _fill(path: str, world: World, *, acme: bool = False) -> str:
    # A model is an agent under another name (``/v1/models/{model:path}``).
    return path.replace("{model:path}", "{model}").format(
        model="reactq/e2e",
        session_id=world.acme if acme else world.globex,
        turn_id=world.acme_turn if acme else world.globex_turn,
        namespace=GLOBEX_NAMESPACE,
        key="k",
        schedule_id=world.acme_schedule if acme else world.globex_schedule,
        name="e2e",
        response_id=f"resp_{world.acme_turn}",
        call_id="call_1",
    )


def test_every_route_declares_its_scope_and_keeps_other_tenants_out(
    gateway: Gateway, world: World
) -> None:
    """Walks the app's own routes, so a route added later is walked too: each declares
    what it touches, another tenant's key gets 404 (as for a missing id) on each one
    that names a thing, a listing shows it nothing of the other tenant, and a
    read-only key gets 403 on every write."""
    walked = _walked(gateway)
    assert len(walked) >= 31
    globex_body = {"session_id": world.globex, "agent": "e2e", "message": "x", "every": 60}
    with (
        client(gateway, "acme") as acme,
        client(gateway, "acme_ro") as ro,
        client(gateway, "acme_other_agents") as limited,
        client(gateway, "admin") as admin,
    ):
        keys = {"acme": acme, "acme_other_agents": limited}
        for method, path, scoped in walked:
            where = f"{method} {path}"
            body = globex_body if scoped.touches is Touches.BODY else {}
            if method in ("GET", "HEAD"):
                body = None
            if scoped.touches is Touches.LISTING and (
                method not in ("GET", "HEAD") or "{response_id}" in path
            ):
                # A run on a session made for it (chat completions), or a response (the
                # Responses API's own ids): their own tests scope them.
                pass
            elif scoped.touches is Touches.LISTING:
                url = _fill(path, world)
                answer = acme.request(method, url)
                assert answer.status_code == 200, (where, answer.text)
                assert world.globex not in answer.text, where
                assert world.globex_schedule not in answer.text, where
                shown = limited.request(method, url)
                if scoped.inner:
                    # It looks up its one thing (the e2e agent) under the scope itself.
                    assert shown.status_code == 404, (where, shown.text)
                else:
                    assert shown.status_code == 200 and '"e2e"' not in shown.text, where
            else:
                who, code = _FOREIGN[scoped.touches]
                answer = keys[who].request(method, _fill(path, world), json=body)
                assert answer.status_code == 404, (where, answer.text)
                assert answer.json()["code"] == code, (where, answer.text)
            if method not in ("GET", "HEAD"):
                refused = ro.request(method, _fill(path, world, acme=True), json=body)
                assert refused.status_code == 403, (where, refused.text)
                shape = refused.json()
                # The surface's own error shape: reactq's, or OpenAI's (under "error").
                code = shape.get("code") or (shape.get("error") or {}).get("code")
                assert code == "read_only", (where, refused.text)
        # Nothing of globex's changed.
        assert admin.get(f"/v1/sessions/{world.globex}").json()["metadata"] == {}
        assert admin.get(f"/v1/store/{GLOBEX_NAMESPACE}/k").status_code == 200
        assert admin.get(f"/v1/schedules/{world.globex_schedule}").json()["paused"] is False


def test_a_key_limited_to_some_agents_does_not_reach_another_agents_sessions(
    gateway: Gateway, world: World
) -> None:
    """Issue 29, item 6: a key with agents=support|billing read, PATCHed and forked the
    sessions of agent e2e in its own prefix. Now they (and their turns and schedules)
    answer 404 as a session that does not exist does, and its listings leave them out."""
    with client(gateway, "acme_other_agents") as limited, client(gateway, "admin") as admin:
        for method, path, scoped in _walked(gateway):
            if scoped.touches not in (Touches.SESSION, Touches.TURN, Touches.SCHEDULE):
                continue
            body = None if method == "GET" else {}
            if path.endswith("/turns") and method == "POST":
                body = {"message": "hi", "agent": "support"}
            answer = limited.request(method, _fill(path, world, acme=True), json=body)
            assert answer.status_code == 404, (method, path, answer.text)
        patched = limited.patch(f"/v1/sessions/{world.acme}", json={"metadata": {"x": 1}})
        missing = limited.patch(
            f"/v1/sessions/acme-none-{uuid.uuid4().hex[:6]}", json={"metadata": {"x": 1}}
        )
        assert patched.status_code == missing.status_code == 404
        assert patched.json()["code"] == missing.json()["code"] == "session_not_found"
        listed = limited.get("/v1/sessions", params={"limit": 1000}).json()["sessions"]
        assert world.acme not in {s["session_id"] for s in listed}
        detail = admin.get(f"/v1/sessions/{world.acme}").json()
        assert "x" not in detail["metadata"]
        assert [b["branch_id"] for b in admin.get(f"/v1/sessions/{world.acme}/branches").json()]


def test_a_foreign_turn_and_a_missing_one_get_the_same_answer(
    gateway: Gateway, world: World
) -> None:
    missing = f"t_{uuid.uuid4().hex}"
    with client(gateway, "acme") as acme:
        for suffix in ("", "/events"):
            foreign = acme.get(f"/v1/turns/{world.globex_turn}{suffix}")
            absent = acme.get(f"/v1/turns/{missing}{suffix}")
            assert foreign.status_code == absent.status_code == 404
            assert foreign.json() == absent.json()
