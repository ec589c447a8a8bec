"""The dispatch: the Celery app and its messages, ``reactq.drain`` (and the webhook
deliveries a turn's end enqueues, ``reactq.webhook``).

A producer sends ``reactq.drain(session_id)`` on the agent's queue after a
submit; a worker's reaper, or a worker handing a session over on shutdown, sends
the same. The message only says "look at this session": the turns themselves
wait in Redis (``queue.py``), so a lost or duplicate drain task costs a reaper
period or a no-op, never a turn (docs/architecture.md, "Session protocol").
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kombu.exceptions import OperationalError

from reactq.shared.keys import Keys
from reactq.shared.settings import Settings
from reactq.shared.tracing import instrument_publishing
from reactq.shared.webhooks import WEBHOOK_TASK, Delivery

if TYPE_CHECKING:
    from celery import Celery

BROKER_ERRORS: tuple[type[Exception], ...] = (OperationalError, OSError)
"""What sending a message raises when the broker cannot be reached (after kombu's
own publish retries)."""

DRAIN_TASK = "reactq.drain"
"""The Celery task a producer sends and a worker runs: ``reactq.drain(session_id)``."""

# Above the longest turn: kombu's Redis channel redelivers a message unacked for
# this long (reactq's worker keeps its unacked messages in memory instead,
# transport.py), so it must never fire for a turn that is merely slow. Lost turns
# are recovered much sooner by the lease reaper.
VISIBILITY_TIMEOUT_SECONDS = 6 * 3600


def celery_app(settings: Settings, *, consumer: bool = False) -> Celery:
    """A Celery app on the pool's broker: JSON only, no results.

    ``consumer`` adds what only a worker needs: late acks (on RabbitMQ a task whose
    worker died is delivered again; on Redis, whose transport keeps unacked messages
    in memory, the reaper recovers its session), one message prefetched, task events
    only when a monitor turns them on (Flower does), and the hardened Redis transport.
    With ``REACTQ_TRACING`` every message the process sends carries the current
    trace.
    """
    # Celery is imported here, where an app is made, so that a producer that only reads
    # (events, history, sessions) never loads it (tests/test_lazy_imports.py).
    from celery import Celery

    app = Celery("reactq", broker=settings.effective_broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        result_backend=None,
        broker_connection_retry_on_startup=True,
        enable_utc=True,
    )
    if consumer:
        app.conf.update(
            task_acks_late=True,
            task_reject_on_worker_lost=True,
            worker_prefetch_multiplier=1,
            task_default_queue=f"{settings.namespace}.default",
            broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_SECONDS},
            worker_hijack_root_logger=False,
            # Task events cost a broker publish per event, three per drain: they are
            # sent only once a monitor asks (Flower sends enable_events itself).
            worker_send_task_events=False,
            task_send_sent_event=False,
        )
        if settings.effective_broker_url.startswith(("redis://", "rediss://")):
            from reactq.shared.protocol.transport import TRANSPORT

            app.conf.broker_transport = TRANSPORT
    if settings.tracing:
        instrument_publishing()  # the trace rides in the message headers
    return app


class Dispatcher:
    """Sends ``reactq.drain`` for a session on its agent's queue."""

    def __init__(self, settings: Settings, app: Celery | None = None) -> None:
        """``app``: the worker's own app; without one, a sending-only app is made
        on first use and closed by ``close``."""
        self.settings = settings
        self.keys = Keys.for_settings(settings)
        self._app = app
        self._owns_app = app is None

    @property
    def app(self) -> Celery:
        """The Celery app messages are sent with."""
        if self._app is None:
            self._app = celery_app(self.settings)
        return self._app

    async def drain(self, session_id: str, agent: str) -> None:
        """Ask a worker hosting ``agent`` to drain the session."""
        # send_task blocks on the broker connection: keep it off the event loop.
        await asyncio.to_thread(
            self.app.send_task, DRAIN_TASK, args=[session_id], queue=self.keys.queue(agent)
        )

    async def webhook(self, delivery: Delivery, countdown: float | None = None) -> None:
        """Enqueue a webhook delivery (``reactq.webhook``) on its turn's agent's queue, due
        in ``countdown`` seconds (None: now)."""
        await asyncio.to_thread(
            self.app.send_task,
            WEBHOOK_TASK,
            args=[delivery.model_dump(mode="json")],
            queue=self.keys.queue(delivery.agent),
            countdown=countdown,
        )

    async def close(self) -> None:
        """Close the app's broker connections, if this dispatcher made the app."""
        if self._owns_app and self._app is not None:
            await asyncio.to_thread(self._app.close)
