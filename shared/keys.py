"""Every Redis key and channel name, in one place.

Session keys carry the session id in a hash tag (``{...}``) so that one
session's keys share a cluster slot and Lua scripts may touch them together.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    """Key names under one namespace (``REACTQ_NAMESPACE``)."""

    namespace: str = "reactq"

    def _s(self, session_id: str, suffix: str) -> str:
        return f"{self.namespace}:s:{{{session_id}}}:{suffix}"

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

    @property
    def approvals_index(self) -> str:
        """A set of the session ids that have a turn waiting for decisions."""
        return f"{self.namespace}:approvals"

    def turn_index(self, turn_id: str) -> str:
        """turn_id -> session_id, so a turn can be found by its id alone."""
        return f"{self.namespace}:turn:{turn_id}"

    @property
    def lease_deadlines(self) -> str:
        """A sorted set session_id -> deadline (server ms), read by the reaper; written
        only by ``protocol/deadlines.lua``."""
        return f"{self.namespace}:leases"

    @property
    def agents(self) -> str:
        """A hash agent name -> JSON of the workers hosting it (with a heartbeat time)."""
        return f"{self.namespace}:agents"

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
