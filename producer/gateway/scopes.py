"""What a scoped API key reaches: every route declares what it touches, by place.

A key's scope (``security.KeyScope``: a tenant's session-id prefix, the agents it may
run, read-only) is the identity the gateway stamps on every turn it submits
(``shared/tenancy.py``), and what its routes check. Every route of the app declares
which of its inputs name what, and the guard checks those, never whatever its
parameters happen to be called::

    dependencies=[touches(session="path.session_id")]
    dependencies=[touches(session="path.id")]                # {id} is a session
    dependencies=[touches(session="path.session_id", turn="query.turn_id")]
    dependencies=[touches(session="path.session_id", agent="body.agent", body=TurnCreate)]
    dependencies=[touches(namespace="path.namespace", inner=("key",))]
    dependencies=[listing()]          # no id: the route shows only what the key may see
    dependencies=[pool_wide()]        # the whole pool's (``/metrics``)
    dependencies=[touches_nothing()]  # nothing of a tenant's (``/healthz``)

``check_declared`` refuses an app with a route that declares nothing (or twice), or
whose path parameters its declaration does not account for, and a test walks them
all. The guard answers a key outside what a route touches as if the thing did not
exist:

- a session outside the key's prefix, or (a key with ``agents=``) another agent's
  session: 404 ``session_not_found``; a turn of one: 404 ``turn_not_found``, by the
  same look-ups as a turn that does not exist (``turn_lookup.turn_session``), so
  neither the answer nor the work behind it says which;
- a store namespace whose dotted name does not start with the prefix: 404
  ``document_not_found``, from the name alone; a schedule of another tenant's session
  or agent: 404 ``schedule_not_found``; an agent outside ``agents=``: 404
  ``unknown_agent`` in the path, 422 ``unknown_agent`` naming the field in a query or
  a body (as an agent no worker hosts);
- a listing shows only what the key may see; a read-only key gets 403 ``read_only``
  on every write, before anything is looked up; a pool-wide route answers a key with
  a prefix 404.

A path value is checked before anything else of the request; a query or body value
once it is well-formed (a malformed one gets the route's 422), a body's once the body
is valid.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from enum import StrEnum
from typing import Any

import fastapi.routing
from fastapi import Depends, FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel

from reactq.producer.gateway.errors import GatewayError, state_store_errors
from reactq.producer.gateway.models import AGENT_PATTERN, NAMESPACE_PATTERN, TURN_ID_PATTERN
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway, gateway_of
from reactq.producer.turn_lookup import turn_session
from reactq.shared.errors import UnknownAgentError
from reactq.shared.schedules import SCHEDULE_ID_PATTERN
from reactq.shared.turns import SESSION_ID_RE

__all__ = [
    "Scoped",
    "Touches",
    "check_declared",
    "declared",
    "enforce_scope",
    "listing",
    "pool_wide",
    "routes",
    "scope_of",
    "session_visible",
    "touches",
    "touches_nothing",
    "v1_routes",
]

_READS = frozenset({"GET", "HEAD", "OPTIONS"})
_PLACES = ("path", "query", "body")


class Touches(StrEnum):
    """What a route reaches, as it declares it (``Scoped``)."""

    SESSION = "session"
    """A session: the tenant's, of an agent the key may reach."""
    TURN = "turn"
    """A turn: one of a session the key may reach."""
    NAMESPACE = "namespace"
    """A long-term store namespace (and a ``{key}`` in it): the tenant's."""
    SCHEDULE = "schedule"
    """A schedule: of a session and an agent the key may reach."""
    AGENT = "agent"
    """An agent: one the key may reach."""
    LISTING = "listing"
    """No id: the route lists only what the key may see (it takes the scope)."""
    BODY = "body"
    """The ids are in the request's body only (checked once the body is valid)."""
    POOL = "pool"
    """The whole pool, not a tenant's (``/metrics``): a key with a prefix gets 404."""
    NOTHING = "nothing"
    """Nothing of a tenant's (``/healthz``, the watch page): anyone the key lets in."""


