"""Work under a session's lease: renewed while it runs, stopped when it is lost.

The drain's side of the lease (docs/architecture.md, "Session protocol"): the token
recorded in the store (the fence), the renewal loop around everything done under the
lease, a turn's task that a shutdown can stop and give back (``Running``), and what a
refused token or a store that stayed away means for the turn. ``LeaseHolding`` is a
base of ``Drainer``; it uses the drain's attributes named on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from redis.exceptions import RedisError

from reactq.shared.errors import (
    EvictedError,
    LeaseLostError,
    ReactqError,
    StaleLeaseError,
    StoreUnavailableError,
)
from reactq.shared.events import FinalEvent
from reactq.shared.protocol.control import CancelMode
from reactq.shared.protocol.lease import SessionLease
from reactq.shared.protocol.queue import SessionQueue
from reactq.shared.settings import Settings
from reactq.shared.state import StateStore
from reactq.worker.agent.cancel import CancelEvent

__all__ = ["LeaseHolding", "Running"]

log = logging.getLogger("reactq.worker")

T = TypeVar("T")


@dataclass(eq=False)
class Running:
    """A turn in flight in this process, reachable by the control listener."""

    session_id: str
    cancel: CancelEvent = field(default_factory=CancelEvent)
    mode: CancelMode | None = None
    task: asyncio.Future[FinalEvent] | None = None
    evicted: bool = False


class LeaseHolding:
    """The drain's lease work (a base of ``Drainer``, which sets these attributes)."""

    queue: SessionQueue
    lease: SessionLease
    store: StateStore
    settings: Settings
    running: dict[str, Running]
    _fenced: dict[str, int]
    _current: dict[str, str]

    async def _fence(self, sid: str, agent: str, token: int) -> None:
        """Record this lease's token in the store (``claim``), once per lease: the
        token is the same for every turn this drain runs. The fence is kept on the
        session row, so the row must exist first."""
        if self._fenced.get(sid) != token:
            await self.store.ensure_session(sid, agent)
            await self.store.claim(sid, token)
            self._fenced[sid] = token

    async def _holding_lease(self, sid: str, token: int, work: Awaitable[T]) -> T:
        """Run ``work`` (everything done under the lease, store waits included)
        while renewing the lease; stop it if the lease is lost.

        The lease stays alive while this process is alive, even when a call it
        waits on (a database lock held by a paused peer, say) takes longer than
        the lease TTL, so no second holder starts the same turn meanwhile.
        """
        task = asyncio.ensure_future(work)
        ttl = self.settings.lease_ttl_seconds
        renewed = time.monotonic()
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=ttl / 3)
                if done:
                    return task.result()
                try:
                    if not await self.lease.renew(sid, token):
                        if task.done():  # the work gave the lease up itself meanwhile
                            return task.result()
                        raise LeaseLostError(
                            f"another worker holds the lease of {sid}", session_id=sid
                        )
                    renewed = time.monotonic()
                    await self._poll_cancel_flags(sid)
                except RedisError as exc:
                    # Keep trying while the lease may still be ours; past its TTL
                    # another worker may hold it, so nothing more may commit.
                    if time.monotonic() - renewed >= ttl:
                        raise LeaseLostError(
                            f"could not renew the lease of {sid}: {exc}", session_id=sid
                        ) from exc
                    log.warning("session %s: lease renewal failed (%s); retrying", sid, exc)
        finally:
            await _stop(task)

    async def _poll_cancel_flags(self, sid: str) -> None:
        """The fallback for a missed control notice: read the flag of our turn."""
        turn_id = self._current.get(sid)
        entry = self.running.get(turn_id) if turn_id is not None else None
        if entry is not None and not entry.cancel.is_set():
            mode = await self.queue.cancel_mode(sid, turn_id or "")
            if mode is not None:
                entry.mode = mode
                entry.cancel.set()

    async def _run_evictable(
        self, sid: str, turn_id: str, work: Awaitable[FinalEvent], entry: Running
    ) -> FinalEvent:
        """Run the kernel as its own task, so a shutdown can stop it and give it back."""
        task = entry.task = asyncio.ensure_future(work)
        try:
            await asyncio.wait({task})
        finally:
            await _stop(task)
        if task.cancelled():
            if entry.evicted:
                with contextlib.suppress(RedisError):
                    await self.queue.give_back(sid, turn_id)
                raise EvictedError(f"turn {turn_id} given back on shutdown", turn_id=turn_id)
            raise asyncio.CancelledError
        return task.result()

    async def _reseed(self, sid: str, token: int, exc: Exception) -> bool:
        """The store refused this lease's token for a newer fence (``newest``) while no
        other holder exists: Redis lost its data and its counter started again.
        Re-seed it above the store's fence (``SessionLease.reseed``) so the session
        recovers on its next take, instead of losing turns until the counter catches
        up. False when the refusal was a real newer holder's."""
        newest = exc.details.get("newest") if isinstance(exc, StaleLeaseError) else None
        if not isinstance(newest, int) or newest <= token:
            return False
        try:
            if not await self.lease.reseed(sid, token, newest):
                return False
        except RedisError:
            return False
        log.warning(
            "session %s: the lease counter (token %d) was behind the state store's fence "
            "%d (Redis lost its data?); re-seeded it above the fence",
            sid,
            token,
            newest,
        )
        return True

    async def _give_back_unanswered(
        self, sid: str, turn_id: str, token: int, exc: StoreUnavailableError
    ) -> ReactqError:
        """The state database stayed away past the outage budget: give the turn back,
        uncharged (a database that is slow to return is no fault of the turn's, and a
        charge would end it with max_attempts), for the reaper to re-dispatch (the
        drain sets the session's deadline as it lets go). What to raise: the drain
        reads it as a give-back (or, the lease gone meanwhile, as a lost lease: the
        turn is its new holder's)."""
        if not await self._still_holds(sid, token):
            return LeaseLostError(f"lost the lease of {sid} ({exc.message})", session_id=sid)
        log.warning("session %s: turn %s given back: %s", sid, turn_id, exc.message)
        with contextlib.suppress(RedisError):
            await self.queue.give_back(sid, turn_id)
        return EvictedError(f"turn {turn_id} given back: {exc.message}", turn_id=turn_id)

    async def _still_holds(self, sid: str, token: int) -> bool:
        try:
            return await self.lease.holds(sid, token)
        except RedisError:
            return False


async def _stop(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` until it ends; its outcome is retrieved (once the lease is lost
    its error is nobody's). Cancelled again: on Python 3.11 a cancel that lands as
    redis-py sends a command is swallowed (asyncio.wait_for), and a turn whose lease
    was lost ran on, to fail later as "never retrieved"."""
    task.add_done_callback(_retrieve)
    stopped = False  # this task was cancelled too: it ends once ``task`` has
    while not task.done():
        task.cancel()
        try:
            await asyncio.wait({task}, timeout=0.1)
        except asyncio.CancelledError:
            stopped = True
    if stopped:
        raise asyncio.CancelledError


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()
