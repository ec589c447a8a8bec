"""The ``reactq`` subcommands about scheduled turns: ``reactq schedule add|ls|pause|
resume|rm`` and ``reactq beat``, the process that fires them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from reactq.producer.beat import run_beat
from reactq.producer.client import Producer
from reactq.producer.render import when
from reactq.shared.schedules import Schedule, next_tick
from reactq.shared.settings import Settings

__all__ = ["SCHEDULE_HANDLERS", "add_schedule_commands", "beat"]


def add_schedule_commands(sub: Any, command: Callable[..., Any]) -> None:
    """Add ``schedule`` and ``beat`` to the ``reactq`` parser's subparsers;
    ``command(sub, name, summary, details)`` makes one."""
    schedule = command(
        sub,
        "schedule",
        "add, list, pause, resume or remove scheduled turns",
        "Schedules live in the state database (REACTQ_DATABASE_URL); `reactq beat` fires "
        "them, submitting each tick's turn like `reactq send --no-follow`.",
    )
    verbs = schedule.add_subparsers(dest="schedule_command", required=True, metavar="COMMAND")
    add = command(
        verbs,
        "add",
        "schedule a turn",
        "CRON is five fields in UTC (minute hour day-of-month month day-of-week), such as "
        "'0 9 * * 1-5' for 09:00 on weekdays; or give --every SECONDS instead. A tick "
        "missed while no beat ran fires once, not once per missed tick.",
    )
    add.add_argument("cron", nargs="?", default=None, help="five cron fields, quoted (UTC)")
    add.add_argument("--every", type=int, default=None, metavar="SECONDS", help="or an interval")
    add.add_argument("--session", required=True, help="the session its turns run in")
    add.add_argument("--agent", required=True, help="the agent that runs them")
    add.add_argument("--message", required=True, help="the user message of each turn")
    add.add_argument("--json", action="store_true", help="the schedule as a JSON object")

    ls = command(verbs, "ls", "list schedules, oldest first", "Paused ones included.")
    ls.add_argument("--session", default=None, help="only this session's")
    ls.add_argument("--json", action="store_true", help="one JSON schedule per line")
    for verb, summary in (
        ("pause", "stop a schedule firing"),
        ("resume", "let a paused schedule fire again, from its next tick"),
        ("rm", "remove a schedule (the turns it submitted stay)"),
    ):
        one = command(verbs, verb, summary)
        one.add_argument("schedule_id", help="the schedule's id (sch_..., printed by add)")

    b = command(
        sub,
        "beat",
        "run Celery beat, firing the scheduled turns",
        "Reads the schedules every REACTQ_SCHEDULE_REFRESH_SECONDS and submits each due "
        "turn. Run one or more (each tick fires once however many run).",
    )
    b.add_argument(
        "--loglevel", default="INFO", metavar="LEVEL", help="DEBUG, INFO, WARNING (default INFO)"
    )
    b.add_argument(
        "--heartbeat-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="touch PATH each time the schedules are read (a liveness probe)",
    )


def _line(s: Schedule) -> str:
    state = "paused" if s.paused else f"next {when(next_tick(s, s.last_run_at or s.created_at))}"
    # last_run_at alone is a resume's mark, not a firing.
    last = "last -"
    if s.last_turn_id or s.last_error:
        last = f"last {when(s.last_run_at)} {s.last_turn_id or s.last_error}"
    return f"{s.schedule_id}  {s.spec!r}  {s.session_id}  {s.agent}  {state}  {last}"


async def _schedule(args: argparse.Namespace) -> int:
    async with Producer(Settings.from_env()) as producer:
        verb = args.schedule_command
        if verb == "add":
            found = await producer.add_schedule(
                args.session, args.message, agent=args.agent, cron=args.cron, every=args.every
            )
            print(found.model_dump_json() if args.json else f"added {_line(found)}")
        elif verb == "ls":
            for s in await producer.list_schedules(args.session):
                print(s.model_dump_json() if args.json else _line(s))
        elif verb == "pause":
            print(f"paused {_line(await producer.pause_schedule(args.schedule_id))}")
        elif verb == "resume":
            print(f"resumed {_line(await producer.resume_schedule(args.schedule_id))}")
        else:
            await producer.delete_schedule(args.schedule_id)
            print(f"removed {args.schedule_id}")
    return 0


def beat(args: argparse.Namespace) -> int:
    """``reactq beat``: run Celery beat until stopped."""
    settings = Settings.from_env()
    print(f"reactq beat: firing the schedules of {settings.namespace!r}", file=sys.stderr)
    return run_beat(settings, args.loglevel, args.heartbeat_file)


SCHEDULE_HANDLERS: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "schedule": _schedule,
}
"""Subcommand -> its coroutine."""
