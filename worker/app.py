"""The Celery app: JSON only, late acks, one task (``reactq.drain``)."""

from __future__ import annotations

from celery import Celery

from reactq.shared.settings import Settings

# Above the longest turn: a Redis-broker message unacked for this long is
# redelivered, so it must never fire for a turn that is merely slow. Lost turns
# are recovered much sooner by the lease reaper.
VISIBILITY_TIMEOUT_SECONDS = 6 * 3600


def create_app(settings: Settings) -> Celery:
    """A Celery app configured for the session protocol (DESIGN.md)."""
    app = Celery("reactq", broker=settings.effective_broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=f"{settings.namespace}.default",
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_SECONDS},
        worker_hijack_root_logger=False,
        worker_send_task_events=True,
        task_send_sent_event=False,
        enable_utc=True,
    )
    if settings.effective_broker_url.startswith(("redis://", "rediss://")):
        from reactq.worker.broker import TRANSPORT

        app.conf.broker_transport = TRANSPORT
    return app
