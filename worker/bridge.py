"""One asyncio loop per worker process, shared by every task.

Celery's pool is only a doorway: each drain task hands its coroutine to this
loop and returns (``hand_off``); the loop bounds the turns in flight, and a task
waits for a free slot in the pool (``worker/handoff.py``).
Clients bound to a loop (the redis pool, the SQL engine, AsyncOpenAI) are
created once, here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from redis.asyncio import Redis

from reactq.shared.audit import AuditedBus, AuditSink, audit_sink_for
from reactq.shared.audit_spill import AuditSpill
from reactq.shared.bus import EventBus
from reactq.shared.bus_redis import RedisEventBus
from reactq.shared.catalogue import AgentTools
from reactq.shared.keys import Keys
from reactq.shared.metrics import QueueDepthCollector, WorkerMetrics
from reactq.shared.protocol.deadlines import Deadlines
from reactq.shared.protocol.lease import SessionLease
from reactq.shared.protocol.queue import SessionQueue
from reactq.shared.protocol.ratelimit import RateBudget
from reactq.shared.protocol.steps import TurnSteps
from reactq.shared.protocol.workers import AgentProfile, WorkerRegistry
from reactq.shared.redis_client import connect, preload_scripts
from reactq.shared.services import redact_url
from reactq.shared.settings import Settings
from reactq.shared.state import StateStore, open_store
from reactq.shared.state.backends import find_backend_of
from reactq.shared.webhooks import Send, Webhooks
from reactq.worker.agent.llm import LLMClient
from reactq.worker.agent.llm.endpoint import ClientCache
from reactq.worker.agent.llm.pool import clients_for
from reactq.worker.agent.llm.ratelimit import RateLimiters
from reactq.worker.agent.mcp import MCPManager
from reactq.worker.agent.runner import AgentRunner
from reactq.worker.control import listen_for_control, reap_forever
from reactq.worker.definitions import Agent
from reactq.worker.drain import Drainer
from reactq.worker.observe import ObservedRunner, Observer, observed_agent

log = logging.getLogger("reactq.worker")
T = TypeVar("T")

AUDIT_LINGER_SECONDS = 0.25
"""How long a worker's audit rows may wait to be written with others: a turn's
``final`` writes them at once, so a turn's audit is whole once its final is."""


