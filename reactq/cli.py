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
import json
import os
import sys
from collections.abc import Callable, Sequence

from reactq.demo import run_demo
from reactq.producer.cli_state import STATE_HANDLERS, add_state_commands
from reactq.producer.client import Producer
from reactq.producer.render import render
from reactq.shared.errors import ConfigError, ReactqError
from reactq.shared.events import Event, FinalEvent
from reactq.shared.logs import configure_logging
from reactq.shared.settings import Settings
from reactq.shared.tracing import configure_tracing
from reactq.shared.turns import MultitaskStrategy, TurnStatus
from reactq.worker.cli import host_agents, loaded_agents, model_endpoint
from reactq.worker.local import run_local_turn

GATEWAY_HELP = "go through a reactq gateway over HTTP (key from REACTQ_API_KEY) instead of Redis"


def _print_event(event: Event, as_json: bool) -> None:
    if as_json:
        print(event.model_dump_json(), flush=True)
        return
    line = render(event)
    if line is not None:
        print(line, flush=True)


async def _send_via_gateway(args: argparse.Namespace) -> int:
    from reactq.producer.gateway_client import GatewayClient  # the gateway extra

    async with GatewayClient(args.gateway, _client_key()) as client:
        accepted = await client.submit(
            args.session, args.message, agent=args.agent, strategy=args.strategy
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
    from reactq.producer.gateway_client import GatewayClient  # the gateway extra

    async with GatewayClient(args.gateway, _client_key()) as client:
        async for event in client.events(args.session, after=args.from_id or "$"):
            _print_event(event, args.json)
    return 0


def _client_key() -> str | None:
    key = Settings.from_env().api_key
    return key.get_secret_value() if key else None


async def _send(args: argparse.Namespace) -> int:
    if args.gateway:
        return await _send_via_gateway(args)

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
    if args.gateway:
        return await _watch_via_gateway(args)

    async with Producer.from_env() as producer:
        async for event in producer.subscribe(args.session, after=args.from_id):
            _print_event(event, args.json)
    return 0


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
    return 0


async def _history(args: argparse.Namespace) -> int:

    async with Producer.from_env() as producer:
        messages = await producer.history(args.session, branch=args.branch)
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
            print(f"{m.sequence:>4} {m.role:>9}: {m.content}")
    return 0


def _run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    agents = loaded_agents(settings, args.agents)
    if args.agent is None and len(agents) > 1:
        raise ConfigError(f"several agents loaded ({', '.join(agents)}): pick one with --agent")
    name = args.agent or next(iter(agents))
    if name not in agents:
        raise ConfigError(f"agent {name!r} is not among the loaded ones: {', '.join(agents)}")
    with model_endpoint(settings, agents) as settings:
        final = asyncio.run(
            run_local_turn(
                settings,
                agents[name],
                args.session,
                args.message,
                on_event=lambda event: _print_event(event, args.json),
            )
        )
    return 0 if final.status == TurnStatus.COMPLETED else 1


def _serve(args: argparse.Namespace) -> int:
    from reactq.producer.gateway_serve import serve  # the gateway extra

    settings = Settings.from_env()
    configure_logging(settings, args.loglevel)
    if settings.tracing:
        configure_tracing("reactq-gateway", settings)
    return serve(args.host, args.port, insecure=args.insecure, log_level=args.loglevel)


def _flower(args: argparse.Namespace) -> int:
    from reactq.producer.flower import run_flower  # the flower extra

    return run_flower(args.address, args.port, url_prefix=args.url_prefix, insecure=args.insecure)


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
    w.add_argument("--loglevel", default=None, help="default REACTQ_LOG_LEVEL or INFO")

    s = sub.add_parser("send", help="submit a turn and stream its events")
    s.add_argument("session")
    s.add_argument("message")
    s.add_argument("--agent", required=True)
    s.add_argument("--strategy", default="enqueue", choices=[m.value for m in MultitaskStrategy])
    s.add_argument("--no-follow", action="store_true", help="print the turn id and return")
    s.add_argument("--json", action="store_true", help="one JSON event per line")
    s.add_argument("--gateway", metavar="URL", help=GATEWAY_HELP)

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
    wa.add_argument("--gateway", metavar="URL", help=GATEWAY_HELP)

    sv = sub.add_parser("serve", help="run the HTTP gateway (SSE, API keys, OpenAPI, a page)")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback address without REACTQ_API_KEYS",
    )
    sv.add_argument("--loglevel", default="info")

    fl = sub.add_parser("flower", help="run Celery's Flower against the broker (the pool's view)")
    fl.add_argument("--address", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    fl.add_argument("--port", type=int, default=5555)
    fl.add_argument("--url-prefix", default="", help="when served under a path behind a proxy")
    fl.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback address without REACTQ_FLOWER_AUTH",
    )

    c = sub.add_parser("cancel", help="cancel a queued or running turn")
    c.add_argument("turn_id")
    c.add_argument("--json", action="store_true")

    h = sub.add_parser("history", help="print a session's conversation")
    h.add_argument("session")
    h.add_argument("--branch", default=None, help="this branch instead of the active one")
    h.add_argument("--json", action="store_true")
    add_state_commands(sub)

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


SYNC_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "worker": lambda args: host_agents(args.agents, args.concurrency, args.loglevel),
    "run": _run,
    "demo": lambda args: run_demo(sessions=args.sessions, in_process=args.in_process),
    "serve": _serve,
    "flower": _flower,
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
                **STATE_HANDLERS,
            }[args.command]
            code = asyncio.run(handler(args))
    except ReactqError as exc:
        print(f"reactq: error: {exc.message} [{exc.code}]", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `reactq watch ... | head`: the reader left; that is not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
