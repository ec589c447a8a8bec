"""Worker-side commands of ``reactq``: worker, run, demo."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any

from shared.errors import ConfigError
from shared.settings import Settings
from worker.definitions import Agent, load_agents

log = logging.getLogger("reactq.worker")

OFFLINE_KEY = "offline-demo"


def ensure_model_endpoint(agents: dict[str, Agent]) -> Any:
    """Start the offline demo model when no endpoint is configured at all.

    Returns the server (to stop later) or None. Every answer it gives is
    labelled "[offline demo model]", so it is never mistaken for a real model.
    """
    configured = os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY")
    if configured or all(a.base_url for a in agents.values()):
        return None
    from worker.agent.llm.scripted_server import ScriptedServer, demo_model

    server = ScriptedServer(demo_model).start_in_thread()
    os.environ["OPENAI_BASE_URL"] = server.base_url
    os.environ["OPENAI_API_KEY"] = OFFLINE_KEY
    print(
        f"reactq: no OPENAI_BASE_URL or OPENAI_API_KEY set: using the offline demo model "
        f"at {server.base_url}",
        file=sys.stderr,
    )
    return server


def _agents(settings: Settings, specs: list[str]) -> dict[str, Agent]:
    specs = specs or settings.agents
    if not specs:
        raise ConfigError("no agents: pass --agents MODULE[:ATTR] or set REACTQ_AGENTS")
    return load_agents(specs)


def _worker(args: argparse.Namespace) -> int:
    from shared.logs import configure_logging
    from worker.tasks import run_worker

    settings = Settings.from_env()
    configure_logging(settings, args.loglevel)
    if settings.tracing:
        from shared.tracing import configure_tracing, instrument_publishing

        configure_tracing("reactq-worker")
        instrument_publishing()  # re-dispatched drains carry the trace on
    agents = _agents(settings, args.agents)
    server = ensure_model_endpoint(agents)
    try:
        run_worker(
            settings,
            agents,
            concurrency=args.concurrency,
            loglevel=args.loglevel or settings.log_level,
        )
    finally:
        if server is not None:
            server.stop()
    return 0


def _run(args: argparse.Namespace) -> int:
    from worker.local import run_local_turn

    settings = Settings.from_env()
    agents = _agents(settings, args.agents)
    if args.agent is None and len(agents) > 1:
        raise ConfigError(f"several agents loaded ({', '.join(agents)}): pick one with --agent")
    name = args.agent or next(iter(agents))
    if name not in agents:
        raise ConfigError(f"agent {name!r} is not among the loaded ones: {', '.join(agents)}")
    server = ensure_model_endpoint(agents)
    try:
        final = asyncio.run(
            run_local_turn(settings, agents[name], args.session, args.message, as_json=args.json)
        )
    finally:
        if server is not None:
            server.stop()
    return 0 if final.status == "completed" else 1


def _demo(args: argparse.Namespace) -> int:
    from worker.demo import run_demo

    return run_demo(sessions=args.sessions, in_process=args.in_process)


def main(args: argparse.Namespace) -> int:
    """Run one of the worker-side commands parsed by ``producer.cli``."""
    handler = {"worker": _worker, "run": _run, "demo": _demo}[args.command]
    return handler(args)