# What a well-formed id of each kind is: a query or body value that is not one is left
# to the route's validation (422), as before the guard existed.
_WELL_FORMED: dict[Touches, re.Pattern[str]] = {
    Touches.SESSION: SESSION_ID_RE,
    Touches.TURN: re.compile(TURN_ID_PATTERN),
    Touches.NAMESPACE: re.compile(NAMESPACE_PATTERN),
    Touches.SCHEDULE: re.compile(SCHEDULE_ID_PATTERN),
    Touches.AGENT: re.compile(AGENT_PATTERN),
}


def scope_of(request: Request) -> KeyScope | None:
    """The scope of the request's key (None when the gateway has no keys)."""
    return gateway_of(request).keys.scope_of_headers(request.headers.raw)


class Scoped:
    """A route's declaration of what it touches; ``dependency()`` is the guard that
    answers a key outside it 404 (or 422 for an agent in the input), as if the thing
    did not exist.

    ``values``: what each named input is (``{Touches.SESSION: "path.id"}``); a place is
    ``path.``, ``query.`` or ``body.`` and a name. ``inner``: the route's other path
    parameters, which name something inside what it touches (a document's ``{key}``
    in its namespace). ``body``: the route's body model, when a value is in it (the
    route's body parameter is then ``body``, validated once for both). ``kind``: for a
    declaration without values (``LISTING``, ``POOL``, ``NOTHING``).
    """

    def __init__(
        self,
        values: Mapping[Touches, str] | None = None,
        *,
        inner: tuple[str, ...] = (),
        body: type[BaseModel] | None = None,
        kind: Touches | None = None,
    ) -> None:
        self.values = dict(values or {})
        self.inner = inner
        self.body = body
        if bool(self.values) == (kind is not None):
            raise TypeError("declare what a route touches: values, or a kind without ids")
        for what, where in self.values.items():
            place, _, name = where.partition(".")
            if what not in _WELL_FORMED or place not in _PLACES or not name:
                raise TypeError(f"{what}={where!r}: want a path., query. or body. place")
            if place == "body" and (body is None or name not in body.model_fields):
                raise TypeError(f"{what}={where!r}: give the body's model, with that field")
        self._kind = kind

    @property
    def touches(self) -> Touches:
        """What the route reaches: its path's thing (the first declared), else
        ``BODY`` when its ids are in the body, else its kind."""
        if self._kind is not None:
            return self._kind
        in_path = [what for what, where in self.values.items() if where.startswith("path.")]
        return in_path[0] if in_path else Touches.BODY

    def _at(self, place: str) -> list[tuple[Touches, str]]:
        return [
            (what, where.partition(".")[2])
            for what, where in self.values.items()
            if where.startswith(place + ".")
        ]

    @property
    def path_params(self) -> frozenset[str]:
        """The path parameters a route with this declaration has."""
        return frozenset((*self.inner, *(name for _, name in self._at("path"))))

    @property
    def query_params(self) -> frozenset[str]:
        """The query parameters the declaration names."""
        return frozenset(name for _, name in self._at("query"))

    def dependency(self) -> Any:
        """The declaration as a route's dependency (``dependencies=[...]``)."""
        if self.body is None:
            return Depends(self.guard)
        return Depends(_BodyGuard(self, self.body))

    async def guard(self, request: Request) -> None:
        """404 unless the request's key may reach what the route's path and query
        values name (the pool-wide check, for a ``POOL`` route)."""
        if self._kind in (Touches.LISTING, Touches.NOTHING):
            return  # a listing filters by the scope itself
        scope = scope_of(request)
        if self._kind is Touches.POOL:
            if scope is not None and scope.prefix is not None:
                raise GatewayError("Not Found", status=404, error_code="not_found")
            return
        if _reaches_all(scope):
            return  # ``enforce_scope`` refused a read-only key's writes
        assert scope is not None
        gateway = gateway_of(request)
        for what, name in self._at("path"):
            await _check(gateway, scope, what, str(request.path_params[name]), f"path.{name}")
        for what, name in self._at("query"):
            value = request.query_params.get(name)
            if value is not None and _WELL_FORMED[what].fullmatch(value):
                await _check(gateway, scope, what, value, f"query.{name}")

    async def check_body(self, request: Request, body: BaseModel) -> None:
        """404 (422 for an agent) unless the key may reach what the valid body names."""
        scope = scope_of(request)
        if _reaches_all(scope):
            return
        assert scope is not None
        gateway = gateway_of(request)
        for what, name in self._at("body"):
            value = getattr(body, name)
            if isinstance(value, str) and _WELL_FORMED[what].fullmatch(value):
                with state_store_errors():
                    await _check(gateway, scope, what, value, f"body.{name}")


