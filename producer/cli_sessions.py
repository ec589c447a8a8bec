"""The ``reactq`` subcommands about sessions as a whole: ``reactq sessions ls|show|rm``,
``reactq turns SESSION`` and ``reactq truncate SESSION SEQUENCE``.

As in ``cli_state``, a command that only reads never creates the state database.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from reactq.producer.cli_state import require_database, session_not_found
from reactq.producer.client import Producer
from reactq.producer.render import when
from reactq.shared.errors import BranchNotFoundError, InvalidMetadataError
from reactq.shared.settings import Settings


def _metadata_pairs(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a VALUE that reads as JSON is that value, else the text."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise InvalidMetadataError(f"--metadata wants KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def add_sessions_commands(sub: Any, command: Callable[..., Any]) -> None:
    """Add ``sessions``, ``turns`` and ``truncate`` to the ``reactq`` parser's
    subparsers; ``command(sub, name, summary, details)`` makes one."""
    sessions = command(
        sub,
        "sessions",
        "list, show or delete sessions",
        "From the state database (REACTQ_DATABASE_URL); `rm` also clears the session's "
        "queue and events in Redis and its workspace.",
    )
    sessions_sub = sessions.add_subparsers(
        dest="sessions_command", required=True, metavar="COMMAND"
    )
    ls = command(sessions_sub, "ls", "list sessions, newest first", "Filters combine.")
    ls.add_argument("--agent", default=None, help="only this agent's sessions")
    ls.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only sessions whose metadata has KEY with VALUE (JSON or text); repeatable",
    )
    ls.add_argument(
        "--updated-since", type=float, default=None, metavar="UNIX_TIME", help="written since"
    )
    ls.add_argument("--limit", type=int, default=50, help="sessions a page (default 50)")
    ls.add_argument("--cursor", default=None, help="the page after this one (printed on stderr)")
    ls.add_argument("--json", action="store_true", help="one JSON session per line")

    show = command(
        sessions_sub,
        "show",
        "a session's summary",
        "Agent, active branch, messages, turns, the last turn, token usage, metadata.",
    )
    show.add_argument("session", help="the conversation's id")
    show.add_argument("--json", action="store_true", help="one JSON object")

    rm = command(
        sessions_sub,
        "rm",
        "delete a session",
        "Its state, queue, events and workspace; queued turns are cancelled first. Refused "
        "while a turn runs unless --force, which cancels it and waits for it to stop. The "
        "audit log keeps its events.",
    )
    rm.add_argument("session", help="the conversation's id")
    rm.add_argument("--force", action="store_true", help="cancel a running turn first")

    turns = command(
        sub,
        "turns",
        "list a session's turns",
        "Oldest first: id, status, attempt, tokens, submitted, started and ended times.",
    )
    turns.add_argument("session", help="the conversation's id")
    turns.add_argument("--json", action="store_true", help="one JSON turn per line")

    cut = command(
        sub,
        "truncate",
        "delete a branch's messages after SEQUENCE",
        "Messages the branch inherited stay, and a branch forked inside the cut keeps its "
        "history (`reactq history` numbers the messages).",
    )
    cut.add_argument("session", help="the conversation's id")
    cut.add_argument("sequence", type=int, help="keep messages 1..SEQUENCE")
    cut.add_argument("--branch", default=None, help="the branch (default: the active one)")


async def _sessions(args: argparse.Namespace) -> int:
    handler = {"ls": _ls, "show": _show, "rm": _rm}[args.sessions_command]
    return await handler(args)


async def _ls(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    wanted = _metadata_pairs(args.metadata)
    if settings.database_path is not None and not settings.database_path.exists():
        return 0  # no database yet: no sessions, and none is created by looking
    async with Producer(settings) as producer:
        page = await producer.list_sessions(
            agent=args.agent,
            metadata=wanted or None,
            updated_since=args.updated_since,
            limit=args.limit,
            cursor=args.cursor,
        )
    for s in page.sessions:
        if args.json:
            print(s.model_dump_json(exclude={"fence"}))
            continue
        tags = " ".join(f"{k}={json.dumps(v)}" for k, v in s.metadata.items())
        print(
            f"{s.session_id}  {s.agent}  {s.active_branch}  updated {when(s.updated_at)}"
            + (f"  {tags}" if tags else "")
        )
    if page.next_cursor:
        print(f"reactq: more sessions: --cursor {page.next_cursor}", file=sys.stderr)
    return 0


async def _show(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    require_database(settings, args.session)
    async with Producer(settings) as producer:
        detail = await producer.get_session(args.session)
    if detail is None:
        raise session_not_found(settings, args.session)
    if args.json:
        print(detail.model_dump_json())
        return 0
    last = detail.last_turn
    lines = [
        f"session        {detail.session_id}",
        f"agent          {detail.agent}",
        f"active branch  {detail.active_branch} ({detail.message_count} messages, "
        f"{detail.branches} branches)",
        f"turns          {detail.turns} ({detail.queued} queued"
        + (f", {detail.running_turn} running" if detail.running_turn else "")
        + ")",
        "last turn      "
        + ("-" if last is None else f"{last.turn_id} {last.status} {when(last.ended_at)}"),
        f"tokens         {detail.usage.get('total_tokens', 0)}",
        f"created        {when(detail.created_at)}",
        f"updated        {when(detail.updated_at)}",
        f"metadata       {json.dumps(detail.metadata, ensure_ascii=False)}",
    ]
    print("\n".join(lines))
    return 0


async def _rm(args: argparse.Namespace) -> int:
    async with Producer(Settings.from_env()) as producer:
        deleted = await producer.delete_session(args.session, force=args.force)
    cancelled = f", cancelled {' '.join(deleted.cancelled)}" if deleted.cancelled else ""
    workspace = ", its workspace" if deleted.workspace_deleted else ""
    print(f"deleted session {deleted.session_id}{workspace}{cancelled}")
    return 0


async def _turns(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    require_database(settings, args.session)
    async with Producer(settings) as producer:
        turns = await producer.session_turns(args.session)
        if not turns and await producer.get_session(args.session) is None:
            raise session_not_found(settings, args.session)
    for t in turns:
        if args.json:
            print(t.model_dump_json())
            continue
        print(
            f"{t.turn_id}  {t.status:<17} attempt {t.attempt}  "
            f"tokens {t.usage.get('total_tokens', 0):<6} submitted {when(t.submitted_at)}  "
            f"started {when(t.started_at)}  ended {when(t.ended_at)}"
        )
    return 0


async def _truncate(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    require_database(settings, args.session)
    async with Producer(settings) as producer:
        branches = await producer.branches(args.session)
        if not branches:
            raise session_not_found(settings, args.session)
        if args.branch is not None and args.branch not in {b.branch_id for b in branches}:
            raise BranchNotFoundError(
                f"session {args.session!r} has no branch {args.branch!r}", branch_id=args.branch
            )
        await producer.truncate(args.session, args.sequence, branch=args.branch)
    print(
        f"{args.session}: kept messages 1..{args.sequence} of {args.branch or 'the active branch'}"
    )
    return 0


SESSIONS_HANDLERS: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "sessions": _sessions,
    "turns": _turns,
    "truncate": _truncate,
}
"""Subcommand -> its coroutine."""
