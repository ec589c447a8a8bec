"""The ``reactq`` command.

Producer-side commands (send, watch, history) live here; the worker-side ones
(worker, run, demo) are in ``worker.cli`` and are imported only when invoked, so
the producer package itself never depends on the worker.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from shared.errors import ReactqError
from shared.events import FinalEvent
from shared.turns import MultitaskStrategy, TurnStatus

WORKER_COMMANDS = ("worker", "run", "demo")


def _print_event(event: Any, as_json: bool) -> None:
    from producer.render import render

    if as_json:
        print(event.model_dump_json(), flush=True)
        return
    line = render(event)
    if line is not None:
        print(line, flush=True)


async def _send(args: argparse.Namespace) -> int:
    from producer.client import Producer

    async with Producer.from_env() as producer:
        handle = await producer.submit(
            args.session, args.message, agent=args.agent, strategy=args.strategy
        )
        if args.no_follow:
            print(handle.turn_id)
            return 0
        final: FinalEvent | None = None
        async for event in handle.events():
            _print_event(event, args.json)
            if isinstance(event, FinalEvent):
                final = event
        return 0 if final is not None and final.status == TurnStatus.COMPLETED else 1


async def _watch(args: argparse.Namespace) -> int:
    from producer.client import Producer

    async with Producer.from_env() as producer:
        async for event in producer.subscribe(args.session, after=args.from_id):
            _print_event(event, args.json)
    return 0


async def _history(args: argparse.Namespace) -> int:
    from producer.client import Producer

    async with Producer.from_env() as producer:
        messages = await producer.history(args.session)
    for m in messages:
        if args.json:
            print(m.model_dump_json(exclude_none=True))
            continue
        if m.tool_calls:
            calls = ", ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
            print(f"{m.role:>9}: {m.content + ' ' if m.content else ''}[calls {calls}]")
        elif m.role == "tool":
            print(f"{'tool':>9}: {m.name} -> {m.content}")
        else:
            print(f"{m.role:>9}: {m.content}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="reactq", description="Run ReAct agents as a horizontally scaled worker pool."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    w = sub.add_parser("worker", help="run a worker process hosting some agents")
    w.add_argument(
        "--agents",
        action="append",
        default=[],
        metavar="MODULE[:ATTR]",
        help="agent definitions to host (repeatable; or REACTQ_AGENTS)",
    )
    w.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="turns in flight in this process (default REACTQ_CONCURRENCY or 100)",
    )
    w.add_argument("--loglevel", default="INFO")

    s = sub.add_parser("send", help="submit a turn and stream its events")
    s.add_argument("session")
    s.add_argument("message")
    s.add_argument("--agent", required=True)
    s.add_argument("--strategy", default="enqueue", choices=[m.value for m in MultitaskStrategy])
    s.add_argument("--no-follow", action="store_true", help="print the turn id and return")
    s.add_argument("--json", action="store_true", help="one JSON event per line")

    wa = sub.add_parser("watch", help="follow a session's events (replay with --from)")
    wa.add_argument("session")
    wa.add_argument(
        "--from",
        dest="from_id",
        default=None,
        metavar="EVENT_ID",
        help="replay after this event id ('0' for the whole stream)",
    )
    wa.add_argument("--json", action="store_true")

    h = sub.add_parser("history", help="print a session's conversation")
    h.add_argument("session")
    h.add_argument("--json", action="store_true")

    r = sub.add_parser("run", help="run one turn in-process (no broker; SQLite state)")
    r.add_argument("message")
    r.add_argument("--agents", action="append", default=[], metavar="MODULE[:ATTR]")
    r.add_argument("--agent", default=None, help="which agent, when several are loaded")
    r.add_argument("--session", default="local")
    r.add_argument("--json", action="store_true")

    d = sub.add_parser("demo", help="a demo of the pool (or in-process without Redis)")
    d.add_argument("--sessions", type=int, default=4)
    d.add_argument("--in-process", action="store_true", help="skip the pool even if Redis answers")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``reactq`` console script."""
    args = build_parser().parse_args(argv)
    try:
        if args.command in WORKER_COMMANDS:
            worker_cli = importlib.import_module("worker.cli")
            code = worker_cli.main(args)
        else:
            handler = {"send": _send, "watch": _watch, "history": _history}[args.command]
            code = asyncio.run(handler(args))
    except ReactqError as exc:
        print(f"reactq: error: {exc.message} [{exc.code}]", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
