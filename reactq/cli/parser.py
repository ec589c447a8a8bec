"""The ``reactq`` command's arguments: every subcommand declared, none of them imported.

Building the parser imports no Celery, SQLAlchemy, openai or ``Producer``: each
top-level command names the module that runs it (``handlers=``), and
``reactq.cli.main`` imports that module only when the command runs, so ``reactq
--help`` (and a typo's usage line) answers at once. The state, sessions, schedules
and agents subcommands are declared in ``reactq.cli.parser_state``.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

import reactq
from reactq.cli.parser_state import (
    LOCAL,
    add_agents_commands,
    add_schedule_commands,
    add_sessions_commands,
    add_state_commands,
)

TURNS = "reactq.cli.turns:HANDLERS"
"""The commands run through a ``Producer``: send, watch, cancel, undo, approve, deny, history."""

GATEWAY_HELP = "go through a reactq gateway over HTTP (key from REACTQ_API_KEY) instead of Redis"

MAIN_EPILOG = """\
settings (environment variables; every one in docs/configuration.md):
  REACTQ_REDIS_URL     Redis for events, leases and session queues
                       (default redis://localhost:6379/0)
  REACTQ_NAMESPACE     prefix of every Redis key and Celery queue: workers and
                       commands must share it (default reactq)
  REACTQ_DATABASE_URL  the state database (default: SQLite in
                       $XDG_DATA_HOME/reactq/state.db, ~/.local/share/reactq/state.db,
                       the same from every directory)

Errors print one line, `reactq: error: <message> [<code>]` (a JSON object with
--json) and exit with status 2, or 3 when Redis, the broker or the database
cannot be used.
"""

SEND_EPILOG = """\
exit status:
  0    the turn completed (or, with --no-follow, was queued)
  1    the turn ended otherwise: error, cancelled, max_iterations, budget_exceeded
  2    the turn was refused (bad session id or message, unknown agent, another
       agent's session, the reject strategy) or a setting is invalid: nothing queued
  3    Redis, the broker or the state database could not be used
  130  interrupted (Ctrl-C); the turn goes on in the pool

When no worker hosting the agent has been seen within REACTQ_HEARTBEAT_SECONDS,
send says so on stderr: the turn waits in the queue until one starts.
"""

STRATEGIES = ("enqueue", "reject", "interrupt", "rollback")
"""``MultitaskStrategy``'s values, spelled out so that building the parser loads no
pydantic model (tests/test_lazy_imports.py checks that the two agree)."""

STRATEGY_HELP = (
    "what the turn does when its session already has one running or queued: "
    "enqueue (default) waits its turn; reject refuses it; interrupt stops the running turn, "
    "keeps what it did so far, drops the queued ones and runs on top; rollback stops the "
    "running turn, discards it (and drops the queued ones) and runs on the state before it"
)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilogs' tables as written; wraps the rest."""


def _command(
    sub: Any,
    name: str,
    summary: str,
    details: str = "",
    *,
    handlers: str | None = None,
    **kwargs: Any,
) -> Any:
    """A subcommand whose one-line ``summary`` shows in ``reactq --help`` and opens its own.

    ``handlers`` (a top-level command's): ``"module:TABLE"``, the table in that module
    that maps the command's name to the function running it; ``reactq.cli.main``
    imports the module only when the command runs.
    """
    description = f"{summary[0].upper()}{summary[1:]}."
    if details:
        description += "\n\n" + textwrap.fill(details, 79)
    parser = sub.add_parser(
        name, help=summary, description=description, formatter_class=_Formatter, **kwargs
    )
    if handlers is not None:
        parser.set_defaults(handlers=handlers)
    return parser


class _DeprecatedAlias(argparse.Action):
    """An old spelling of an option: it still works, says which to use, and hides from --help."""

    def __init__(self, *args: Any, use: str, **kwargs: Any) -> None:
        self.use = use
        super().__init__(*args, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        print(f"reactq: {option} is deprecated: use {self.use}", file=sys.stderr)
        setattr(namespace, self.dest, values)


class _Version(argparse.Action):
    """``--version``: the installed version, read from the package's metadata only when
    asked for (``importlib.metadata`` is a fifth of ``reactq --help``'s imports)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        print(f"reactq {reactq.__version__}")
        parser.exit()


def _waiting_call(command: argparse.ArgumentParser) -> None:
    """The arguments naming a call a turn waits for (approve, deny, complete)."""
    command.add_argument("turn_id", help="the turn's id (t_...)")
    command.add_argument("call_id", help="the waiting call's id")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="reactq",
        description=textwrap.fill(
            "Run ReAct agents as a horizontally scaled worker pool: workers run the turns "
            "that producers (this command, Python, the HTTP gateway) put on the queue.",
            79,
        ),
        epilog=MAIN_EPILOG,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action=_Version, help="print the version")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    w = _command(
        sub,
        "worker",
        "run a worker process hosting some agents",
        "Consumes the turns of its agents' queues until stopped (SIGTERM finishes the running "
        "turns first). Start as many as you like, on any machine that reaches Redis.",
        handlers=LOCAL,
    )
    w.add_argument(
        "--agents",
        action="append",
        default=[],
        metavar="MODULE[:ATTR]",
        help="agent definitions to host (repeatable; or REACTQ_AGENTS); the current "
        "directory is searched first",
    )
    w.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="turns in flight in this process (default REACTQ_CONCURRENCY or 100)",
    )
    w.add_argument(
        "--loglevel",
        default=None,
        metavar="LEVEL",
        help="DEBUG, INFO, WARNING, ERROR (default REACTQ_LOG_LEVEL or INFO)",
    )

    s = _command(
        sub,
        "send",
        "submit a turn and stream its events",
        "Queues MESSAGE for AGENT in SESSION, then prints the turn's events until its final.",
        epilog=SEND_EPILOG,
        handlers=TURNS,
    )
    s.add_argument("session", help="the conversation's id ([A-Za-z0-9._:-], up to 128)")
    s.add_argument("message", help="the user message")
    s.add_argument(
        "--agent", required=True, help="the agent to run it (a session keeps its first agent)"
    )
    s.add_argument(
        "--strategy",
        default="enqueue",
        choices=STRATEGIES,
        help=STRATEGY_HELP,
    )
    s.add_argument(
        "--image",
        action="append",
        metavar="PATH",
        help="an image file sent with the message (repeatable; REACTQ_MAX_IMAGE_BYTES each)",
    )
    s.add_argument("--no-follow", action="store_true", help="print the turn id and return")
    s.add_argument("--json", action="store_true", help="one JSON event per line")
    s.add_argument("--gateway", metavar="URL", help=GATEWAY_HELP)

    wa = _command(
        sub,
        "watch",
        "follow a session's events (replay with --from)",
        "Prints every event of the session as it happens, each line tagged with its turn "
        "(t_xxxxxx), until interrupted. The session must exist: have a stream in Redis or "
        "stored state.",
        handlers=TURNS,
    )
    wa.add_argument("session", help="the conversation's id")
    wa.add_argument(
        "--from",
        dest="from_id",
        default=None,
        metavar="EVENT_ID",
        help="replay after this event id ('0' for the whole stream; default: live only)",
    )
    wa.add_argument("--json", action="store_true", help="one JSON event per line")
    wa.add_argument("--gateway", metavar="URL", help=GATEWAY_HELP)

    sv = _command(
        sub,
        "serve",
        "run the HTTP gateway (SSE, API keys, OpenAPI, a page)",
        "Without REACTQ_API_KEYS it serves loopback only.",
        handlers=LOCAL,
    )
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    sv.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback address without REACTQ_API_KEYS",
    )
    sv.add_argument(
        "--loglevel", default="info", metavar="LEVEL", help="debug, info, warning (default info)"
    )

    fl = _command(
        sub,
        "flower",
        "run Celery's Flower against the broker (the pool's view)",
        "Shows this namespace's workers and their reactq.drain tasks. Set "
        "REACTQ_FLOWER_AUTH=user:password before exposing it.",
        handlers=LOCAL,
    )
    fl.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    fl.add_argument(
        "--address", dest="host", action=_DeprecatedAlias, use="--host", help=argparse.SUPPRESS
    )
    fl.add_argument("--port", type=int, default=5555, help="port to bind (default 5555)")
    fl.add_argument("--url-prefix", default="", help="the path it is served under, behind a proxy")
    fl.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback address without REACTQ_FLOWER_AUTH",
    )

    c = _command(
        sub,
        "cancel",
        "cancel a queued or running turn",
        "A queued turn ends at once, a running one before its next model or tool call; "
        "either way nothing of it is committed. A turn that has finished already exits 2 "
        "with [turn_finished] (the gateway's 409).",
        handlers=TURNS,
    )
    c.add_argument("turn_id", help="the turn's id (t_..., printed by send)")
    c.add_argument("--json", action="store_true", help="the outcome as a JSON object")

    u = _command(
        sub,
        "undo",
        "revert the file changes a finished turn made",
        "Puts back every file the turn's file tools changed in its session's workspace, "
        "the newest change first, all or nothing: a file changed again since the turn is "
        "named and nothing is reverted [undo_conflict]; a second undo is [already_undone]. "
        "Runs where the workspace root (REACTQ_WORKSPACE_ROOT) is mounted, like a worker.",
        handlers=TURNS,
    )
    u.add_argument("turn_id", help="the turn's id (t_..., printed by send)")
    u.add_argument("--json", action="store_true", help="the report as a JSON object")

    for verb, summary, option, meaning in (
        ("approve", "approve a tool call a turn waits for", "--note", "a note kept with it"),
        ("deny", "deny a tool call a turn waits for", "--reason", "why (the model reads it)"),
    ):
        a = _command(
            sub,
            verb,
            summary,
            "A turn whose tool calls need a person waits parked, holding no worker; it "
            "resumes once every waiting call is decided. The call ids are in its "
            "approval_requested event (reactq watch) and in GET /v1/turns/{turn_id}.",
            handlers=TURNS,
        )
        _waiting_call(a)
        a.add_argument(option, default=None, help=meaning)
        if verb == "approve":
            a.add_argument(
                "--args",
                default=None,
                metavar="JSON",
                help="run the call with these arguments (a JSON object the tool's schema "
                "accepts) instead of the model's",
            )
        a.add_argument("--json", action="store_true", help="the outcome as a JSON object")

    c = _command(
        sub,
        "complete",
        "give a waiting call's result, in place of running it",
        "Answers a call the turn waits for (a client tool's, or one waiting for approval): "
        "the model reads RESULT (text, or JSON) as the call's result, or --error as the "
        "error it failed with; the tool does not run. The turn resumes once every call it "
        "waits for has a decision or a result.",
        handlers=TURNS,
    )
    _waiting_call(c)
    c.add_argument("result", nargs="?", default=None, help="the result (JSON is sent as JSON)")
    c.add_argument("--error", default=None, help="the error the call failed with, instead")
    c.add_argument("--json", action="store_true", help="the outcome as a JSON object")

    h = _command(
        sub,
        "history",
        "print a session's conversation",
        "Messages are numbered from 1 (fork keeps 1..N). An unknown session is an error.",
        handlers=TURNS,
    )
    h.add_argument("session", help="the conversation's id")
    h.add_argument("--branch", default=None, help="this branch instead of the active one")
    h.add_argument("--json", action="store_true", help="one JSON message per line")
    add_state_commands(sub, _command)
    add_sessions_commands(sub, _command)
    add_schedule_commands(sub, _command)
    add_agents_commands(sub, _command)

    r = _command(
        sub,
        "run",
        "run one turn in-process (no broker, no Redis)",
        "Each run is a new session unless --session names one; it prints the session on "
        "stderr. The state goes to REACTQ_DATABASE_URL, as a worker's does.",
        handlers=LOCAL,
    )
    r.add_argument("message", help="the user message")
    r.add_argument(
        "--agents",
        action="append",
        default=[],
        metavar="MODULE[:ATTR]",
        help="agent definitions to load (repeatable; or REACTQ_AGENTS)",
    )
    r.add_argument("--agent", default=None, help="which agent, when several are loaded")
    r.add_argument(
        "--session", default=None, help="continue this session (default: a new one per run)"
    )
    r.add_argument("--json", action="store_true", help="one JSON event per line")

    d = _command(
        sub,
        "demo",
        "a demo of the pool (or in-process without Redis)",
        "Starts two workers in a namespace of its own and a throwaway state database, runs "
        "turns for several sessions at once (every other one double-texted), kills the "
        "worker running the first tool call so that the other finishes its turns, and "
        "prints which worker ran what. It removes its namespace, database and logs when "
        "it ends (a failed run keeps the logs and says where).",
        handlers=LOCAL,
    )
    d.add_argument("--sessions", type=int, default=4, help="sessions to run (default 4)")
    d.add_argument("--in-process", action="store_true", help="skip the pool even if Redis answers")
    d.add_argument("--no-kill", action="store_true", help="kill no worker (the pool alone)")

    e = _command(
        sub,
        "errors",
        "list every error code, whether it is worth a retry, and what it means",
        "The codes on errors, error events, finals, tool_failed events and the gateway's "
        "error bodies (docs/errors.md holds the same list).",
        handlers=LOCAL,
    )
    e.add_argument("--json", action="store_true", help="one JSON object per line")
    return parser
