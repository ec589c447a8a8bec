"""The Redis broker transport of the worker's Celery app, hardened against a
Redis restart (``dispatch.celery_app`` installs it).

kombu's Redis channel, when the broker connection drops, closes itself and tries
to put the worker's unacknowledged messages back on their queues. After the drop
its connection is already detached, so that step raises AttributeError, which
Celery treats as unrecoverable: the worker exits instead of reconnecting. Acking,
later, a task that ran through the outage fails the same way. Here both fail
softly: the messages stay in kombu's ``unacked`` hash (kombu restores them after
the visibility timeout, and a duplicate drain is a no-op), and reactq's own
reaper re-dispatches their sessions long before that, from the session deadlines.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger("reactq.worker")

TRANSPORT = "reactq.shared.protocol.transport:RedisTransport"
"""The value for Celery's ``broker_transport`` with a ``redis://`` broker URL."""


class _QoS(kombu_redis.QoS):
    def restore_unacked(self, client: Any = None) -> None:
        try:
            super().restore_unacked(client)
        except Exception as exc:
            log.warning(
                "broker connection lost: %d unacknowledged messages left for redelivery (%s)",
                len(self._delivered),
                type(exc).__name__,
            )
            self._delivered.clear()

    def ack(self, delivery_tag: Any) -> None:
        # A task that ran through the outage finishes on a channel that is gone:
        # its message stays unacked (a later duplicate drain is a no-op).
        try:
            super().ack(delivery_tag)
        except Exception as exc:
            log.warning("could not ack a message after the broker reconnected (%s)", exc)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            super().reject(delivery_tag, requeue=requeue)
        except Exception as exc:
            log.warning("could not reject a message after the broker reconnected (%s)", exc)


class _Channel(kombu_redis.Channel):
    QoS = _QoS


class RedisTransport(kombu_redis.Transport):
    """kombu's Redis transport whose channel survives a broker restart."""

    Channel = _Channel
