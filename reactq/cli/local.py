"""The ``reactq`` subcommands that run something in this process: ``worker``, ``run``,
``demo``, ``serve``, ``flower`` and ``beat``; and ``errors``, which prints the registry.

Their arguments are declared in ``reactq.cli.parser``; this module is imported only
when one of them runs. The optional extras (the gateway's FastAPI and uvicorn,
Flower) are imported inside their command, so a missing extra fails that command
alone, naming the extra.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys
import uuid
from collections.abc import Callable

from reactq.cli.turns import print_event
from reactq.demo import run_demo
from reactq.producer.cli_schedules import beat
from reactq.producer.cli_state import announce_created, database_missing
from reactq.shared.error_codes import ERROR_CODES
from reactq.shared.errors import ConfigError, ServiceUnavailableError
from reactq.shared.logs import configure_logging
from reactq.shared.services import probe_redis
from reactq.shared.settings import Settings
from reactq.shared.tracing import configure_tracing
from reactq.shared.turns import TurnStatus
from reactq.worker.cli import announce_defaults, host_agents, loaded_agents, model_endpoint
from reactq.worker.local import run_local_turn


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
        announce_defaults(settings, agents)
        final = asyncio.run(
            run_local_turn(
                settings,
                agents[name],
                session,
                args.message,
                on_event=lambda event: print_event(event, args.json),
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
    announce_defaults(settings)
    try:
        probe_redis(settings)
    except ServiceUnavailableError as exc:
        # An outage the gateway waits out (its readiness says so, its routes answer 503);
        # a URL naming a database Redis lacks is a ConfigError, raised through.
        logging.getLogger("reactq.gateway").warning("%s; starting anyway", exc.message)
    if settings.tracing:
        configure_tracing("reactq-gateway", settings)
    return serve(args.host, args.port, insecure=args.insecure, log_level=args.loglevel)


def _flower(args: argparse.Namespace) -> int:
    from reactq.producer.flower import run_flower  # the flower extra

    return run_flower(args.host, args.port, url_prefix=args.url_prefix, insecure=args.insecure)


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "worker": lambda args: host_agents(args.agents, args.concurrency, args.loglevel),
    "run": _run,
    "demo": lambda args: run_demo(
        sessions=args.sessions, in_process=args.in_process, kill=not args.no_kill
    ),
    "serve": _serve,
    "flower": _flower,
    "errors": _errors,
    "beat": beat,
}
"""Subcommand -> its function."""
