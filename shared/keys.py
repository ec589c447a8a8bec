"""Every Redis key and channel name, in one place.

Session keys carry a hash tag (``{...}``) so that one session's keys share a
cluster slot and Lua scripts may touch them together. On a single Redis the tag
is the session id. On a Redis Cluster (``shards`` > 0) it is the session's
*shard*, one of ``shards`` tags the sessions are spread over by a hash of their
id: the sets a session's scripts update with its queue and lease (the deadline
set, the index of parked turns) exist once per shard, in the shard's slot, so
those scripts stay one atomic call; readers of those sets read every shard's.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reactq.shared.redis_urls import is_cluster_url

if TYPE_CHECKING:
    from reactq.shared.settings import Settings

DEFAULT_CLUSTER_SHARDS = 64
"""``REACTQ_REDIS_CLUSTER_SHARDS``' default."""


@dataclass(frozen=True)
class Keys:
    """Key names under one namespace (``REACTQ_NAMESPACE``)."""

    namespace: str = "reactq"
    shards: int = 0
    """0 on a single Redis; on a cluster, how many hash tags sessions are spread
    over (``REACTQ_REDIS_CLUSTER_SHARDS``). Producers and workers must agree."""

    @classmethod
    def for_settings(cls, settings: Settings) -> Keys:
        """The keys of ``settings``' namespace, sharded when its Redis is a cluster."""
        cluster = is_cluster_url(settings.redis_url)
        return cls(settings.namespace, settings.redis_cluster_shards if cluster else 0)

    def tag(self, session_id: str) -> str:
        """The hash tag of the session's keys: its id, or on a cluster its shard."""
        if not self.shards:
            return session_id
        # crc32, not hash(): every process must place a session in the same shard.
        return f"{self.namespace}#{zlib.crc32(session_id.encode()) % self.shards}"

    def _s(self, session_id: str, suffix: str) -> str:
        if not self.shards:
            return f"{self.namespace}:s:{{{session_id}}}:{suffix}"
        return f"{self.namespace}:s:{{{self.tag(session_id)}}}:{session_id}:{suffix}"

    def _per_shard(self, name: str, session_id: str) -> str:
        if not self.shards:
            return f"{self.namespace}:{name}"
        return f"{self.namespace}:{name}:{{{self.tag(session_id)}}}"

    def _every_shard(self, name: str) -> list[str]:
        if not self.shards:
            return [f"{self.namespace}:{name}"]
        return [f"{self.namespace}:{name}:{{{self.namespace}#{n}}}" for n in range(self.shards)]

    def events(self, session_id: str) -> str:
        """The session's capped event stream (XADD)."""
        return self._s(session_id, "events")

    def channel(self, session_id: str) -> str:
        """The session's pub/sub channel (each event, with its stream id)."""
        return self._s(session_id, "channel")

    def pending(self, session_id: str) -> str:
        """The session's FIFO of turns waiting to run (a list of TurnRequest JSON)."""
        return self._s(session_id, "pending")

    def running(self, session_id: str) -> str:
        """The turn being run (its TurnRequest JSON), kept until it is committed."""
        return self._s(session_id, "running")

    def meta(self, session_id: str) -> str:
        """A hash of the session's facts (its agent)."""
        return self._s(session_id, "meta")

    def turns(self, session_id: str) -> str:
        """A hash turn_id -> status JSON for the session's recent turns."""
        return self._s(session_id, "turns")

    def steps(self, session_id: str) -> str:
        """A hash turn_id -> the running turn's checkpointed steps (TurnCheckpoint
        JSON), from its first completed step until it ends."""
        return self._s(session_id, "steps")

    def webhook(self, session_id: str, turn_id: str) -> str:
        """A hash of the turn's webhook: its URL, agent, its delivery, whether it was
        enqueued, the last attempt started (and whether it is in flight), whether the
        delivery is over, and one ``attempt:<n>`` field per POST (``shared/webhooks.py``)."""
        return self._s(session_id, f"webhook:{turn_id}")

    def once(self, session_id: str, call_id: str) -> str:
        """The reply of one call of a session's script that acts once (``once.lua``),
        kept a short while for redis-py's resends of the same call."""
        return self._s(session_id, f"once:{call_id}")

    def lease(self, session_id: str) -> str:
        """The session's lease: ``<token>:<owner>`` with a TTL."""
        return self._s(session_id, "lease")

    def fence(self, session_id: str) -> str:
        """The session's fencing-token counter (INCR)."""
        return self._s(session_id, "fence")

    def cancel_prefix(self, session_id: str) -> str:
        """Prefix of the session's per-turn cancel flags."""
        return self._s(session_id, "cancel:")

    def cancel_flag(self, session_id: str, turn_id: str) -> str:
        """Set (with a TTL) when a turn is asked to stop; holds the mode."""
        return self.cancel_prefix(session_id) + turn_id

    def approvals(self, session_id: str) -> str:
        """A hash: the session's parked turn, its waiting calls and their decisions
        (``shared/protocol/approvals.py``)."""
        return self._s(session_id, "approvals")

    def children(self, session_id: str, turn_id: str) -> str:
        """A hash: the child turns a turn of the session delegated to and their results
        (``shared/protocol/children.py``)."""
        return self._s(session_id, f"children:{turn_id}")

    def delegation(self, turn_id: str) -> str:
        """child turn_id -> its parent (JSON), so the child's end reaches the parent."""
        return f"{self.namespace}:delegation:{turn_id}"

    def approvals_index(self, session_id: str) -> str:
        """The set of session ids with a turn waiting for decisions that holds
        ``session_id``'s (one per shard on a cluster)."""
        return self._per_shard("approvals", session_id)

    def approvals_indexes(self) -> list[str]:
        """Every ``approvals_index`` set."""
        return self._every_shard("approvals")

    def turn_index(self, turn_id: str) -> str:
        """turn_id -> session_id, so a turn can be found by its id alone."""
        return f"{self.namespace}:turn:{turn_id}"

    def schedule_tick(self, schedule_id: str, tick: int) -> str:
        """Set (NX, with a TTL) by the beat process that fires a schedule's tick (Unix
        seconds): of two beats, the one that set it submits the turn."""
        return f"{self.namespace}:schedule-tick:{schedule_id}:{tick}"

    def lease_deadlines(self, session_id: str) -> str:
        """The sorted set session_id -> deadline (server ms) that holds
        ``session_id``'s deadline (one per shard on a cluster); read by the reaper,
        written only by ``protocol/deadlines.lua``."""
        return self._per_shard("leases", session_id)

    def webhook_deadlines(self, session_id: str) -> str:
        """The sorted set ``[session_id, turn_id]`` -> Unix time by which the turn's
        webhook delivery must show progress, else the reaper sends it again (one per
        shard on a cluster, beside the session's ``webhook`` hashes)."""
        return self._per_shard("webhooks_due", session_id)

    def webhook_deadline_sets(self) -> list[str]:
        """Every ``webhook_deadlines`` set."""
        return self._every_shard("webhooks_due")

    def deadline_sets(self) -> list[str]:
        """Every ``lease_deadlines`` set."""
        return self._every_shard("leases")

    def rate_limit(self, bucket: str) -> str:
        """A model's token bucket, shared by every worker (``protocol/ratelimit.py``):
        ``bucket`` names an endpoint and model (``bucket_name``). Its hash tag is its own,
        never a session's or a shard's: its scripts touch no other key."""
        return f"{self.namespace}:ratelimit:{{rl:{bucket}}}"

    @property
    def agents(self) -> str:
        """A hash agent name -> JSON of the workers hosting it (with a heartbeat time)."""
        return f"{self.namespace}:agents"

    @property
    def agent_tools(self) -> str:
        """A hash agent name -> JSON of its tool catalogue (``shared.catalogue.AgentTools``),
        as the worker that announced it last published it."""
        return f"{self.namespace}:agent_tools"

    @property
    def audit_spill(self) -> str:
        """A list of audit rows (JSON) the state database could not take, oldest
        first, waiting for a worker to write them (``shared/audit_spill.py``)."""
        return f"{self.namespace}:audit_spill"

    @property
    def workers(self) -> str:
        """A hash worker name -> JSON of its agents and last heartbeat time."""
        return f"{self.namespace}:workers"

    @property
    def control(self) -> str:
        """The control channel every worker process listens to (cancel notices)."""
        return f"{self.namespace}:control"

    def queue(self, agent: str) -> str:
        """The Celery queue of an agent."""
        return f"{self.namespace}.{agent}"

    @property
    def celery_control(self) -> str:
        """Celery's ``control_exchange``: remote control (``{ns}.pidbox``, the broadcasts
        Flower's inspections use) stays among this namespace's workers."""
        return self.namespace

    @property
    def celery_events(self) -> str:
        """Celery's ``event_exchange`` (and ``event_queue_prefix``): the task and heartbeat
        events Flower reads, per namespace, so a Flower sees its own pool only."""
        return f"{self.namespace}.celeryev"

    def celery_isolation(self) -> dict[str, str]:
        """The Celery settings that keep a namespace's control and events to itself;
        the workers' app and Flower's must both have them."""
        return {
            "control_exchange": self.celery_control,
            "event_exchange": self.celery_events,
            "event_queue_prefix": self.celery_events,
        }

    def a2a_push(self, task_id: str) -> str:
        """A hash: an A2A task's push notification configs (config id -> JSON) and
        what was sent to each (``sent:<config>:<state>``)."""
        return f"{self.namespace}:a2a:push:{task_id}"

    def a2a_tasks(self, tenant: str) -> str:
        """A sorted set: the turns the gateway's A2A surface started for a tenant (its
        session prefix; ``""`` without one), by submit time, for ``ListTasks``."""
        return f"{self.namespace}:a2a:tasks:{tenant}"
