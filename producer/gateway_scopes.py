"""Scoped API keys: a tenant's session-id prefix, the agents a key may run, read-only.

An entry of ``REACTQ_API_KEYS`` (itself comma-separated) is::

    key                                   full access, named key1, key2... by position
    name:key                              full access, named
    name:key;prefix=acme-;agents=a|b;ro   scoped

``;`` separates a key from its scopes and ``|`` the agents of ``agents=``: neither
can occur in a session id or an agent name, and neither is the list's ``,``. Any
other scope, an empty one, or one given twice is a ConfigError naming the entry
by its position and name (never its key).

A scoped key answers 404 for any session outside its prefix, any turn of one, and any
long-term store namespace whose dotted name does not start with the prefix, decided
from the id alone, so the answer says nothing about what exists; a
read-only key gets 403 ``read_only`` on every write, before anything is looked up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from reactq.producer.gateway_errors import GatewayError
from reactq.shared.errors import ConfigError

_PREFIX = re.compile(r"[A-Za-z0-9._:-]{1,127}")
_AGENT = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_READS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class KeyScope:
    """Who a key is and what it may reach."""

    name: str
    """The key's name: the decider recorded for its approvals."""
    prefix: str | None = None
    """Only sessions whose id starts with it (None: every session)."""
    agents: frozenset[str] | None = None
    """Only these agents may be submitted to (None: any)."""
    read_only: bool = False
    """True: every write is refused (403 ``read_only``)."""

    @property
    def unrestricted(self) -> bool:
        """True for a key without scopes (today's full access)."""
        return self.prefix is None and self.agents is None and not self.read_only

    def sees_session(self, session_id: str) -> bool:
        """True when the session is the key's tenant's."""
        return self.prefix is None or session_id.startswith(self.prefix)

    def sees_namespace(self, namespace: str) -> bool:
        """True when the long-term store's namespace (dotted) is the key's tenant's: its
        dotted name starts with the prefix, as a session id does."""
        return self.prefix is None or namespace.startswith(self.prefix)

    def may_run(self, agent: str) -> bool:
        """True when the key may submit turns to ``agent``."""
        return self.agents is None or agent in self.agents


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
        name,
        prefix=found.get("prefix"),
        agents=found.get("agents"),
        read_only=found.get("ro", False),
    )


def scope_of(request: Request) -> KeyScope | None:
    """The scope of the request's key (None when the gateway has no keys)."""
    scope: KeyScope | None = request.app.state.gateway.keys.scope_of_headers(request.headers.raw)
    return scope


def _not_found(session_id: str | None) -> GatewayError:
    if session_id is None:
        return GatewayError("no such turn", status=404, error_code="turn_not_found")
    return GatewayError(f"no session {session_id!r}", status=404, error_code="session_not_found")


async def enforce_scope(request: Request) -> None:
    """A dependency of every ``/v1`` route: a read-only key may not write, and a
    tenant's key reaches its sessions (``{session_id}``) and their turns (``{turn_id}``)
    only."""
    scope = scope_of(request)
    if scope is None or scope.unrestricted:
        return
    if scope.read_only and request.method not in _READS:
        raise GatewayError(
            f"the API key {scope.name!r} is read-only", status=403, error_code="read_only"
        )
    if scope.prefix is None:
        return
    session_id = request.path_params.get("session_id")
    if session_id is not None and not scope.sees_session(session_id):
        raise _not_found(session_id)
    namespace = request.path_params.get("namespace")
    if namespace is not None and not scope.sees_namespace(namespace):
        raise GatewayError(
            f"no namespace {namespace!r}", status=404, error_code="document_not_found"
        )
    turn_id = request.path_params.get("turn_id")
    if turn_id is not None:
        info = await request.app.state.gateway.producer.turn_info(turn_id)
        if info is None or not scope.sees_session(info.session_id):
            raise _not_found(None)


async def pool_wide(request: Request) -> None:
    """A dependency of routes about the whole pool (``/metrics``): not a tenant's, so
    a key with a prefix finds no such route."""
    scope = scope_of(request)
    if scope is not None and scope.prefix is not None:
        raise GatewayError("Not Found", status=404, error_code="not_found")