class Bridge:
    """Owns the worker process's event loop and everything bound to it."""

    def __init__(self, settings: Settings, agents: dict[str, Agent], worker_name: str) -> None:
        self.settings = settings
        self.agents = agents
        self.worker_name = worker_name
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="reactq-loop", daemon=True)
        self.redis: Redis | None = None
        self.store: StateStore | None = None
        self.llms: list[LLMClient] = []
        self.drainer: Drainer | None = None
        self.webhooks: Webhooks | None = None
        self.send_webhook: Send | None = None
        """Enqueues a webhook delivery (``run_worker`` sets it to its dispatcher's)."""
        self.registry: WorkerRegistry | None = None
        self.audit: AuditSink | None = None
        self.mcp = MCPManager()
        self.catalogues: dict[str, AgentTools] = {}
        """Each agent's tools as its model sees them (MCP tools included), published in
        the registry with every announcement."""
        self._duties: list[asyncio.Future[None]] = []
        self._rivals: dict[str, frozenset[str | None]] = {}
        """Agent -> the other live versions of its name this worker last warned of."""
        self.metrics: WorkerMetrics | None = None
        # The turns in flight are bounded here, not by Celery's threads (hand_off).
        self._slots = threading.BoundedSemaphore(settings.concurrency)
        self.on_slot_free: Callable[[], None] | None = None
        """Called (on the loop's thread) when a drain ends or a shutdown begins: the
        pool then runs the tasks it kept waiting for a slot (``HandOffPool``)."""
        self._drains: set[concurrent.futures.Future[Any]] = set()
        self._drains_lock = threading.Lock()

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> None:
        """Start the loop thread and open every connection."""
        self._thread.start()
        self.run(self._open())

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the loop from any thread and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def can_start(self) -> bool:
        """Whether a drain handed off now starts at once: fewer than ``concurrency``
        run, or a shutdown began (a drain then hands its session over at once).

        Asked by the pool on the consumer's thread, the only one that takes slots: a
        yes holds until it hands a drain off."""
        if self.drainer is None or self.drainer.stopping:
            return True
        if self._slots.acquire(blocking=False):
            self._slots.release()
            return True
        return False

    def hand_off(self, work: Coroutine[Any, Any, Any]) -> None:
        """Start a drain on the loop and return: the caller does not wait for the
        drain, only (when the pool did not ask ``can_start``) while ``concurrency``
        drains run.

        The drain message is acked on return. That loses nothing if this process
        dies: the session's lease and deadline make another worker's reaper take
        it over, as for a message lost any other way (docs/architecture.md).
        """
        slot = False
        while not (slot := self._slots.acquire(timeout=0.5)):
            if self.drainer is None or self.drainer.stopping:
                # Shutting down: a drain then hands the session over at once.
                break
        future = asyncio.run_coroutine_threadsafe(work, self.loop)
        with self._drains_lock:
            self._drains.add(future)

        def done(f: concurrent.futures.Future[Any]) -> None:
            if slot:
                self._slots.release()
                if self.on_slot_free is not None:
                    self.on_slot_free()
            with self._drains_lock:
                self._drains.discard(f)
            if not f.cancelled() and f.exception() is not None:
                log.error("a drain failed", exc_info=f.exception())

        future.add_done_callback(done)

    def wait_for_drains(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for the drains in flight; return how many are
        still running."""
        deadline = time.monotonic() + timeout
        while True:
            with self._drains_lock:
                running = list(self._drains)
            if not running:
                return 0
            left = deadline - time.monotonic()
            if left <= 0:
                return len(running)
            concurrent.futures.wait(running, timeout=left)

    async def _open(self) -> None:
        s = self.settings
        # Every in-flight turn may hold a connection briefly (publish, renew), and
        # subscribers block on one: size the pool to the concurrency.
        self.redis = connect(s.redis_url, max_connections=s.concurrency * 2 + 16)
        await preload_scripts(self.redis)
        keys = Keys.for_settings(s)
        bus = RedisEventBus(
            self.redis, keys, maxlen=s.event_maxlen, ttl_seconds=s.event_ttl_seconds
        )
        lease = SessionLease(
            self.redis, keys, ttl_seconds=s.lease_ttl_seconds, owner=self.worker_name
        )
        queue = SessionQueue(
            self.redis,
            keys,
            s.session_meta_ttl_seconds,
            dispatch_grace_seconds=s.lease_ttl_seconds,
        )
        registry = self.registry = WorkerRegistry(self.redis, keys)
        # A turn's steps outlive any wait for decisions; they go when the turn ends.
        steps_ttl = max(s.session_meta_ttl_seconds, int(s.approval_timeout_seconds) + 3600)
        steps = TurnSteps(self.redis, keys, steps_ttl)
        self.webhooks = Webhooks(self.redis, keys, s)
        path = s.database_path
        created = path is not None and not path.exists()
        self.store = await open_store(
            s.database_url, namespace=s.namespace, outage_seconds=s.store_outage_seconds
        )
        # The audit log lives in the state database: a SQL store brings it along. Its
        # rows wait for their turn's final (or AUDIT_LINGER_SECONDS): a write a turn.
        # Rows the database cannot take meanwhile wait in Redis (``spill``).
        spill = AuditSpill(self.redis, keys, s.audit_spill_max_rows)
        sink = self.audit = (
            audit_sink_for(self.store, linger=AUDIT_LINGER_SECONDS, spill=spill)
            if s.audit
            else None
        )
        events: EventBus = bus if sink is None else AuditedBus(bus, sink, close_sink=False)
        runners: dict[str, AgentRunner] = {}
        clients = ClientCache(clients_for(s.concurrency))
        limiters = RateLimiters(RateBudget(self.redis, keys))  # one budget for the whole pool
        # MCP tools join each registry before its loop is built (a loop fixes its tool list).
        registries = {name: agent.registry() for name, agent in self.agents.items()}
        await self.mcp.start(
            {name: (registries[name], agent.mcp_servers) for name, agent in self.agents.items()}
        )
        self.catalogues = {name: a.catalogue(registries[name]) for name, a in self.agents.items()}
        observer = self._observer()
        if self.metrics is not None:
            spill.on_dropped = self.metrics.audit_dropped.inc
        for name, agent in self.agents.items():
            llm, *fallbacks = clients.for_agent(agent, s)  # shared by agents on one endpoint
            observed = observed_agent(agent, observer, s)
            loop = observed.build_loop(
                llm,
                registries[name],
                settings=s,
                fallback_llms=fallbacks,
                limiters=limiters.for_agent(agent, s),
            )
            runners[name] = AgentRunner(
                loop, self.store, name, steps, workspace_root=s.workspace_root
            )
            if observer.active:
                runners[name] = ObservedRunner(runners[name], observer)
        self.llms = clients.clients()
        self.drainer = Drainer(
            queue=queue,
            lease=lease,
            deadlines=Deadlines(self.redis, keys),
            bus=events,
            store=self.store,
            runners=runners,
            settings=s,
            worker_name=self.worker_name,
            steps=steps,
            webhooks=self.webhooks,
        )
        await registry.register_agents(
            sorted(self.agents), self.worker_name, self._profiles(), self.catalogues
        )
        await self._warn_of_rivals(registry)
        self._duties = [
            asyncio.ensure_future(listen_for_control(self.redis, keys, self.drainer)),
            asyncio.ensure_future(
                reap_forever(self.drainer, s.reaper_interval_seconds, s.lease_ttl_seconds)
            ),
            asyncio.ensure_future(self._heartbeat(registry, s.heartbeat_seconds / 3)),
        ]
        backend = find_backend_of(self.store)
        if backend is not None and backend.audit_write_back is not None:
            # Any worker writes back what waits, the producer's rows included.
            self._duties.append(
                asyncio.ensure_future(
                    backend.audit_write_back(spill, self.store, s.reaper_interval_seconds)
                )
            )
        # Everything a newcomer needs to check the worker is the one they meant: what it
        # serves, and where (Celery's own banner is off: see tasks.run_worker).
        state = str(path) if path is not None else redact_url(s.database_url)
        log.info(
            "worker %s ready: agents %s on queues %s, concurrency %d, broker %s, "
            "state database %s%s",
            self.worker_name,
            ", ".join(sorted(self.agents)),
            ", ".join(keys.queue(a) for a in sorted(self.agents)),
            s.concurrency,
            redact_url(s.effective_broker_url),
            state,
            " (created)" if created else "",
        )

    async def _heartbeat(self, registry: WorkerRegistry, every: float) -> None:
        """Re-announce this worker and its agents every ``every`` seconds: the registry's
        timestamps are how a producer tells a live pool from one that is gone
        (``reactq send`` warns when no worker hosting the agent beat recently)."""
        agents = sorted(self.agents)
        while True:
            await asyncio.sleep(every)
            try:
                await registry.register_agents(
                    agents, self.worker_name, self._profiles(), self.catalogues
                )
                await self._warn_of_rivals(registry)
            except Exception as exc:  # Redis away for a moment: the next beat will do
                log.warning("worker heartbeat failed (%s: %s)", type(exc).__name__, exc)

    async def _warn_of_rivals(self, registry: WorkerRegistry) -> None:
        """Log a WARNING when a name this worker hosts is live with another definition
        (a rolling deploy, or two different agents named alike): turns and delegations
        for it then reach either one. Once a change, not at every beat."""
        versions = {name: agent.config_version for name, agent in self.agents.items()}
        found = await registry.rivals(versions, self.settings.heartbeat_seconds)
        for name in sorted(versions):
            others = found.get(name, [])
            seen = frozenset(o.config_version for o in others)
            if seen == self._rivals.get(name, frozenset()):
                continue
            self._rivals[name] = seen
            if not others:
                log.info("agent %r: version %s is its only live definition", name, versions[name])
                continue
            where = "; ".join(
                f"version {o.config_version} on {', '.join(o.workers)}" for o in others
            )
            log.warning(
                "agent %r: this worker (%s) hosts version %s, and another definition of the "
                "name is live in namespace %r (%s): its turns and delegations may reach "
                "either until one is gone (`reactq agents` lists both)",
                name,
                self.worker_name,
                versions[name],
                self.settings.namespace,
                where,
            )

    def _profiles(self) -> dict[str, AgentProfile]:
        """What producers check a turn's overrides against (see ``WorkerRegistry``)."""
        return {name: agent.profile() for name, agent in self.agents.items()}

    def _observer(self) -> Observer:
        """Metrics (when REACTQ_METRICS_PORT is set) and spans (when REACTQ_TRACING is)."""
        s = self.settings
        if s.metrics_port and self.metrics is None:
            self.metrics = WorkerMetrics(self.worker_name)
            broker, agents = s.effective_broker_url, sorted(self.agents)
            self.metrics.registry.register(QueueDepthCollector(broker, s.namespace, lambda: agents))
            self.metrics.serve(s.metrics_port, s.metrics_address)
            log.info("metrics on %s:%d/metrics", s.metrics_address, s.metrics_port)
        return Observer(self.metrics, s.tracing, s.otel_capture_content)

    def begin_shutdown(self) -> None:
        """Warm shutdown (from any thread): finish running turns within the grace period.

        No new turn starts here; when the grace period is over, turns still
        running are stopped and given back, uncharged, for another worker.
        """

        def start() -> None:
            if self.drainer is None or self.drainer.stopping:
                return
            self.drainer.stopping = True
            if self.on_slot_free is not None:
                self.on_slot_free()  # the kept tasks hand their sessions over
            grace = self.settings.shutdown_grace_seconds
            log.info("warm shutdown: %d turns running, grace %.1fs", self.drainer.in_flight, grace)
            self.loop.call_later(grace, self._evict)

        self.loop.call_soon_threadsafe(start)

    def _evict(self) -> None:
        if self.drainer is not None and self.drainer.in_flight:
            log.warning("grace period over: giving back %d turns", self.drainer.evict_all())

    def stop(self) -> None:
        """Let the drains in flight end (a warm shutdown gives them its grace period,
        then gives their turns back), close every connection and stop the loop."""
        if not self._thread.is_alive():
            return
        self.begin_shutdown()
        left = self.wait_for_drains(self.settings.shutdown_grace_seconds + 15)
        if left:
            log.warning("stopping with %d drains still running", left)
        try:
            self.run(self._close(), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    async def _close(self) -> None:
        # Cancelled again until they end: on Python 3.11 a cancel that lands as redis-py
        # sends a command is swallowed (asyncio.wait_for), and a duty's loop went on, so
        # the close waited out its whole timeout.
        pending = set(self._duties)
        for _ in range(100):
            if not pending:
                break
            for duty in pending:
                duty.cancel()
            _, pending = await asyncio.wait(pending, timeout=0.1)
        if self.registry is not None:
            await self.registry.forget_worker(self.worker_name)
        for llm in self.llms:
            close = getattr(llm, "aclose", None)
            if close is not None:
                await close()
        await self.mcp.aclose()
        if self.audit is not None:
            await self.audit.close()  # writes the queued rows; the store stays open
        if self.store is not None:
            await self.store.close()
        if self.redis is not None:
            await self.redis.aclose()
        if self.metrics is not None:
            self.metrics.close()
