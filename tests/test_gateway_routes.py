"""Issue 30: the gateway's routes declare what they touch by place, not by name, and
every route of the app is tagged, scoped and documented (real Redis, the app served
in process).

Before, a route's declaration said only *what kind* of thing it reached, and the
guard read the path parameter of the conventional name (``{session_id}``...): a route
written with ``{id}`` could be declared only as touching no id (``inner=("id",)``),
and was then served to every tenant's key. Now the declaration says which input is
what (``touches(session="path.id")``), and the guard checks that input.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import fastapi.routing
import httpx2
import pytest
from fastapi import APIRouter, FastAPI, Query
from fastapi.routing import APIRoute
from pydantic import BaseModel

from reactq.producer.gateway import create_app
from reactq.producer.gateway.deps import GUARDS, ScopeDep
from reactq.producer.gateway.scopes import check_declared, declared, routes, touches
from reactq.shared.settings import Settings

KEYS = "admin:admin-key,acme:acme-key;prefix=acme-"
ACME = {"Authorization": "Bearer acme-key"}
ADMIN = {"Authorization": "Bearer admin-key"}


class Note(BaseModel):
    """A throwaway body naming a session."""

    session: str
    text: str


def _probes() -> APIRouter:
    """Throwaway routes whose ids are not named the conventional way."""
    probes = APIRouter(tags=["probe"])

    @probes.get("/probe/{id}", dependencies=[touches(session="path.id")])
    async def by_path(id: str) -> dict[str, str]:
        """A session named ``{id}``."""
        return {"id": id}

    @probes.get("/probe", dependencies=[touches(session="query.of")])
    async def by_query(of: str = Query(pattern=r"^[a-z0-9-]+$")) -> dict[str, str]:
        """A session named by ``?of=``."""
        return {"of": of}

    @probes.post("/probe", dependencies=[touches(session="body.session", body=Note)])
    async def by_body(body: Note, scope: ScopeDep) -> dict[str, str]:
        """A session named in the body."""
        return {"session": body.session}

    return probes


@asynccontextmanager
async def _serving(app: FastAPI) -> AsyncIterator[httpx2.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://gateway") as client:
            yield client


def _app(redis_url: str, namespace: str) -> FastAPI:
    settings = Settings.from_env(
        {
            "REACTQ_REDIS_URL": redis_url,
            "REACTQ_NAMESPACE": f"{namespace}-routes",
            "REACTQ_API_KEYS": KEYS,
        }
    )
    app = create_app(settings)
    app.include_router(_probes(), prefix="/v1", dependencies=GUARDS)
    check_declared(app)
    return app


async def test_a_route_written_with_id_is_scoped_by_what_its_declaration_says(
    redis_url: str, namespace: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    own, foreign = f"acme-{tag}", f"globex-{tag}"
    async with _serving(_app(redis_url, namespace)) as client:
        mine = await client.get(f"/v1/probe/{own}", headers=ACME)
        assert mine.status_code == 200 and mine.json() == {"id": own}
        theirs = await client.get(f"/v1/probe/{foreign}", headers=ACME)
        assert theirs.status_code == 404, theirs.text
        assert theirs.json()["code"] == "session_not_found"
        assert (await client.get(f"/v1/probe/{foreign}", headers=ADMIN)).status_code == 200


async def test_a_session_in_the_query_or_the_body_is_scoped_too(
    redis_url: str, namespace: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    own, foreign = f"acme-{tag}", f"globex-{tag}"
    async with _serving(_app(redis_url, namespace)) as client:
        assert (await client.get("/v1/probe", params={"of": own}, headers=ACME)).status_code == 200
        theirs = await client.get("/v1/probe", params={"of": foreign}, headers=ACME)
        assert theirs.status_code == 404 and theirs.json()["code"] == "session_not_found"
        # A malformed value is the route's to refuse, as without the guard.
        malformed = await client.get("/v1/probe", params={"of": "Globex!"}, headers=ACME)
        assert malformed.status_code == 422, malformed.text

        note = {"session": own, "text": "hi"}
        assert (await client.post("/v1/probe", json=note, headers=ACME)).status_code == 200
        theirs = await client.post("/v1/probe", json={**note, "session": foreign}, headers=ACME)
        assert theirs.status_code == 404 and theirs.json()["code"] == "session_not_found"
        # The body's ids are checked once the body is valid: an invalid one is a 422.
        invalid = await client.post("/v1/probe", json={"session": foreign}, headers=ACME)
        assert invalid.status_code == 422 and invalid.json()["field"] == "body.text"
        admin = await client.post("/v1/probe", json={**note, "session": foreign}, headers=ADMIN)
        assert admin.status_code == 200


def test_a_declaration_that_names_an_input_the_route_does_not_take_is_refused() -> None:
    for declaration, endpoint_takes in [
        (touches(session="query.of"), "nothing"),
        (touches(session="body.session", body=Note), "a body named otherwise"),
    ]:
        router = APIRouter(prefix="/v1")

        if endpoint_takes == "nothing":

            @router.get("/probe", dependencies=[declaration])
            async def nothing() -> None:
                """Takes nothing."""

        else:

            @router.post("/probe", dependencies=[declaration])
            async def other(note: Note, extra: Note) -> None:
                """Takes two bodies."""

        app = FastAPI()
        app.include_router(router)
        with pytest.raises(RuntimeError, match="names a query parameter it does not take"):
            check_declared(app)
    with pytest.raises(TypeError, match="body's model"):
        touches(session="body.session")
    with pytest.raises(TypeError, match="place"):
        touches(session="id")


# FastAPI's own pages and the watch page's files: not API routes, walked by name; and
# the MCP SDK's transport (``/mcp``), which scopes each message to its key itself
# (``mcp_server/server.py``).
NOT_API = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/static", "/mcp"}


def _problems(app: FastAPI) -> list[str]:
    """What is wrong with the app's routes: one untagged, unscoped or undocumented."""
    out = []
    for method, path, route in routes(app):
        where = f"{method} {path}"
        if not route.tags:
            out.append(f"{where}: no OpenAPI tag")
        if len(declared(route)) != 1:
            out.append(f"{where}: declares what it touches {len(declared(route))} times")
        if not (route.description or "").strip():
            out.append(f"{where}: no docstring or description")
    return out


