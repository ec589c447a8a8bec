"""A bare Celery app with a no-op task: the floor the pool benchmark compares to."""

from __future__ import annotations

import os

from celery import Celery

_url = os.environ.get("REACTQ_REDIS_URL", "redis://127.0.0.1:6379/0")
_ns = os.environ.get("REACTQ_NAMESPACE", "reactq-bench")

app = Celery("noop", broker=_url, backend=_url)
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    result_serializer="json",
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_default_queue=f"{_ns}.noop",
    result_expires=600,
    # Result keys under the run's namespace, which the benchmark deletes afterwards
    # (Celery's default, celery-task-meta-*, would outlive the run).
    result_backend_transport_options={"global_keyprefix": f"{_ns}:"},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="bench.noop")
def noop(x: int) -> int:
    """Return its argument."""
    return x