class _BodyGuard:
    """The dependency of a declaration with body values: the path and query checks
    first (a sub-dependency, so they answer before the body is validated), then the
    body's, given the route's body model, which FastAPI validates once for both."""

    def __init__(self, scoped: Scoped, model: type[BaseModel]) -> None:
        self.scoped = scoped
        keyword = inspect.Parameter.KEYWORD_ONLY
        self.__signature__ = inspect.Signature(
            [
                inspect.Parameter("request", keyword, annotation=Request),
                inspect.Parameter("body", keyword, annotation=model),
                inspect.Parameter("_first", keyword, default=Depends(scoped.guard)),
            ]
        )

    async def __call__(self, *, request: Request, body: BaseModel, _first: None = None) -> None:
        await self.scoped.check_body(request, body)


def _reaches_all(scope: KeyScope | None) -> bool:
    return scope is None or (scope.prefix is None and scope.agents is None)


async def _check(gateway: Gateway, scope: KeyScope, what: Touches, value: str, at: str) -> None:
    """Raise the answer to a thing the key may not reach (as if it did not exist)."""
    if what is Touches.SESSION:
        if not await session_visible(gateway, scope, value):
            raise GatewayError(f"no session {value!r}", status=404, error_code="session_not_found")
    elif what is Touches.TURN:
        if await turn_session(gateway.producer, value, _visible(gateway, scope)) is None:
            raise GatewayError("no such turn", status=404, error_code="turn_not_found")
    elif what is Touches.NAMESPACE:
        if not scope.sees_namespace(value):
            raise GatewayError(
                f"no namespace {value!r}", status=404, error_code="document_not_found"
            )
    elif what is Touches.SCHEDULE:
        # One look-up whether the schedule is another tenant's or nobody's.
        found = await gateway.producer.get_schedule(value)
        if found is None or not (
            scope.sees_session(found.session_id) and scope.may_run(found.agent)
        ):
            raise GatewayError(
                f"no schedule {value!r}", status=404, error_code="schedule_not_found"
            )
    elif not scope.may_run(value):
        if at.startswith("path."):
            raise GatewayError(
                f"no worker hosts an agent named {value!r} (or none published its tools)",
                status=404,
                error_code="unknown_agent",
            )
        # Answered as an agent nobody hosts, so a key does not learn which others exist.
        raise GatewayError(
            f"no worker hosts agent {value!r}: start one with "
            f"`reactq worker --agents MODULE:ATTR` (namespace {gateway.settings.namespace!r})",
            status=422,
            error_code=UnknownAgentError.code,
            field=at,
        )


def touches(
    *,
    session: str | None = None,
    turn: str | None = None,
    namespace: str | None = None,
    schedule: str | None = None,
    agent: str | None = None,
    inner: tuple[str, ...] = (),
    body: type[BaseModel] | None = None,
) -> Any:
    """A route's ``dependencies=[touches(session="path.session_id")]``: which of its
    inputs is a session, a turn, a namespace, a schedule or an agent (``path.NAME``,
    ``query.NAME``, ``body.NAME``; ``body``: the body's model), as the guard that
    checks them."""
    given = {
        Touches.SESSION: session,
        Touches.TURN: turn,
        Touches.NAMESPACE: namespace,
        Touches.SCHEDULE: schedule,
        Touches.AGENT: agent,
    }
    values = {what: where for what, where in given.items() if where is not None}
    return Scoped(values, inner=inner, body=body).dependency()


def listing(*, inner: tuple[str, ...] = ()) -> Any:
    """The declaration of a route that names no id and shows only what the key may see
    (it takes the scope: ``ScopeDep``). ``inner``: path parameters the route itself
    looks up under the scope (``/v1/models/{model}``, a model being an agent under
    another name)."""
    return Scoped(kind=Touches.LISTING, inner=inner).dependency()