def _other_routes(app: FastAPI) -> set[str]:
    """The paths of the app's routes that are not API routes."""
    walk = getattr(fastapi.routing, "iter_route_contexts", None)
    if walk is None:  # FastAPI before 0.16x: ``app.routes`` is flat
        return {str(getattr(r, "path", r)) for r in app.routes if not isinstance(r, APIRoute)}
    return {str(c.path) for c in walk(app.routes) if not isinstance(c.original_route, APIRoute)}


def test_every_route_of_the_app_is_tagged_scoped_and_documented() -> None:
    app = create_app(Settings.from_env({"REACTQ_API_KEYS": KEYS}))
    walked = list(routes(app))
    assert len(walked) >= 35, [f"{m} {p}" for m, p, _ in walked]
    assert {p for _, p, _ in walked} >= {"/healthz", "/readyz", "/metrics", "/"}
    assert _problems(app) == []
    assert _other_routes(app) == NOT_API
    tags = {m + " " + p: route.tags for m, p, route in walked}
    assert tags["POST /v1/sessions/{session_id}/turns"] == ["turns"]
    assert tags["GET /v1/turns/{turn_id}/events"] == ["turns"]
    # And the walk does find what it checks for: a route that forgot all three.
    forgot = APIRouter()

    @forgot.get("/v1/forgot")
    async def forgotten() -> None:
        pass

    app.include_router(forgot)
    assert _problems(app) == [
        "GET /v1/forgot: no OpenAPI tag",
        "GET /v1/forgot: declares what it touches 0 times",
        "GET /v1/forgot: no docstring or description",
    ]
