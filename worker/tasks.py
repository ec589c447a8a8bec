"""The ``reactq.drain`` Celery task and the worker process's lifecycle.

The task body only hands the session to the process's asyncio loop
(``bridge.py``) and waits; the protocol itself lives in ``drain.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any

from celery import Celery
from celery.signals import worker_shutting_down

from shared.settings import Settings
from worker.app import DRAIN_TASK, create_app
from worker.bridge import Bridge
from worker.definitions import Agent

log = logging.getLogger("reactq.worker")

_bridge: Bridge | None = None


def bind_tasks(app: Celery) -> None:
    """Register ``reactq.drain`` on the app."""

    @app.task(name=DRAIN_TASK, ignore_result=True)
    def drain(session_id: Any) -> int:
        if _bridge is None or _bridge.drainer is None:
            raise RuntimeError("reactq.drain ran outside a reactq worker process")
        return _bridge.run(_bridge.drainer.drain(session_id))


def run_worker(
    settings: Settings,
    agents: dict[str, Agent],
    *,
    concurrency: int | None = None,
    loglevel: str = "INFO",
    hostname: str | None = None,
) -> None:
    """Start a Celery worker (thread pool) consuming the queues of ``agents``."""
    global _bridge
    concurrency = concurrency or settings.concurrency
    settings = settings.model_copy(update={"concurrency": concurrency})
    name = hostname or f"reactq-{os.getpid()}@{socket.gethostname()}"
    app = create_app(settings)
    bind_tasks(app)
    _bridge = Bridge(settings, agents, name)

    async def redispatch(session_id: str, agent: str) -> None:
        await asyncio.to_thread(
            app.send_task, DRAIN_TASK, args=[session_id], queue=f"{settings.namespace}.{agent}"
        )

    _bridge.start()
    if _bridge.drainer is not None:
        _bridge.drainer.redispatch = redispatch

    def on_shutdown(**_: Any) -> None:
        if _bridge is not None:
            _bridge.begin_shutdown()

    worker_shutting_down.connect(on_shutdown, weak=False)
    queues = ",".join(f"{settings.namespace}.{a}" for a in sorted(agents))
    try:
        app.worker_main(
            [
                "worker",
                "--pool=threads",
                f"--concurrency={concurrency}",
                f"--queues={queues}",
                f"--hostname={name}",
                f"--loglevel={loglevel}",
                "--without-mingle",
                "--without-gossip",
            ]
        )
    finally:
        _bridge.stop()
        _bridge = None
