"""Scheduled turns from the producer's side: add, list, pause, resume and remove them,
and fire one tick (what ``reactq beat`` calls).

What ``Producer.add_schedule`` and its siblings (and the gateway's ``/v1/schedules``
routes, and ``reactq schedule``) answer. A firing submits its turn through
``Producer.submit``, the path every other turn takes; of two beat processes firing the
same tick, the one whose ``SET NX`` of the tick's key succeeds submits, the other
submits nothing (docs/architecture.md, "Scheduled turns").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from reactq.shared.errors import (
    AgentMismatchError,
    ReactqError,
    ScheduleNotFoundError,
    TooManySchedulesError,
    UnknownAgentError,
)
from reactq.shared.schedules import Schedule, check_timing, new_schedule_id
from reactq.shared.state.schedule_store import ScheduleStore, schedules_for
from reactq.shared.tenancy import TenantIdentity
from reactq.shared.turn_inputs import check_metadata
from reactq.shared.turns import check_message, validate_session_id

if TYPE_CHECKING:
    from reactq.producer.client import Producer

__all__ = ["add_schedule", "fire", "schedule_store", "set_paused"]

log = logging.getLogger("reactq.beat")


async def schedule_store(producer: Producer) -> ScheduleStore:
    """The schedules beside the producer's state store."""
    return schedules_for(await producer.state_store())


async def add_schedule(
    producer: Producer,
    session_id: str,
    message: str,
    *,
    agent: str,
    cron: str | None = None,
    every: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    tenant: TenantIdentity | None = None,
    fresh_sessions: bool = False,
) -> Schedule:
    """Check and store a schedule (see ``Producer.add_schedule``).

    ``tenant``: the caller's identity (a scoped key's), kept on the schedule and on
    every turn it fires; the schedules of its session prefix (every schedule, for a
    caller without one) may number ``REACTQ_MAX_SCHEDULES_PER_TENANT``. The
    count is read before the add, so adds racing from two processes may pass it by
    their number: a cap against a runaway client, not an exact quota.
    """
    settings = producer.settings
    validate_session_id(session_id)
    check_timing(cron, every, settings.schedule_min_interval_seconds)
    if not isinstance(message, str):
        message = str(message)  # check_message names what is wrong with text alone
    text, _ = check_message(
        message,
        settings.max_message_bytes,
        settings.max_image_bytes,
        settings.max_content_bytes,
    )
    checked = check_metadata(dict(metadata) if metadata is not None else None)
    if not isinstance(agent, str) or await producer.registry.agent_profile(agent) is None:
        raise UnknownAgentError(
            f"no worker hosts agent {agent!r:.80}: start one with "
            f"`reactq worker --agents MODULE:ATTR` (namespace {settings.namespace!r})",
            agent=str(agent)[:200],
        )
    if fresh_sessions:
        # Each tick's session is new, and made by its turn for the agent.
        validate_session_id(f"{session_id}-{int(time.time())}")
    owner = None if fresh_sessions else await producer.queue.session_agent(session_id)
    if owner is None and not fresh_sessions:
        record = await (await producer.state_store()).get_session(session_id)
        owner = None if record is None else record.agent
    if owner is not None and owner != agent:
        raise AgentMismatchError(
            f"session {session_id!r} belongs to agent {owner!r}, not {agent!r}",
            session_id=session_id,
            agent=owner,
        )
    store = await schedule_store(producer)
    prefix = tenant.prefix if tenant is not None else None
    await _check_cap(store, prefix, settings.max_schedules_per_tenant)
    schedule = Schedule(
        schedule_id=new_schedule_id(),
        session_id=session_id,
        agent=agent,
        message=text,
        cron=" ".join(cron.split()) if cron is not None else None,
        every=every,
        created_at=time.time(),
        metadata=checked,
        tenant=tenant,
        fresh_sessions=fresh_sessions,
    )
    await store.add(schedule)
    return schedule


async def _check_cap(store: ScheduleStore, tenant: str | None, cap: int) -> None:
    """TooManySchedulesError when the tenant has ``cap`` schedules already."""
    found = await store.find()
    count = sum(1 for s in found if tenant is None or s.session_id.startswith(tenant))
    if count >= cap:
        whose = f"tenant {tenant!r}" if tenant is not None else "this namespace"
        raise TooManySchedulesError(
            f"{whose} has {count} schedules, the most it may have "
            "(REACTQ_MAX_SCHEDULES_PER_TENANT): remove one before adding another",
            tenant=tenant,
            limit=cap,
        )


async def set_paused(producer: Producer, schedule_id: str, paused: bool) -> Schedule:
    """Pause or resume a schedule. A resumed one fires at its next tick: the ticks it
    missed while paused are not made up (its ``last_run_at`` moves to now)."""
    store = await schedule_store(producer)
    fields: dict[str, Any] = {"paused": paused}
    if not paused:
        found = await store.get(schedule_id)
        if found is not None and found.paused:
            fields["last_run_at"] = time.time()
    changed = await store.update(schedule_id, **fields)
    if changed is None:
        raise not_found(schedule_id)
    return changed


def not_found(schedule_id: str) -> ScheduleNotFoundError:
    """The error for a schedule id no schedule has."""
    return ScheduleNotFoundError(
        f"no schedule {schedule_id[:80]!r}", schedule_id=str(schedule_id)[:80]
    )


async def fire(producer: Producer, schedule_id: str, tick: float, claim_ttl: int) -> str | None:
    """Fire the schedule's ``tick`` (Unix time) once: claim it in Redis, then submit its
    turn. The turn's id, or None when this call submitted nothing: the schedule is gone
    or paused, the tick was fired already (by this beat or another), or the submit was
    refused (the schedule's ``last_error`` says why)."""
    store = await schedule_store(producer)
    schedule = await store.get(schedule_id)
    if schedule is None or schedule.paused:
        return None
    if schedule.last_run_at is not None and schedule.last_run_at >= tick:
        log.info("schedule %s: tick %d was fired already", schedule_id, tick)
        return None
    key = producer.keys.schedule_tick(schedule_id, int(tick))
    if not await producer.redis.set(key, "fired", nx=True, ex=claim_ttl):
        log.info("schedule %s: tick %d was claimed by another beat", schedule_id, tick)
        return None
    metadata = {**schedule.metadata, "schedule_id": schedule_id, "scheduled_for": tick}
    try:
        handle = await producer.submit(
            schedule.session_for(tick),
            schedule.message,
            agent=schedule.agent,
            metadata=metadata,
            tenant=schedule.tenant,
        )
    except ReactqError as exc:
        log.warning("schedule %s: tick %d submitted nothing: %s", schedule_id, tick, exc)
        await store.update(schedule_id, last_run_at=tick, last_error=f"[{exc.code}] {exc.message}")
        return None
    await store.update(schedule_id, last_run_at=tick, last_turn_id=handle.turn_id, last_error=None)
    log.info("schedule %s: tick %d submitted turn %s", schedule_id, tick, handle.turn_id)
    return handle.turn_id
