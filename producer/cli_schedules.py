"""The ``reactq`` subcommands about scheduled turns: ``reactq schedule add|ls|pause|
resume|rm`` and ``reactq beat``, the process that fires them.

Their arguments are declared in ``reactq.cli.parser_state``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from reactq.producer.beat import run_beat
from reactq.producer.client import Producer
from reactq.producer.render import when
from reactq.shared.schedules import Schedule, next_tick
from reactq.shared.settings import Settings

__all__ = ["SCHEDULE_HANDLERS", "beat"]


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
