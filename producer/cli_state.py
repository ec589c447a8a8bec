"""The ``reactq`` subcommands about stored state: branches, the audit log, the schema.

``reactq fork SESSION SEQUENCE``, ``reactq branches SESSION``, ``reactq switch
SESSION BRANCH``, ``reactq audit TURN_ID`` and ``reactq db upgrade``
(``reactq history --branch`` is in ``reactq.cli``).

A command that only reads never creates the state database: with an SQLite
file that does not exist yet, the session it asks about does not exist either,
and it says so (``SessionNotFoundError``) naming the file, instead of leaving an
empty database behind in whatever directory it ran from.

Their arguments are declared in ``reactq.cli.parser_state``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from reactq.producer.client import Producer
from reactq.producer.render import render
from reactq.shared.errors import SessionNotFoundError
from reactq.shared.events import Event
from reactq.shared.services import redact_url
from reactq.shared.settings import Settings
from reactq.shared.state.sql.store import upgrade


def database_label(settings: Settings) -> str:
    """The state database as a person should read it: the SQLite file's absolute path,
    or the URL with its password redacted."""
    path = settings.database_path
    return str(path) if path is not None else redact_url(settings.database_url)


def database_missing(settings: Settings) -> bool:
    """True when the state database is an SQLite file that does not exist (yet)."""
    path = settings.database_path
    return path is not None and not path.exists()


def session_not_found(settings: Settings, session_id: str) -> SessionNotFoundError:
    """The error of a command about a session the state database does not hold."""
    where = database_label(settings)
    if database_missing(settings):
        detail = f"the state database {where} does not exist yet"
    else:
        detail = f"it is not in the state database {where}"
    return SessionNotFoundError(
        f"no session {session_id!r}: {detail} (a session is stored once its first turn "
        "ends; workers and commands must share REACTQ_DATABASE_URL)",
        session_id=session_id,
    )


def require_database(settings: Settings, session_id: str) -> None:
    """Refuse, without creating it, to read a session from a database that does not exist."""
    if database_missing(settings):
        raise session_not_found(settings, session_id)


def announce_created(settings: Settings, existed: bool) -> None:
    """Say on stderr that this command created the SQLite state database (and where)."""
    path = settings.database_path
    if not existed and path is not None and path.exists():
        print(
            f"reactq: created the state database {path} (set REACTQ_DATABASE_URL to use another)",
            file=sys.stderr,
        )


async def _fork(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    require_database(settings, args.session)
    async with Producer(settings) as producer:
        branch = await producer.fork(
            args.session,
            args.sequence,
            branch=args.from_branch,
            new_branch=args.name,
            activate=not args.no_switch,
        )
    print(branch)
    return 0


async def _branches(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    require_database(settings, args.session)
    async with Producer(settings) as producer:
        branches = await producer.branches(args.session)
    if not branches:
        raise session_not_found(settings, args.session)
    for b in branches:
        if args.json:
            print(b.model_dump_json())
            continue
        origin = (
            "" if b.parent_branch_id is None else f"  from {b.parent_branch_id}@{b.fork_sequence}"
        )
        mark = "*" if b.active else " "
        print(f"{mark} {b.branch_id}  {b.length} messages{origin}")
    return 0


async def _switch(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    require_database(settings, args.session)
    async with Producer(settings) as producer:
        await producer.switch_branch(args.session, args.branch)
    print(f"{args.session}: active branch {args.branch}")
    return 0


async def _audit(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    events: list[Event] = []
    if not database_missing(settings):
        async with Producer(settings) as producer:
            events = await producer.turn_events(args.turn_id)
    if not events:
        print(
            f"reactq: no events of turn {args.turn_id} in the state database "
            f"{database_label(settings)}",
            file=sys.stderr,
        )
    for event in events:
        if args.json:
            print(event.model_dump_json())
            continue
        when = datetime.fromtimestamp(event.ts, UTC).strftime("%H:%M:%S.%f")[:-3]
        line = render(event) or json.dumps(event.model_dump(mode="json", exclude={"v"}))
        print(f"{when} #{event.attempt}.{event.seq:<3} {line}")
    return 0 if events else 1


async def _db(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    existed = not database_missing(settings)
    revision = await upgrade(settings.database_url, args.revision)
    announce_created(settings, existed)
    print(f"database schema at revision {revision}")
    return 0


STATE_HANDLERS: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "fork": _fork,
    "branches": _branches,
    "switch": _switch,
    "audit": _audit,
    "db": _db,
}
"""Subcommand -> its coroutine."""
