"""The arguments of the ``reactq`` subcommands about stored state, sessions, schedules
and the pool's agents (their handlers are in ``reactq.producer.cli_state``,
``cli_sessions``, ``cli_schedules`` and ``cli_agents``, imported only when one runs).

Each ``add_*`` function adds its commands to the ``reactq`` parser's subparsers;
``command(sub, name, summary, details, handlers=...)`` (``reactq.cli.parser``) makes one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

STATE = "reactq.producer.cli_state:STATE_HANDLERS"
SESSIONS = "reactq.producer.cli_sessions:SESSIONS_HANDLERS"
SCHEDULE = "reactq.producer.cli_schedules:SCHEDULE_HANDLERS"
AGENTS = "reactq.producer.cli_agents:AGENTS_HANDLERS"
LOCAL = "reactq.cli.local:HANDLERS"
"""The commands that run something in this process: worker, run, demo, serve, flower, beat,
and errors."""


def add_state_commands(sub: Any, command: Callable[..., Any]) -> None:
    """Add the state subcommands to the ``reactq`` parser's subparsers; ``command(sub,
    name, summary, details)`` makes one (``reactq.cli`` gives each a description)."""
    f = command(
        sub,
        "fork",
        "start a branch keeping messages 1..SEQUENCE; make it active",
        "Edit a turn: fork before it, then send the new message. The original line stays.",
        handlers=STATE,
    )
    f.add_argument("session", help="the conversation's id")
    f.add_argument("sequence", type=int, help="keep messages 1..SEQUENCE (0: an empty branch)")
    f.add_argument("--from-branch", default=None, help="the branch to fork (default: active)")
    f.add_argument("--name", default=None, help="the new branch's id (default: generated)")
    f.add_argument("--no-switch", action="store_true", help="leave the active branch as it is")

    b = command(
        sub,
        "branches",
        "list a session's branches",
        "The active one is marked with *. An unknown session is an error.",
        handlers=STATE,
    )
    b.add_argument("session", help="the conversation's id")
    b.add_argument("--json", action="store_true", help="one JSON branch per line")

    s = command(
        sub,
        "switch",
        "make a branch the session's active branch",
        "The next turn runs on it.",
        handlers=STATE,
    )
    s.add_argument("session", help="the conversation's id")
    s.add_argument("branch", help="the branch's id (see `reactq branches`)")

    a = command(
        sub,
        "audit",
        "print every recorded event of a turn (the audit log)",
        "From the state database, long after the Redis stream expired; exits 1 when the "
        "turn has no recorded event.",
        handlers=STATE,
    )
    a.add_argument("turn_id", help="the turn's id (t_...)")
    a.add_argument("--json", action="store_true", help="one JSON event per line")

    db = command(
        sub,
        "db",
        "the state database's schema",
        "SQLite upgrades itself; run `reactq db upgrade` on PostgreSQL before a release's "
        "workers start.",
        handlers=STATE,
    )
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    up = command(
        db_sub,
        "upgrade",
        "apply the schema migrations (REACTQ_DATABASE_URL)",
        "Creates the database's tables when it has none.",
    )
    up.add_argument("--revision", default="head", help="the revision to reach (default head)")


def add_sessions_commands(sub: Any, command: Callable[..., Any]) -> None:
    """Add ``sessions``, ``turns`` and ``truncate`` to the ``reactq`` parser's
    subparsers; ``command(sub, name, summary, details)`` makes one."""
    sessions = command(
        sub,
        "sessions",
        "list, show or delete sessions",
        "From the state database (REACTQ_DATABASE_URL); `rm` also clears the session's "
        "queue and events in Redis and its workspace.",
        handlers=SESSIONS,
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
        handlers=SESSIONS,
    )
    turns.add_argument("session", help="the conversation's id")
    turns.add_argument("--json", action="store_true", help="one JSON turn per line")

    cut = command(
        sub,
        "truncate",
        "delete a branch's messages after SEQUENCE",
        "Messages the branch inherited stay, and a branch forked inside the cut keeps its "
        "history (`reactq history` numbers the messages).",
        handlers=SESSIONS,
    )
    cut.add_argument("session", help="the conversation's id")
    cut.add_argument("sequence", type=int, help="keep messages 1..SEQUENCE")
    cut.add_argument("--branch", default=None, help="the branch (default: the active one)")


def add_schedule_commands(sub: Any, command: Callable[..., Any]) -> None:
    """Add ``schedule`` and ``beat`` to the ``reactq`` parser's subparsers;
    ``command(sub, name, summary, details)`` makes one."""
    schedule = command(
        sub,
        "schedule",
        "add, list, pause, resume or remove scheduled turns",
        "Schedules live in the state database (REACTQ_DATABASE_URL); `reactq beat` fires "
        "them, submitting each tick's turn like `reactq send --no-follow`.",
        handlers=SCHEDULE,
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
        handlers=LOCAL,
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


def add_agents_commands(sub: Any, command: Callable[..., Any]) -> None:
    """Add ``agents`` and ``tools`` to the ``reactq`` parser's subparsers;
    ``command(sub, name, summary, details)`` makes one."""
    agents = command(
        sub,
        "agents",
        "list the agents the pool hosts",
        "Every agent a worker announced in Redis: its version, whether a worker hosting it "
        "is live (beat within REACTQ_HEARTBEAT_SECONDS), and how many tools it offers. A "
        "name live with two definitions (config versions) has a line for each, and a "
        "warning on stderr, until one is gone.",
        handlers=AGENTS,
    )
    agents.add_argument("--json", action="store_true", help="one JSON agent per line")
    tools = command(
        sub,
        "tools",
        "list an agent's tools",
        "The tools the agent's model sees, as its workers published them: each one's "
        "category (read, write, meta), source (local, bundle, mcp, builtin) and, with "
        "--json, its JSON schema.",
        handlers=AGENTS,
    )
    tools.add_argument("agent", help="the agent's name")
    tools.add_argument("--json", action="store_true", help="one JSON object: the catalogue")
