"""``ProducerBase``: what every part of the ``Producer`` stands on.

Its connections (Redis, the broker, the state store and the audit log beside it), the
protocol objects over them, and the steps several parts share: dispatching a session's
work, settling a turn that ended on this side, publishing a revert's file changes. The
``Producer`` (``client``) derives from it through its parts (``approvals``, ``history``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from redis.asyncio import Redis

from reactq.producer.documents import LongTermStore
from reactq.shared.audit import AuditedBus, AuditSink, DeferredAuditSink, audit_sink_for
from reactq.shared.audit_spill import AuditSpill
from reactq.shared.bus_redis import RedisEventBus
from reactq.shared.events import FileChangeEvent, FinalEvent
from reactq.shared.file_undo import describe_changes
from reactq.shared.keys import Keys
from reactq.shared.protocol.approvals import Approvals
from reactq.shared.protocol.children import Children
from reactq.shared.protocol.dispatch import BROKER_ERRORS, Dispatcher
from reactq.shared.protocol.queue import SessionQueue
from reactq.shared.protocol.workers import WorkerRegistry
from reactq.shared.redis_client import connect
from reactq.shared.settings import Settings
from reactq.shared.state import StateStore, open_store
from reactq.shared.webhooks import Webhooks
from reactq.shared.workspace import FileChange

log = logging.getLogger("reactq.producer")

__all__ = ["ProducerBase"]


class ProducerBase:
    """The producer's connections and shared steps; use ``Producer``, which derives
    from it."""

    def __init__(self, settings: Settings | None = None, *, redis: Redis | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.keys = Keys.for_settings(self.settings)
        self._owns_redis = redis is None
        # Each live subscriber blocks on a connection: wait for one rather than fail.
        self.redis = redis or connect(self.settings.redis_url, 512, blocking=True)
        # What the audit log cannot take while the database is away waits in Redis
        # for a worker to write it (``shared/audit_spill.py``).
        self._spill = AuditSpill(self.redis, self.keys, self.settings.audit_spill_max_rows)
        self.bus = RedisEventBus(
            self.redis,
            self.keys,
            maxlen=self.settings.event_maxlen,
            ttl_seconds=self.settings.event_ttl_seconds,
        )
        self.publisher = AuditedBus(
            self.bus, DeferredAuditSink(self._recording_sink, self._spill), close_sink=False
        )
        """What the producer publishes (``queued``, the finals of turns that never ran,
        decisions) goes to the stream and, like the workers' events, to the audit log."""
        self.queue = SessionQueue(
            self.redis,
            self.keys,
            self.settings.session_meta_ttl_seconds,
            dispatch_grace_seconds=self.settings.lease_ttl_seconds,
        )
        self.approvals = Approvals(self.redis, self.keys, self.settings.session_meta_ttl_seconds)
        self.registry = WorkerRegistry(self.redis, self.keys)
        self.dispatcher = Dispatcher(self.settings)
        self.webhooks = Webhooks(self.redis, self.keys, self.settings)
        self.children = Children(
            self.redis,
            self.keys,
            self.queue,
            self.publisher,
            self._dispatch_if_work,
            meta_ttl_seconds=self.settings.session_meta_ttl_seconds,
            dispatch_grace_seconds=self.settings.lease_ttl_seconds,
        )
        self._store: StateStore | None = None
        self.store = LongTermStore(self.state_store)
        """The long-term store (``put``, ``get``, ``delete``, ``search`` of namespaced JSON
        documents); ``await producer.state_store()`` is the state store itself."""
        self._store_lock = asyncio.Lock()
        self._audit: AuditSink | None = None

    async def close(self) -> None:
        """Release connections."""
        if self._audit is not None:
            await self._audit.close()  # the store it shares stays open until here
        if self._store is not None:
            await self._store.close()
        if self._owns_redis:
            await self.redis.aclose()
        await self.dispatcher.close()

    async def _ended(self, final: FinalEvent) -> None:
        """A turn ended here (it never ran, or waited parked): settle its delegations,
        enqueue its webhook, if it has one."""
        await self.children.ended(final)
        try:
            await self.webhooks.ended(final, self.dispatcher.webhook)
        except Exception:
            # The turn has ended, whatever: its caller learns of a lost delivery from
            # the turn's status (no attempts), and the log says why.
            log.exception("turn %s: could not enqueue its webhook", final.turn_id)

    async def _dispatch_if_work(self, session_id: str) -> None:
        agent = await self.queue.session_agent(session_id)
        if agent is not None and await self.queue.has_work(session_id):
            await self._dispatch(session_id, agent)

    async def _dispatch(self, session_id: str, agent: str) -> None:
        """Send the session's drain; with the broker unreachable, only warn."""
        try:
            await self.dispatcher.drain(session_id, agent)
        except BROKER_ERRORS as exc:
            # The turns are safe in Redis and the session has a dispatch deadline (the
            # lease TTL): a worker's reaper dispatches it once the broker answers.
            # Raising would tell the caller the turn failed while it will still run.
            log.warning(
                "session %s: its turn is queued, but the Celery broker is unreachable (%s); "
                "a worker's reaper dispatches it once the broker is back",
                session_id,
                exc,
            )

    async def state_store(self) -> StateStore:
        """The shared state store (opened on first use): conversations, turns, sessions.
        ``producer.store`` is the long-term store of documents, not this."""
        async with self._store_lock:
            if self._store is None:
                self._store = await open_store(
                    self.settings.database_url, namespace=self.settings.namespace
                )
        return self._store

    async def audit_log(self) -> AuditSink | None:
        """The audit log beside the state store (None when the store is not SQL)."""
        store = await self.state_store()
        async with self._store_lock:
            if self._audit is None:
                # Unbatched: a producer may exit right after a submit returns.
                self._audit = audit_sink_for(store, batch=False, spill=self._spill)
        return self._audit

    async def _recording_sink(self) -> AuditSink | None:
        return await self.audit_log() if self.settings.audit else None

    async def _publish_reverts(
        self, session_id: str, turn_id: str, changes: Sequence[FileChange]
    ) -> None:
        """A ``file_change`` event for each file a revert put back, as a worker's revert
        publishes them: through the publisher, so the audit log has them too. Attempt 0,
        as the producer's other events of a turn: no run of the turn made them."""
        for fields in describe_changes(changes):
            await self.publisher.publish(
                FileChangeEvent(session_id=session_id, turn_id=turn_id, attempt=0, **fields)
            )
