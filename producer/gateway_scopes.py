"""Scoped API keys: a tenant's session-id prefix, the agents a key may run, read-only.

An entry of ``REACTQ_API_KEYS`` (itself comma-separated) is::

    key                                   full access, named key1, key2... by position
    name:key                              full access, named
    name:key;prefix=acme-;agents=a|b;ro   scoped

``;`` separates a key from its scopes and ``|`` the agents of ``agents=``: neither
can occur in a session id or an agent name, and neither is the list's ``,``. Any
other scope, an empty one, or one given twice is a ConfigError naming the entry
by its position and name (never its key).

A key's scope is the identity the gateway stamps on every turn it submits
(``shared/tenancy.py``), and what its routes check. Every ``/v1`` route declares what
it touches (``dependencies=[touches(Touches.SESSION)]``, ...; ``check_declared`` refuses an app with
one that does not, and a test walks them all); its guard answers a key outside it as
if the thing did not exist:

- a session outside the key's prefix, or (a key with ``agents=``) another agent's
  session: 404 ``session_not_found``; a turn of one: 404 ``turn_not_found``, by the
  same look-ups as a turn that does not exist (``turn_lookup.turn_session``), so
  neither the answer nor the work behind it says which;
- a store namespace whose dotted name does not start with the prefix: 404
  ``document_not_found``, from the name alone; a schedule of another tenant's session
  or agent: 404 ``schedule_not_found``; an agent outside ``agents=``: 404
  ``unknown_agent``;
- a listing shows only what the key may see; a read-only key gets 403 ``read_only``
  on every write, before anything is looked up.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import fastapi.routing
from fastapi import Depends, FastAPI, Request
from fastapi.routing import APIRoute

from reactq.producer.gateway_errors import GatewayError
from reactq.producer.turn_lookup import turn_session
from reactq.shared.errors import ConfigError
from reactq.shared.tenancy import TenantIdentity

if TYPE_CHECKING:
    from reactq.producer.client import Producer

_PREFIX = re.compile(r"[A-Za-z0-9._:-]{1,127}")
_AGENT = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_READS = frozenset({"GET", "HEAD", "OPTIONS"})


KeyScope = TenantIdentity
"""Who a key is and what it may reach: the identity the gateway stamps on its turns."""


def parse_scopes(name: str, scopes: list[str], position: int) -> KeyScope:
    """The scope of entry ``position`` (named ``name``) from its ``;``-separated parts;
    ConfigError for a malformed one."""

    def bad(why: str) -> ConfigError:
        return ConfigError(
            f"REACTQ_API_KEYS entry {position} ({name}): {why}; scopes are "
            "'prefix=SESSION_PREFIX', 'agents=A|B' and 'ro', after the key, each after a ';'",
            setting="REACTQ_API_KEYS",
        )

    found: dict[str, Any] = {}
    for part in scopes:
        label, sep, value = part.strip().partition("=")
        if not label:
            raise bad("empty scope")
        if label in found:
            raise bad(f"{label!r} given twice")
        if label == "ro" and not sep:
            found["ro"] = True
        elif label == "prefix" and sep:
            if not _PREFIX.fullmatch(value):
                raise bad("prefix= wants 1-127 of [A-Za-z0-9._:-]")
            found["prefix"] = value
        elif label == "agents" and sep:
            agents = value.split("|")
            if not all(_AGENT.fullmatch(a) for a in agents):
                raise bad("agents= wants agent names separated by '|'")
            found["agents"] = frozenset(agents)
        else:
            raise bad(f"unknown scope {part.strip()[:40]!r}")
    return KeyScope(
        name=name,
        prefix=found.get("prefix"),
        agents=found.get("agents"),
        read_only=found.get("ro", False),
    )


def scope_of(request: Request) -> KeyScope | None:
    """The scope of the request's key (None when the gateway has no keys)."""
    scope: KeyScope | None = request.app.state.gateway.keys.scope_of_headers(request.headers.raw)
    return scope


class Touches(StrEnum):
    """What a ``/v1`` route reaches, as it declares it (``Scoped``): the guard checks the
    key against that, never against whatever path parameters a route happens to have."""

    SESSION = "session"
    """A session, ``{session_id}``: the tenant's, of an agent the key may reach."""
    TURN = "turn"
    """A turn, ``{turn_id}``: one of a session the key may reach."""
    NAMESPACE = "namespace"
    """A long-term store namespace, ``{namespace}`` (and a ``{key}`` in it): the
    tenant's."""
    SCHEDULE = "schedule"
    """A schedule, ``{schedule_id}``: of a session and an agent the key may reach."""
    AGENT = "agent"
    """An agent, ``{name}``: one the key may reach."""
    LISTING = "listing"
    """No id: the route lists only what the key may see (it takes the scope)."""
    BODY = "body"
    """The ids are in the request's body: the route checks them (it takes the scope)."""


_PARAMS: dict[Touches, str] = {
    Touches.SESSION: "session_id",
    Touches.TURN: "turn_id",
    Touches.NAMESPACE: "namespace",
    Touches.SCHEDULE: "schedule_id",
    Touches.AGENT: "name",
}


