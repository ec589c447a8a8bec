"""The ``reactq`` subcommands about stored state: branches, the audit log, the schema.

``reactq fork SESSION SEQUENCE``, ``reactq branches SESSION``, ``reactq switch
SESSION BRANCH``, ``reactq audit TURN_ID`` and ``reactq db upgrade``
(``reactq history --branch`` is in ``reactq.cli``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from reactq.producer.client import Producer
from reactq.producer.render import render
from reactq.shared.settings import Settings
from reactq.shared.state.sql import upgrade


def add_state_commands(sub: Any) -> None:
    """Add the state subcommands to the ``reactq`` parser's subparsers."""
    f = sub.add_parser("fork", help="start a branch keeping messages 1..SEQUENCE; make it active")
    f.add_argument("session")
    f.add_argument("sequence", type=int, help="keep messages 1..SEQUENCE (0: an empty branch)")
    f.add_argument("--from-branch", default=None, help="the branch to fork (default: active)")
    f.add_argument("--name", default=None, help="the new branch's id (default: generated)")
    f.add_argument("--no-switch", action="store_true", help="leave the active branch as it is")

    b = sub.add_parser("branches", help="list a session's branches")
    b.add_argument("session")
    b.add_argument("--json", action="store_true")

    s = sub.add_parser("switch", help="make a branch the session's active branch")
    s.add_argument("session")
    s.add_argument("branch")

    a = sub.add_parser("audit", help="print every recorded event of a turn (the audit log)")
    a.add_argument("turn_id")
    a.add_argument("--json", action="store_true", help="one JSON event per line")

    db = sub.add_parser("db", help="the state database's schema")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    up = db_sub.add_parser("upgrade", help="apply the schema migrations (REACTQ_DATABASE_URL)")
    up.add_argument("--revision", default="head")


async def _fork(args: argparse.Namespace) -> int:

    async with Producer.from_env() as producer:
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

    async with Producer.from_env() as producer:
        branches = await producer.branches(args.session)
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

    async with Producer.from_env() as producer:
        await producer.switch_branch(args.session, args.branch)
    print(f"{args.session}: active branch {args.branch}")
    return 0


async def _audit(args: argparse.Namespace) -> int:

    async with Producer.from_env() as producer:
        events = await producer.turn_events(args.turn_id)
    for event in events:
        if args.json:
            print(event.model_dump_json())
            continue
        when = datetime.fromtimestamp(event.ts, UTC).strftime("%H:%M:%S.%f")[:-3]
        line = render(event) or json.dumps(event.model_dump(mode="json", exclude={"v"}))
        print(f"{when} #{event.attempt}.{event.seq:<3} {line}")
    return 0 if events else 1


async def _db(args: argparse.Namespace) -> int:
    revision = await upgrade(Settings.from_env().database_url, args.revision)
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
