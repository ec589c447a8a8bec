"""Worker-side commands of ``reactq``: host agents in a worker, start the offline model.

``reactq.cli`` parses the command line and calls these; nothing here imports the
producer side.
"""

from __future__ import annotations

import os
import sys

from reactq.shared.errors import ConfigError
from reactq.shared.logs import configure_logging
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer, demo_model
from reactq.worker.definitions import Agent, load_agents
from reactq.worker.tasks import run_worker

OFFLINE_KEY = "offline-demo"


def ensure_model_endpoint(agents: dict[str, Agent]) -> ScriptedServer | None:
    """Start the offline demo model when no endpoint is configured at all.

    Returns the server (to stop later) or None. Every answer it gives is
    labelled "[offline demo model]", so it is never mistaken for a real model.
    """
    configured = os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY")
    if configured or all(a.base_url for a in agents.values()):
        return None
    server = ScriptedServer(demo_model).start_in_thread()
    os.environ["OPENAI_BASE_URL"] = server.base_url
    os.environ["OPENAI_API_KEY"] = OFFLINE_KEY
    print(
        f"reactq: no OPENAI_BASE_URL or OPENAI_API_KEY set: using the offline demo model "
        f"at {server.base_url}",
        file=sys.stderr,
    )
    return server


def loaded_agents(settings: Settings, specs: list[str]) -> dict[str, Agent]:
    """The agents named by ``specs``, or by ``REACTQ_AGENTS`` when there are none."""
    specs = specs or settings.agents
    if not specs:
        raise ConfigError("no agents: pass --agents MODULE[:ATTR] or set REACTQ_AGENTS")
    return load_agents(specs)


def host_agents(specs: list[str], concurrency: int | None, loglevel: str | None) -> int:
    """``reactq worker``: run a worker process hosting the named agents until stopped."""
    settings = Settings.from_env()
    configure_logging(settings, loglevel)
    if settings.tracing:
        # The otel extra, imported only when tracing is on.
        from reactq.shared.tracing import configure_tracing, instrument_publishing

        configure_tracing("reactq-worker")
        instrument_publishing()  # re-dispatched drains carry the trace on
    agents = loaded_agents(settings, specs)
    server = ensure_model_endpoint(agents)
    try:
        run_worker(
            settings, agents, concurrency=concurrency, loglevel=loglevel or settings.log_level
        )
    finally:
        if server is not None:
            server.stop()
    return 0
