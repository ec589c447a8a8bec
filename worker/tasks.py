"""The ``reactq.drain`` Celery task and the worker process's lifecycle.

The task body only hands the session to the process's asyncio loop
(``bridge.py``) and returns, on the consumer's thread (``handoff.py``): the loop
bounds the turns in flight, and a drain message acked before its drain ends costs
nothing if the worker dies, since the lease and the reaper recover the session
(docs/architecture.md). The worker's
side of the protocol lives in ``drain.py``, the Celery app and the dispatch in
``reactq.shared.protocol.dispatch``.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Coroutine
from typing import Any, TypeVar

from celery import Celery, Task
from celery.signals import worker_shutting_down
from pydantic import ValidationError

from reactq.shared.keys import Keys
from reactq.shared.logs import log_context
from reactq.shared.protocol.dispatch import DRAIN_TASK, Dispatcher, celery_app
from reactq.shared.settings import Settings
from reactq.shared.tracing import extract_context, tracer
from reactq.shared.webhook_delivery import deliver
from reactq.shared.webhooks import WEBHOOK_TASK, Delivery
from reactq.worker.bridge import Bridge
from reactq.worker.definitions import Agent
from reactq.worker.handoff import HandOffPool

log = logging.getLogger("reactq.worker")
T = TypeVar("T")

_bridge: Bridge | None = None


def bind_tasks(app: Celery) -> None:
    """Register ``reactq.drain`` and ``reactq.webhook`` on the app."""
    _bind_webhook(app)

    @app.task(name=DRAIN_TASK, ignore_result=True, bind=True)
    def drain(self: Task, session_id: Any) -> None:
        if _bridge is None or _bridge.drainer is None:
            raise RuntimeError("reactq.drain ran outside a reactq worker process")
        work = _in_context(_bridge.drainer.drain(session_id), str(session_id)[:128])
        if not _bridge.settings.tracing:
            _bridge.hand_off(work)
            return
        from opentelemetry import context, trace

        # The producer's span travels in the message headers (shared/tracing.py).
        parent = extract_context(vars(self.request))
        span = tracer().start_span(
            f"{DRAIN_TASK} process",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "messaging.system": "celery",
                "messaging.operation.type": "process",
                "messaging.destination.name": str(
                    (self.request.delivery_info or {}).get("routing_key", "")
                ),
                "messaging.message.id": str(self.request.id),
                "gen_ai.conversation.id": str(session_id)[:128],
            },
        )
        # The coroutine runs on the loop's thread: hand it the context explicitly,
        # contextvars do not cross from this pool thread. The span ends with the drain.
        ctx = trace.set_span_in_context(span, parent)
        _bridge.hand_off(_traced(work, span, ctx, context, trace))


def _bind_webhook(app: Celery) -> None:
    @app.task(name=WEBHOOK_TASK, ignore_result=True)
    def webhook(delivery: Any) -> None:
        bridge = _bridge
        if bridge is None or bridge.webhooks is None or bridge.send_webhook is None:
            raise RuntimeError("reactq.webhook ran outside a reactq worker process")
        try:
            parsed = Delivery.model_validate(delivery)
        except ValidationError as exc:
            log.error("webhook: ignoring a malformed delivery (%s): %.200r", exc, delivery)
            return
        # On the loop, like a drain: a slow receiver holds no Celery thread.
        work = deliver(parsed, bridge.settings, bridge.webhooks, bridge.send_webhook)
        bridge.hand_off(_in_context(work, parsed.session_id))


async def _in_context(work: Coroutine[Any, Any, T], session_id: str) -> T:
    """Run ``work`` with the session on every log line it writes."""
    with log_context(session_id=session_id):
        return await work


async def _traced(work: Coroutine[Any, Any, T], span: Any, ctx: Any, context: Any, trace: Any) -> T:
    """Run ``work`` inside an OpenTelemetry span made on another thread; end the span."""
    token = context.attach(ctx)
    try:
        with trace.use_span(span, end_on_exit=True, record_exception=True):
            return await work
    finally:
        context.detach(token)


def worker_name(pid: int) -> str:
    """The name a worker process of ``pid`` on this host runs under (``reactq-PID@HOST``):
    its ``started`` events and its registry entry carry it."""
    return f"reactq-{pid}@{socket.gethostname()}"


def run_worker(
    settings: Settings,
    agents: dict[str, Agent],
    *,
    concurrency: int | None = None,
    loglevel: str = "INFO",
    hostname: str | None = None,
) -> None:
    """Start a Celery worker (``HandOffPool``) consuming the queues of ``agents``."""
    global _bridge
    concurrency = concurrency or settings.concurrency
    settings = settings.model_copy(update={"concurrency": concurrency})
    name = hostname or worker_name(os.getpid())
    keys = Keys.for_settings(settings)
    app = celery_app(settings, consumer=True)
    # Remote control and events per namespace: `reactq flower` shows this pool alone.
    app.conf.update(keys.celery_isolation())
    # Celery's --pool takes only its own names; a class goes through the config.
    app.conf.worker_pool = HandOffPool
    bind_tasks(app)
    _bridge = HandOffPool.bridge = Bridge(settings, agents, name)
    _bridge.start()
    if _bridge.drainer is not None:
        # The reaper, a shutdown hand-over and webhooks send through the worker's own app.
        dispatcher = Dispatcher(settings, app)
        _bridge.drainer.redispatch = dispatcher.drain
        _bridge.drainer.send_webhook = _bridge.send_webhook = dispatcher.webhook

    def on_shutdown(**_: Any) -> None:
        if _bridge is not None:
            _bridge.begin_shutdown()

    worker_shutting_down.connect(on_shutdown, weak=False)
    queues = ",".join(keys.queue(a) for a in sorted(agents))
    try:
        app.worker_main(
            [
                # No banner: the bridge's "ready" line says what it did (without the
                # ":**@" kombu puts in a URL that has no password).
                "--quiet",
                "worker",
                # One task at a time, on the consumer's thread: a task only hands its
                # drain to the loop (Bridge.hand_off), which bounds the turns in
                # flight; a pool thread per task cost two wake-ups and the GIL's
                # back and forth. One message prefetched.
                "--concurrency=1",
                f"--queues={queues}",
                f"--hostname={name}",
                f"--loglevel={loglevel}",
                "--without-mingle",
                "--without-gossip",
            ]
        )
    finally:
        _bridge.stop()
        _bridge = HandOffPool.bridge = None
