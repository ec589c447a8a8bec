"""The Redis broker transport of the worker's Celery app, hardened against a
Redis restart, its unacked messages kept in memory (``dispatch.celery_app``
installs it).

kombu's Redis channel writes every message it delivers to an ``unacked`` hash and
index (a MULTI/EXEC), and removes it on the ack (another), so that a message
whose worker died is redelivered after the visibility timeout. For reactq's
messages that timeout is hours (``VISIBILITY_TIMEOUT_SECONDS``), and the reaper
recovers a dead worker's sessions and webhook deliveries within seconds, from
their deadlines: the two transactions were a third of the consumer's CPU per
message for nothing. Here the channel keeps its unacked messages in memory only:
they still count against the prefetch limit, and a channel that closes (a warm
shutdown) puts them back on their queues from memory.

kombu's Redis channel, when the broker connection drops, closes itself and tries
to put the worker's unacknowledged messages back on their queues. After the drop
its connection is already detached, so that step raises AttributeError, which
Celery treats as unrecoverable: the worker exits instead of reconnecting. Here it
fails softly: the messages are dropped with a warning, and reactq's own reaper
re-dispatches their sessions from the session deadlines (a duplicate drain is a
no-op). An ack needs no broker at all.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

log = logging.getLogger("reactq.worker")

TRANSPORT = "reactq.shared.protocol.transport:RedisTransport"
"""The value for Celery's ``broker_transport`` with a ``redis://`` broker URL."""


class _QoS(kombu_redis.QoS):
    _delivered: OrderedDict[Any, Any]  # kombu's class says None; its __init__ sets this

    def append(self, message: Any, delivery_tag: Any) -> None:
        virtual.QoS.append(self, message, delivery_tag)  # in memory (module doc)

    def restore_unacked(self, client: Any = None) -> None:
        self._flush()  # the acked ones out
        try:
            with self.channel.conn_or_acquire(client) as client:
                for message in list(self._delivered.values()):
                    self._put_back(message, client)
            self._delivered.clear()
        except Exception as exc:
            log.warning(
                "broker connection lost: %d unacknowledged messages left for redelivery (%s)",
                len(self._delivered),
                type(exc).__name__,
            )
            self._delivered.clear()

    def ack(self, delivery_tag: Any) -> None:
        virtual.QoS.ack(self, delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        message = self._delivered.get(delivery_tag)
        try:
            if requeue and message is not None:
                with self.channel.conn_or_acquire() as client:
                    self._put_back(message, client, leftmost=True)
        except Exception as exc:
            # The broker is away: the message is lost here, and the reaper recovers
            # its session (or its webhook delivery) from its deadline.
            log.warning("could not requeue a message after the broker reconnected (%s)", exc)
        virtual.QoS.ack(self, delivery_tag)

    def _put_back(self, message: Any, client: Any, leftmost: bool = False) -> None:
        delivery = message.delivery_info
        self.channel._do_restore_message(
            message._raw, delivery["exchange"], delivery["routing_key"], client, leftmost
        )


class _Channel(kombu_redis.Channel):
    QoS = _QoS


class RedisTransport(kombu_redis.Transport):
    """kombu's Redis transport whose channel survives a broker restart."""

    Channel = _Channel
