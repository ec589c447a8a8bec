"""What the route modules share, declared once: the one dependency style (``GatewayDep``
for the gateway, ``ScopeDep`` for the key's scope, ``CallerDep`` for its name), the
guards every ``/v1`` route runs, the path and query types, and the refusal of query
parameters a route does not take."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi import Path as PathParam
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import StringConstraints

from reactq.producer.gateway.errors import GatewayError
from reactq.producer.gateway.models import (
    AGENT_PATTERN,
    KEY_PATTERN,
    NAMESPACE_PATTERN,
    TURN_ID_PATTERN,
)
from reactq.producer.gateway.scopes import enforce_scope, scope_of
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway, gateway_of
from reactq.producer.gateway.text import refuse_unencodable
from reactq.shared.schedules import SCHEDULE_ID_PATTERN
from reactq.shared.turns import SESSION_ID_RE

__all__ = [
    "GUARDS",
    "AgentName",
    "CallerDep",
    "DocumentKey",
    "GatewayDep",
    "MetadataPair",
    "Namespace",
    "ScheduleId",
    "ScopeDep",
    "SessionId",
    "TurnId",
    "metadata_filter",
    "only_query",
    "require_key",
]

GatewayDep = Annotated[Gateway, Depends(gateway_of)]
"""A route parameter that receives the gateway (``gateway.producer`` is its producer)."""

ScopeDep = Annotated[KeyScope | None, Depends(scope_of)]
"""A route parameter that receives the request's key's scope (None without keys)."""

_bearer = HTTPBearer(auto_error=False, description="One of the keys in REACTQ_API_KEYS")


def _key_of(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str | None:
    # X-Api-Key is how LangGraph's SDKs send api_key=; taken, but left out of the OpenAPI
    # document, whose one scheme stays the bearer token.
    return credentials.credentials if credentials else request.headers.get("x-api-key")


async def require_key(
    gateway: GatewayDep,
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> None:
    """401 unless the request carries one of the keys (or the gateway has none), as
    ``Authorization: Bearer KEY`` or ``X-Api-Key: KEY``."""
    if not gateway.keys.accepts(_key_of(request, credentials)):
        raise GatewayError(
            "a valid API key is required: send 'Authorization: Bearer KEY'",
            status=401,
            error_code="unauthorized",
        )


async def _caller(
    gateway: GatewayDep,
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> str | None:
    return gateway.keys.identify(_key_of(request, credentials))


CallerDep = Annotated[str | None, Depends(_caller)]
"""A route parameter that receives the name of the request's key (None without keys)."""

# The key first (401), then read-only (403), then text UTF-8 cannot carry in a write's
# body (422, before anything is stored); each route's ``touches`` declaration then
# answers 404 outside the key's tenant and agents.
GUARDS = [Depends(require_key), Depends(enforce_scope), Depends(refuse_unencodable)]
"""The dependencies of every ``/v1`` router, before each route's own."""

SessionId = Annotated[
    str,
    PathParam(
        pattern=SESSION_ID_RE.pattern,
        description="The session (1-128 of [A-Za-z0-9._:-], not '.' or '..')",
    ),
]
"""A ``{session_id}`` path parameter."""
TurnId = Annotated[str, PathParam(pattern=TURN_ID_PATTERN, description="The turn's id")]
"""A ``{turn_id}`` path parameter."""
CallId = Annotated[
    str,
    PathParam(pattern=r"^[A-Za-z0-9_.:-]{1,128}$", description="A tool call's id (as the model's)"),
]
"""A ``{call_id}`` path parameter: a tool call's id."""
AgentName = Annotated[str, PathParam(pattern=AGENT_PATTERN, description="The agent's name")]
"""An agent's ``{name}`` path parameter."""
ScheduleId = Annotated[
    str, PathParam(pattern=SCHEDULE_ID_PATTERN, description="The schedule (sch_ + 16 hex)")
]
"""A ``{schedule_id}`` path parameter."""
Namespace = Annotated[
    str,
    PathParam(
        pattern=NAMESPACE_PATTERN,
        description="The namespace, dotted: 1-8 segments of [A-Za-z0-9_:@+-] (users.u-42)",
    ),
]
"""A long-term store ``{namespace}`` path parameter."""
DocumentKey = Annotated[
    str, PathParam(pattern=KEY_PATTERN, description="The document's key: [A-Za-z0-9._:@+-]")
]
"""A long-term store document's ``{key}`` path parameter."""

MetadataPair = Annotated[str, StringConstraints(pattern=r"^[^=]+=")]
"""A ``metadata`` (or ``filter``) query value of a listing: KEY=VALUE."""


def metadata_filter(pairs: list[MetadataPair]) -> dict[str, Any] | None:
    """``KEY=VALUE`` pairs as a filter: a VALUE that reads as JSON is that value
    (``tier=2`` the number), else the text (``user=u-1``)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, _, raw = pair.partition("=")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out or None


def only_query(*names: str) -> Any:
    """A dependency refusing query parameters other than ``names`` (422
    ``invalid_request``, ``field`` naming it): a misspelt filter would otherwise be
    ignored and list everything."""

    async def check(request: Request) -> None:
        for name in request.query_params:
            if name not in names:
                raise GatewayError(
                    f"unknown query parameter {name[:60]!r}"
                    + (f": use {', '.join(names)}" if names else ""),
                    status=422,
                    error_code="invalid_request",
                    field=f"query.{name[:60]}",
                )

    return Depends(check)
