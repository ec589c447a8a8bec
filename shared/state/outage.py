"""Riding out a state database that does not answer for a while.

A database restart (``pg_ctl -m fast stop``, a failover, a SQLite file on a volume
that blinked) must cost a worker's turns latency, never the turns. ``ride`` runs
one store call and, while it fails for a reason that says the database is away
(``is_outage``), runs it again with jittered exponential backoff, up to the outage
budget (``REACTQ_STORE_OUTAGE_SECONDS``); past it, ``StoreUnavailableError``.

Only the connection-level failures count: a refused or reset connection, the
server shutting down or starting up, SQLite locked past its busy retries or its
file unreadable. A refusal of the store's own (a stale fence, a turn committed
already, a constraint) is an answer, raised at once.

Repeating a call is safe for what a worker's turn does: a call that failed before
it reached the database wrote nothing; one whose answer was lost after the
database ran it is repeated, and every turn step is either idempotent
(``ensure_session``, ``claim`` and ``begin_turn`` with the same token, a
checkpoint's upsert) or refuses a second run (``commit_turn``: TurnCommittedError,
which the drain reads as "committed").
"""

from __future__ import annotations

import asyncio
import logging
import random
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError

from reactq.shared.errors import ReactqError, StoreUnavailableError

__all__ = ["is_outage", "ride"]

log = logging.getLogger("reactq.state")
T = TypeVar("T")

_PG_AWAY = ("08", "53", "57P01", "57P02", "57P03")
"""SQLSTATEs of a server that is away: connection exceptions, insufficient resources
(too many connections, out of memory or disk), admin or crash shutdown,
cannot connect now (starting up or shutting down)."""
_SQLITE_AWAY = ("database is locked", "database is busy", "disk i/o error", "unable to open")
_FIRST_DELAY = 0.05
_MAX_DELAY = 2.0


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is away for now (not that it refused)."""
    if isinstance(exc, ReactqError):
        return False  # the store's own answer: a fence, a commit, a missing session
    if isinstance(exc, DisconnectionError):
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        orig = exc.orig
        state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
        if isinstance(state, str):
            return state.startswith(_PG_AWAY)
        if isinstance(orig, sqlite3.OperationalError):
            return str(orig).lower().startswith(_SQLITE_AWAY)
        # asyncpg's connection errors without a SQLSTATE (a closed connection), as the
        # adapter wraps them.
        return isinstance(exc, InterfaceError | OperationalError) and _no_connection(orig)
    # A connect the server refused or reset: asyncpg raises the socket's own errors,
    # and a connect that hangs, TimeoutError (an OSError).
    return isinstance(exc, ConnectionError | TimeoutError) or _no_connection(exc)


def _no_connection(exc: BaseException | None) -> bool:
    """asyncpg's "the connection is gone" errors, found by name: the driver is an
    optional extra, not imported here."""
    while exc is not None:
        name = type(exc).__name__
        if name in ("ConnectionDoesNotExistError", "InternalClientError", "ConnectionResetError"):
            return True
        if isinstance(exc, ConnectionError):
            return True
        exc = exc.__cause__
    return False


async def ride(call: Callable[[], Awaitable[T]], budget: float, what: str = "a store call") -> T:
    """``call()``, repeated while the database is away, for up to ``budget`` seconds
    from its first failure; then StoreUnavailableError (from the last failure).

    ``budget`` 0: one try, its error as it is (callers that must answer at once).
    """
    if budget <= 0:
        return await call()
    delay, since = _FIRST_DELAY, None
    while True:
        try:
            result = await call()
        except Exception as exc:
            if not is_outage(exc):
                raise
            now = time.monotonic()
            if since is None:
                since = now
                log.warning(
                    "state database does not answer (%s: %.200s); retrying %s for up to %gs",
                    type(exc).__name__,
                    " ".join(str(exc).split()),
                    what,
                    budget,
                )
            left = since + budget - now
            if left <= 0:
                raise StoreUnavailableError(
                    f"the state database did not answer for {now - since:.1f}s "
                    f"(REACTQ_STORE_OUTAGE_SECONDS={budget:g}): {type(exc).__name__}",
                    waited=round(now - since, 1),
                ) from exc
            # Equal jitter: never hammering a server that is starting, and many
            # waiting turns do not come back in step.
            await asyncio.sleep(min(left, delay / 2 + random.uniform(0, delay / 2)))
            delay = min(delay * 2, _MAX_DELAY)
            continue
        if since is not None:
            log.info(
                "state database answers again: %s went through after %.1fs",
                what,
                time.monotonic() - since,
            )
        return result