class Scoped:
    """A route's declaration of what it touches; ``Scoped(...).guard`` is the dependency
    that answers a key outside it 404, as if the thing did not exist.

    ``inner``: the route's other path parameters, which name something inside what it
    touches (a document's ``{key}`` in its namespace). ``check_declared`` refuses an app
    with a ``/v1`` route that declares nothing, or whose path parameters its
    declaration does not account for.
    """

    def __init__(self, touches: Touches, *, inner: tuple[str, ...] = ()) -> None:
        self.touches = touches
        self.inner = inner

    @property
    def path_params(self) -> frozenset[str]:
        """The path parameters a route with this declaration has."""
        param = _PARAMS.get(self.touches)
        return frozenset((*self.inner, *((param,) if param else ())))

    def dependency(self) -> Any:
        """The declaration as a route's dependency (``dependencies=[...]``)."""
        return Depends(self.guard)

    async def guard(self, request: Request) -> None:
        """404 unless the request's key may reach what the route touches."""
        scope = scope_of(request)
        if scope is None or (scope.prefix is None and scope.agents is None):
            return  # reaches everything (``enforce_scope`` refused a read-only key's writes)
        if self.touches in (Touches.LISTING, Touches.BODY):
            return
        producer = request.app.state.gateway.producer
        value = str(request.path_params[_PARAMS[self.touches]])
        if self.touches is Touches.SESSION:
            if not await session_visible(producer, scope, value):
                raise _no_session(value)
        elif self.touches is Touches.TURN:
            if await turn_session(producer, value, _visible(producer, scope)) is None:
                raise GatewayError("no such turn", status=404, error_code="turn_not_found")
        elif self.touches is Touches.NAMESPACE:
            if not scope.sees_namespace(value):
                raise GatewayError(
                    f"no namespace {value!r}", status=404, error_code="document_not_found"
                )
        elif self.touches is Touches.SCHEDULE:
            # One look-up whether the schedule is another tenant's or nobody's.
            found = await producer.get_schedule(value)
            if found is None or not (
                scope.sees_session(found.session_id) and scope.may_run(found.agent)
            ):
                raise GatewayError(
                    f"no schedule {value!r}", status=404, error_code="schedule_not_found"
                )
        elif not scope.may_run(value):
            raise GatewayError(
                f"no worker hosts an agent named {value!r} (or none published its tools)",
                status=404,
                error_code="unknown_agent",
            )


def touches(what: Touches, *, inner: tuple[str, ...] = ()) -> Any:
    """A route's ``dependencies=[touches(Touches.SESSION)]``: its ``Scoped`` declaration,
    as the dependency that guards it."""
    return Scoped(what, inner=inner).dependency()


def declared(route: APIRoute) -> list[Scoped]:
    """The scope declarations among a route's dependencies."""
    owners = (getattr(d.call, "__self__", None) for d in route.dependant.dependencies)
    return [owner for owner in owners if isinstance(owner, Scoped)]


def v1_routes(app: FastAPI) -> Iterator[tuple[str, str, APIRoute]]:
    """Every ``/v1`` route of the app: (method, full path, the route)."""
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
        if path.startswith("/v1/"):
            for method in sorted(route.methods or ()):
                yield method, path, route


def check_declared(app: FastAPI) -> None:
    """Refuse (RuntimeError) an app with a ``/v1`` route that declares what it touches
    not exactly once, or whose path parameters its declaration does not name: such a
    route would be reachable by every tenant's key."""
    for method, path, route in v1_routes(app):
        found = declared(route)
        where = f"{method} {path}"
        if len(found) != 1:
            raise RuntimeError(
                f"route {where} declares what it touches {len(found)} times: give it "
                "dependencies=[touches(Touches.X)] once (gateway_scopes.py)"
            )
        params = frozenset(route.param_convertors)
        if params != found[0].path_params:
            raise RuntimeError(
                f"route {where} has path parameters {sorted(params)}, but its declaration "
                f"Scoped({found[0].touches}) accounts for {sorted(found[0].path_params)}"
            )


def _no_session(session_id: str) -> GatewayError:
    return GatewayError(f"no session {session_id!r}", status=404, error_code="session_not_found")


async def session_agent(producer: Producer, session_id: str) -> str | None:
    """The agent a session belongs to (Redis, else the state store), None for none."""
    agent = await producer.queue.session_agent(session_id)
    if agent is not None:
        return agent
    record = await (await producer.state_store()).get_session(session_id)
    return None if record is None else record.agent


async def session_visible(producer: Producer, scope: KeyScope | None, session_id: str) -> bool:
    """True when the key may reach the session: the tenant's, and (a key limited to
    some agents) not another agent's. A session that does not exist yet is visible
    when its id is the tenant's: a first turn creates it."""
    if scope is None:
        return True
    if not scope.sees_session(session_id):
        return False
    if scope.agents is None:
        return True
    agent = await session_agent(producer, session_id)
    return agent is None or scope.may_run(agent)


def _visible(producer: Producer, scope: KeyScope) -> Callable[[str], Awaitable[bool]]:
    async def visible(session_id: str) -> bool:
        return await session_visible(producer, scope, session_id)

    return visible


async def enforce_scope(request: Request) -> None:
    """A dependency of every ``/v1`` route, before its ``Scoped`` one: a read-only key
    may not write, refused before anything is looked up."""
    scope = scope_of(request)
    if scope is not None and scope.read_only and request.method not in _READS:
        raise GatewayError(
            f"the API key {scope.name!r} is read-only", status=403, error_code="read_only"
        )


async def pool_wide(request: Request) -> None:
    """A dependency of routes about the whole pool (``/metrics``): not a tenant's, so
    a key with a prefix finds no such route."""
    scope = scope_of(request)
    if scope is not None and scope.prefix is not None:
        raise GatewayError("Not Found", status=404, error_code="not_found")