def pool_wide() -> Any:
    """The declaration of a route about the whole pool (``/metrics``): not a tenant's,
    so a key with a prefix finds no such route (404)."""
    return Scoped(kind=Touches.POOL).dependency()


def touches_nothing() -> Any:
    """The declaration of a route that reaches nothing of a tenant's (``/healthz``)."""
    return Scoped(kind=Touches.NOTHING).dependency()


def declared(route: APIRoute) -> list[Scoped]:
    """The scope declarations among a route's dependencies."""
    found = []
    for dependency in route.dependant.dependencies:
        call = dependency.call
        owner = call.scoped if isinstance(call, _BodyGuard) else getattr(call, "__self__", None)
        if isinstance(owner, Scoped):
            found.append(owner)
    return found


def routes(app: FastAPI) -> Iterator[tuple[str, str, APIRoute]]:
    """Every API route of the app: (method, full path, the route)."""
    # FastAPI from 0.16x keeps an included router as one entry of ``app.routes``, and
    # walks it with ``iter_route_contexts``; before, ``app.routes`` was flat.
    walk = getattr(fastapi.routing, "iter_route_contexts", None)
    if walk is None:
        found = [(r.path, r) for r in app.routes if isinstance(r, APIRoute)]
    else:
        found = [
            (str(c.path), c.original_route)
            for c in walk(app.routes)
            if isinstance(c.original_route, APIRoute)
        ]
    for path, route in found:
        for method in sorted(route.methods or ()):
            yield method, path, route


def v1_routes(app: FastAPI) -> Iterator[tuple[str, str, APIRoute]]:
    """Every ``/v1`` route of the app: (method, full path, the route)."""
    for method, path, route in routes(app):
        if path.startswith("/v1/"):
            yield method, path, route


def _flat(dependant: Dependant) -> Iterator[Dependant]:
    yield dependant
    for sub in dependant.dependencies:
        yield from _flat(sub)


def check_declared(app: FastAPI) -> None:
    """Refuse (RuntimeError) an app with a route that declares what it touches not
    exactly once, or whose path parameters its declaration does not name (or names
    query or body values the route does not take): such a route would be reachable by
    every tenant's key."""
    for method, path, route in routes(app):
        found = declared(route)
        where = f"{method} {path}"
        if len(found) != 1:
            raise RuntimeError(
                f"route {where} declares what it touches {len(found)} times: give it "
                "dependencies=[touches(...)] once (gateway/scopes.py)"
            )
        scoped = found[0]
        params = frozenset(route.param_convertors)
        if params != scoped.path_params:
            raise RuntimeError(
                f"route {where} has path parameters {sorted(params)}, but its declaration "
                f"Scoped({scoped.touches}) accounts for {sorted(scoped.path_params)}"
            )
        queries = {p.alias for d in _flat(route.dependant) for p in d.query_params}
        bodies = {p.name for d in _flat(route.dependant) for p in d.body_params}
        if not scoped.query_params <= queries or (scoped.body is not None and bodies != {"body"}):
            raise RuntimeError(
                f"route {where}: its declaration names a query parameter it does not take, "
                "or a body its only body parameter, ``body``, is not"
            )


async def session_visible(gateway: Gateway, scope: KeyScope | None, session_id: str) -> bool:
    """True when the key may reach the session: the tenant's, and (a key limited to
    some agents) not another agent's. A session that does not exist yet is visible
    when its id is the tenant's: a first turn creates it."""
    if scope is None:
        return True
    if not scope.sees_session(session_id):
        return False
    if scope.agents is None:
        return True
    agent = await gateway.session_agent(session_id)
    return agent is None or scope.may_run(agent)


def _visible(gateway: Gateway, scope: KeyScope) -> Callable[[str], Awaitable[bool]]:
    async def visible(session_id: str) -> bool:
        return await session_visible(gateway, scope, session_id)

    return visible


async def enforce_scope(request: Request) -> None:
    """A dependency of every ``/v1`` route, before its declaration: a read-only key
    may not write, refused before anything is looked up."""
    scope = scope_of(request)
    if scope is not None and scope.read_only and request.method not in _READS:
        raise GatewayError(
            f"the API key {scope.name!r} is read-only", status=403, error_code="read_only"
        )
