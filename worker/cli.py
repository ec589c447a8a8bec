"""Worker-side commands of ``reactq``: host agents in a worker, start the offline model.

``reactq.cli`` parses the command line and calls these; nothing here imports the
producer side.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pydantic import SecretStr

from reactq.shared.errors import ConfigError
from reactq.shared.logs import configure_logging
from reactq.shared.services import probe_broker, probe_redis
from reactq.shared.settings import Settings
from reactq.shared.tracing import configure_tracing, instrument_publishing
from reactq.worker.agent.config import DEFAULT_MODEL
from reactq.worker.agent.llm.openai_client import DEFAULT_BASE_URL, PLACEHOLDER_API_KEY
from reactq.worker.agent.llm.scripted_server import ScriptedServer, demo_model
from reactq.worker.definitions import Agent, load_agents
from reactq.worker.tasks import run_worker

OFFLINE_KEY = "offline-demo"


@contextmanager
def model_endpoint(settings: Settings, agents: Mapping[str, Agent]) -> Iterator[Settings]:
    """``settings``, pointed at the offline demo model when no endpoint is configured at all.

    With neither OPENAI_BASE_URL nor OPENAI_API_KEY set, and an agent without its
    own ``base_url``, the offline model starts (a thread in this process) and the
    block gets settings whose ``openai_base_url`` / ``openai_api_key`` name it; it
    stops when the block ends. Every answer it gives is labelled "[offline demo
    model]", so it is never mistaken for a real model. Otherwise the block gets
    ``settings`` as they are.
    """
    configured = settings.openai_base_url or settings.openai_api_key
    if configured or all(a.base_url for a in agents.values()):
        yield settings
        return
    server = ScriptedServer(demo_model).start_in_thread()
    print(
        f"reactq: no OPENAI_BASE_URL or OPENAI_API_KEY set: using the offline demo model "
        f"at {server.base_url}",
        file=sys.stderr,
    )
    try:
        yield settings.model_copy(
            update={"openai_base_url": server.base_url, "openai_api_key": SecretStr(OFFLINE_KEY)}
        )
    finally:
        server.stop()


def announce_defaults(settings: Settings, agents: Mapping[str, Agent] | None = None) -> None:
    """Say on stderr, once at start-up, what was chosen for the user without being
    asked: the settings a ``.env`` file set, the model an agent that names none
    gets, and the placeholder key a request carries when no key is set. Nothing
    about the model when it is the offline demo model (which says so itself)."""
    if settings.dotenv_read is not None:
        path, names = settings.dotenv_read
        read = ", ".join(names) if names else "nothing the environment did not set"
        print(f"reactq: read {path} ({read}); REACTQ_DOTENV=0 ignores it", file=sys.stderr)
    offline = settings.openai_api_key is not None and (
        settings.openai_api_key.get_secret_value() == OFFLINE_KEY
    )
    for agent in (agents or {}).values():
        if offline and not agent.base_url:
            continue
        if not agent.loop.model and not settings.model:
            print(
                f"reactq: agent {agent.name!r} names no model and REACTQ_MODEL is unset: "
                f"its requests ask for {DEFAULT_MODEL!r}",
                file=sys.stderr,
            )
        has_key = agent.api_key or (
            agent.api_key_env and settings.secret_from_env(agent.api_key_env)
        )
        if not has_key and settings.openai_api_key is None:
            where = agent.base_url or settings.openai_base_url or DEFAULT_BASE_URL
            print(
                f"reactq: no OPENAI_API_KEY set: the requests of agent {agent.name!r} to {where} "
                f"carry the placeholder key {PLACEHOLDER_API_KEY!r}",
                file=sys.stderr,
            )


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
        configure_tracing("reactq-worker", settings)
        instrument_publishing()  # re-dispatched drains carry the trace on
    agents = loaded_agents(settings, specs)
    # A wrong URL fails here, in one line, rather than in Celery's retry loop.
    probe_redis(settings)
    if settings.effective_broker_url != settings.redis_url:
        probe_broker(settings)
    with model_endpoint(settings, agents) as settings:
        announce_defaults(settings, agents)
        run_worker(
            settings, agents, concurrency=concurrency, loglevel=loglevel or settings.log_level
        )
    return 0
