"""The ``reactq`` subcommands about sessions as a whole: ``reactq sessions ls|show|rm``,
``reactq turns SESSION`` and ``reactq truncate SESSION SEQUENCE``.

As in ``cli_state``, a command that only reads never creates the state database.

Their arguments are declared in ``reactq.cli.parser_state``.
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
