"""The ``reactq`` command: the one module that imports both sides.

``reactq.producer`` and ``reactq.worker`` never import each other
(docs/architecture.md, "Layers"); this module wires the producer-side commands
(send, watch, history, cancel, the state commands) and the worker-side ones
(worker, run, demo) into one parser. Only the optional extras (the gateway's
FastAPI and uvicorn, Flower, OpenTelemetry) are imported when their command
runs, so a missing extra fails that command alone, naming the extra.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import getpass
import json
import os
import sys
import textwrap
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from reactq import __version__
from reactq.demo import run_demo
from reactq.producer.cli_agents import AGENTS_HANDLERS, add_agents_commands
from reactq.producer.cli_schedules import SCHEDULE_HANDLERS, add_schedule_commands, beat
from reactq.producer.cli_sessions import SESSIONS_HANDLERS, add_sessions_commands
from reactq.producer.cli_state import (
    STATE_HANDLERS,
    add_state_commands,
    announce_created,
    database_missing,
    require_database,
    session_not_found,
)
from reactq.producer.client import Producer
from reactq.producer.render import render
from reactq.shared.content import ImagePart
from reactq.shared.error_codes import ERROR_CODES
from reactq.shared.errors import ConfigError, ReactqError, ServiceUnavailableError
from reactq.shared.events import Event, FinalEvent
from reactq.shared.logs import configure_logging
from reactq.shared.protocol.outcomes import CancelOutcome
from reactq.shared.services import Service, probe_broker, service_error, unavailable
from reactq.shared.settings import Settings
from reactq.shared.tracing import configure_tracing
from reactq.shared.turns import MultitaskStrategy, TurnStatus
from reactq.worker.cli import host_agents, loaded_agents, model_endpoint
from reactq.worker.local import run_local_turn

EXIT_ERROR = 2
"""A refused command: bad input, an unknown agent or session, a bad setting."""
EXIT_UNAVAILABLE = 3
"""Redis, the broker or the state database could not be used (worth a retry)."""

GATEWAY_HELP = "go through a reactq gateway over HTTP (key from REACTQ_API_KEY) instead of Redis"


def _print_event(event: Event, as_json: bool, *, tag: bool = False) -> None:
    if as_json:
        print(event.model_dump_json(), flush=True)
        return
    line = render(event, show_turn=tag)
    if line is not None:
        print(line, flush=True)


async def _through_gateway(
    args: argparse.Namespace, run: Callable[[argparse.Namespace], Awaitable[int]]
) -> int:
    """``run`` against ``--gateway``; a gateway that cannot be reached is one line."""
    import httpx2  # the gateway extra: GatewayClient's HTTP client

    try:
        return await run(args)
    except httpx2.TransportError as exc:
        gateway = Service("gateway", "the gateway", args.gateway, "--gateway")
        raise unavailable(gateway, exc) from None


async def _send_via_gateway(args: argparse.Namespace) -> int:
    from reactq.producer.gateway.client import GatewayClient  # the gateway extra

    async with GatewayClient(args.gateway, _client_key()) as client:
        accepted = await client.submit(
            args.session, _message(args), agent=args.agent, strategy=args.strategy
        )
        if args.no_follow:
            print(accepted.turn_id)
            return 0
        final: FinalEvent | None = None
        async for event in client.stream(accepted.events_url, accepted.turn_id):
            _print_event(event, args.json)
            if isinstance(event, FinalEvent):
                final = event
        return 0 if final is not None and final.status == TurnStatus.COMPLETED else 1


async def _watch_via_gateway(args: argparse.Namespace) -> int:
    from reactq.producer.gateway.client import GatewayClient  # the gateway extra

    async with GatewayClient(args.gateway, _client_key()) as client:
        async for event in client.events(args.session, after=args.from_id or "$"):
            _print_event(event, args.json, tag=True)
    return 0


def _client_key() -> str | None:
    key = Settings.from_env().api_key
    return key.get_secret_value() if key else None


def _message(args: argparse.Namespace) -> str | list[str | ImagePart]:
    """The message ``send`` submits: its text, with the ``--image`` files after it."""
    if not args.image:
        return str(args.message)
    return [args.message, *(ImagePart.from_path(path) for path in args.image)]


async def _send(args: argparse.Namespace) -> int:
    if args.gateway:
        return await _through_gateway(args, _send_via_gateway)

    # A submit with the broker down succeeds (the turn waits in Redis until a reaper
    # dispatches it), which from a shell looks like a hang: say so first, submit nothing.
    # A broker that is Redis itself is checked by the submit's first call.
    settings = Settings.from_env()
    if settings.effective_broker_url != settings.redis_url:
        await asyncio.to_thread(probe_broker, settings)
    async with Producer.from_env() as producer:
        handle = await producer.submit(
            args.session, _message(args), agent=args.agent, strategy=args.strategy
        )
        await _warn_if_no_live_worker(producer, args.agent)
        if args.no_follow:
            print(handle.turn_id)
            return 0
        final: FinalEvent | None = None
        async for event in handle.events():
            _print_event(event, args.json)
            if isinstance(event, FinalEvent):
                final = event
        return 0 if final is not None and final.status == TurnStatus.COMPLETED else 1


async def _warn_if_no_live_worker(producer: Producer, agent: str) -> None:
    """Say on stderr when no worker hosting ``agent`` has beaten within the heartbeat
    interval: the turn is queued, and waits until one starts.

    ``UnknownAgentError`` only means no worker ever announced the agent; the agent
    stays known after its workers stop. Workers re-announce themselves (with a
    timestamp) in the registry (``WorkerRegistry.register_agents``, written by
    ``worker/bridge.py``'s heartbeat) three times per ``REACTQ_HEARTBEAT_SECONDS``;
    a stopped worker removes its entry, a killed one stops beating. The
    timestamps are the workers' clocks: a skew between machines above the
    interval would make a live pool look gone, never the reverse.
    """
    window = producer.settings.heartbeat_seconds
    now = time.time()
    for raw in (await producer.redis.hgetall(producer.keys.workers)).values():
        try:
            stamp = json.loads(raw)
            seen = float(stamp.get("ts", 0))
            hosts = agent in stamp.get("agents", [])
        except (ValueError, TypeError, AttributeError):
            continue  # an entry this version does not understand: not a sign of life
        if hosts and now - seen <= window:
            return
    print(
        f"reactq: no worker hosting agent {agent!r} has been seen in the last {window:g} s "
        f"(namespace {producer.settings.namespace!r}): the turn waits in the queue until one "
        "starts (`reactq worker --agents MODULE:ATTR`)",
        file=sys.stderr,
        flush=True,
    )


async def _watch(args: argparse.Namespace) -> int:
    if args.gateway:
        return await _through_gateway(args, _watch_via_gateway)

    settings = Settings.from_env()
    async with Producer(settings) as producer:
        if not await _session_exists(producer, args.session):
            raise session_not_found(settings, args.session)
        # Turns of a session interleave here (one queued while another runs): each
        # line carries its turn's tag.
        async for event in producer.subscribe(args.session, after=args.from_id):
            _print_event(event, args.json, tag=True)
    return 0


async def _session_exists(producer: Producer, session_id: str) -> bool:
    """True when the session has an event stream in Redis or stored state (``watch``
    refuses a session with neither: most likely a typo, or another REACTQ_NAMESPACE)."""
    if await producer.redis.exists(producer.keys.events(session_id)):
        return True
    if database_missing(producer.settings):
        return False
    return await (await producer.state_store()).get_session(session_id) is not None


async def _cancel(args: argparse.Namespace) -> int:

    async with Producer.from_env() as producer:
        result = await producer.cancel(args.turn_id)
    if args.json:
        print(
            json.dumps(
                {
                    "turn_id": result.turn_id,
                    "outcome": result.outcome,
                    "session_id": result.session_id,
                    "status": result.status,
                }
            )
        )
    else:
        print(f"{result.turn_id}: {result.outcome.replace('_', ' ')}")
    if result.outcome == CancelOutcome.ALREADY_FINISHED:
        # Nothing to cancel: the gateway's 409 ``turn_finished``, as an error line.
        message = f"turn {result.turn_id} has finished already: nothing to cancel"
        if args.json:
            print(json.dumps({"code": "turn_finished", "message": message}), file=sys.stderr)
        else:
            print(f"reactq: error: {message} [turn_finished]", file=sys.stderr)
        return EXIT_ERROR
    return 0


async def _undo(args: argparse.Namespace) -> int:
    """``reactq undo``: revert a finished turn's file changes (here: the workspace root
    must be mounted where this runs)."""
    async with Producer.from_env() as producer:
        report = await producer.undo(args.turn_id)
    if args.json:
        print(report.model_dump_json())
        return 0
    print(f"undid turn {report.turn_id} (session {report.session_id}):")
    for done in report.files:
        print(f"  {done.now:8} {done.path}  (the turn had {done.did} it)")
    return 0


async def _decide(args: argparse.Namespace) -> int:
    """``reactq approve`` / ``reactq deny``: one decision on a waiting tool call."""
    approve = args.command == "approve"
    by = f"cli:{getpass.getuser()}"
    async with Producer.from_env() as producer:
        if approve:
            outcome = await producer.approve(args.turn_id, args.call_id, args.note, by=by)
        else:
            outcome = await producer.deny(args.turn_id, args.call_id, args.reason, by=by)
    verdict = "approved" if approve else "denied"
    if args.json:
        print(
            json.dumps(
                {
                    "turn_id": args.turn_id,
                    "call_id": args.call_id,
                    "decision": verdict,
                    "session_id": outcome.session_id,
                    "ready": outcome.ready,
                }
            )
        )
    else:
        then = "the turn resumes" if outcome.ready else "other calls still wait"
        print(f"{args.turn_id} {args.call_id}: {verdict}; {then}")
    return 0


async def _history(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    require_database(settings, args.session)
    async with Producer(settings) as producer:
        messages = await producer.history(args.session, branch=args.branch)
        if not messages and await (await producer.state_store()).get_session(args.session) is None:
            raise session_not_found(settings, args.session)
    for m in messages:
        if args.json:
            print(json.dumps({"sequence": m.sequence, **m.model_dump(exclude_none=True)}))
            continue
        if m.tool_calls:
            calls = ", ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
            text = f"{m.content} " if m.content else ""
            print(f"{m.sequence:>4} {m.role:>9}: {text}[calls {calls}]")
        elif m.role == "tool":
            print(f"{m.sequence:>4} {'tool':>9}: {m.name} -> {m.content}")
        else:
            images = [f"[image: {p.label()}]" for p in m.parts or () if isinstance(p, ImagePart)]
            print(f"{m.sequence:>4} {m.role:>9}: {' '.join([m.content or '', *images]).strip()}")
    return 0


def _run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    agents = loaded_agents(settings, args.agents)
    if args.agent is None and len(agents) > 1:
        raise ConfigError(f"several agents loaded ({', '.join(agents)}): pick one with --agent")
    name = args.agent or next(iter(agents))
    if name not in agents:
        raise ConfigError(f"agent {name!r} is not among the loaded ones: {', '.join(agents)}")
    session = args.session or f"run-{uuid.uuid4().hex[:8]}"
    existed = not database_missing(settings)
    with model_endpoint(settings, agents) as settings:
        final = asyncio.run(
            run_local_turn(
                settings,
                agents[name],
                session,
                args.message,
                on_event=lambda event: _print_event(event, args.json),
            )
        )
    announce_created(settings, existed)
    if args.session is None:
        # Each run is a new conversation; this is how to go on with this one.
        print(f"reactq: session {session} (continue it with --session {session})", file=sys.stderr)
    return 0 if final.status == TurnStatus.COMPLETED else 1


def _errors(args: argparse.Namespace) -> int:
    """Print the error registry: a table, or one JSON object per line."""
    if args.json:
        for entry in ERROR_CODES:
            print(json.dumps(dataclasses.asdict(entry)))
        return 0
    width = max(len(entry.code) for entry in ERROR_CODES)
    print(f"{'CODE':<{width}}  RETRYABLE  MEANING")
    for entry in ERROR_CODES:
        retryable = "yes" if entry.retryable else "no"
        print(f"{entry.code:<{width}}  {retryable:<9}  {entry.meaning}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from reactq.producer.gateway.serve import serve  # the gateway extra

    settings = Settings.from_env()
    configure_logging(settings, args.loglevel)
    if settings.tracing:
        configure_tracing("reactq-gateway", settings)
    return serve(args.host, args.port, insecure=args.insecure, log_level=args.loglevel)


def _flower(args: argparse.Namespace) -> int:
    from reactq.producer.flower import run_flower  # the flower extra

    return run_flower(args.host, args.port, url_prefix=args.url_prefix, insecure=args.insecure)


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

STRATEGY_HELP = (
    "what the turn does when its session already has one running or queued: "
    "enqueue (default) waits its turn; reject refuses it; interrupt stops the running turn, "
    "keeps what it did so far, drops the queued ones and runs on top; rollback stops the "
    "running turn, discards it (and drops the queued ones) and runs on the state before it"
)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilogs' tables as written; wraps the rest."""


def _command(sub: Any, name: str, summary: str, details: str = "", **kwargs: Any) -> Any:
    """A subcommand whose one-line ``summary`` shows in ``reactq --help`` and opens its own."""
    description = f"{summary[0].upper()}{summary[1:]}."
    if details:
        description += "\n\n" + textwrap.fill(details, 79)
    return sub.add_parser(
        name, help=summary, description=description, formatter_class=_Formatter, **kwargs
    )


class _DeprecatedAlias(argparse.Action):
    """An old spelling of an option: it still works, says which to use, and hides from --help."""

    def __init__(self, *args: Any, use: str, **kwargs: Any) -> None:
        self.use = use
        super().__init__(*args, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        print(f"reactq: {option} is deprecated: use {self.use}", file=sys.stderr)
        setattr(namespace, self.dest, values)


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
    parser.add_argument(
        "--version", action="version", version=f"reactq {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    w = _command(
        sub,
        "worker",
        "run a worker process hosting some agents",
        "Consumes the turns of its agents' queues until stopped (SIGTERM finishes the running "
        "turns first). Start as many as you like, on any machine that reaches Redis.",
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
    )
    s.add_argument("session", help="the conversation's id ([A-Za-z0-9._:-], up to 128)")
    s.add_argument("message", help="the user message")
    s.add_argument(
        "--agent", required=True, help="the agent to run it (a session keeps its first agent)"
    )
    s.add_argument(
        "--strategy",
        default="enqueue",
        choices=[m.value for m in MultitaskStrategy],
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
        )
        a.add_argument("turn_id", help="the turn's id (t_...)")
        a.add_argument("call_id", help="the waiting call's id")
        a.add_argument(option, default=None, help=meaning)
        a.add_argument("--json", action="store_true", help="the outcome as a JSON object")

    h = _command(
        sub,
        "history",
        "print a session's conversation",
        "Messages are numbered from 1 (fork keeps 1..N). An unknown session is an error.",
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
        "turns for several sessions at once, and leaves nothing behind.",
    )
    d.add_argument("--sessions", type=int, default=4, help="sessions to run (default 4)")
    d.add_argument("--in-process", action="store_true", help="skip the pool even if Redis answers")

    e = _command(
        sub,
        "errors",
        "list every error code, whether it is worth a retry, and what it means",
        "The codes on errors, error events, finals, tool_failed events and the gateway's "
        "error bodies (docs/errors.md holds the same list).",
    )
    e.add_argument("--json", action="store_true", help="one JSON object per line")
    return parser


SYNC_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "worker": lambda args: host_agents(args.agents, args.concurrency, args.loglevel),
    "run": _run,
    "demo": lambda args: run_demo(sessions=args.sessions, in_process=args.in_process),
    "serve": _serve,
    "flower": _flower,
    "errors": _errors,
    "beat": beat,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``reactq`` console script."""
    args = build_parser().parse_args(argv)
    try:
        if args.command in SYNC_HANDLERS:
            code = SYNC_HANDLERS[args.command](args)
        else:
            handler = {
                "send": _send,
                "watch": _watch,
                "history": _history,
                "cancel": _cancel,
                "undo": _undo,
                "approve": _decide,
                "deny": _decide,
                **STATE_HANDLERS,
                **SESSIONS_HANDLERS,
                **SCHEDULE_HANDLERS,
                **AGENTS_HANDLERS,
            }[args.command]
            code = asyncio.run(handler(args))
    except ReactqError as exc:
        return _fail(exc, args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `reactq watch ... | head`: the reader left; that is not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        # Redis, the broker or the database failing is one line like any other error;
        # anything else is a bug and keeps its traceback.
        error = _as_service_error(exc)
        if error is None:
            raise
        return _fail(error, args)
    return int(code)


def _as_service_error(exc: BaseException) -> ServiceUnavailableError | None:
    try:
        settings = Settings.from_env()
    except ReactqError:
        return None
    return service_error(exc, settings)


def _fail(error: ReactqError, args: argparse.Namespace) -> int:
    """Print ``error`` on stderr (JSON under ``--json``); its exit code."""
    if getattr(args, "json", False):
        print(json.dumps({"code": error.code, "message": error.message}), file=sys.stderr)
    else:
        print(f"reactq: error: {error.message} [{error.code}]", file=sys.stderr)
    return EXIT_UNAVAILABLE if isinstance(error, ServiceUnavailableError) else EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
