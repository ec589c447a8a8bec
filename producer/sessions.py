"""Sessions as a whole: one session's summary, its turns, and deleting it.

What ``Producer.get_session``, ``session_turns`` and ``delete_session`` (and the
gateway's ``/v1/sessions`` routes) answer. A session's turns are put together from
three places, as ``turn_lookup`` does for one turn: the turn statuses Redis still
holds, the committed records of the state store, and the turns' ``queued``,
``started`` and ``final`` events, from the audit log and the session's stream (a
worker writes its audit rows in batches, so a turn that just ended may be in the
stream only).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from reactq.producer.turn_lookup import PendingCall, TurnInfo, summarize, with_record
from reactq.shared.audit import in_stream_order
from reactq.shared.errors import SessionBusyError, SessionNotFoundError
from reactq.shared.events import Event
from reactq.shared.redis_client import lua_source, text
from reactq.shared.state.schedule_store import schedules_for
from reactq.shared.turns import TurnStatus, validate_session_id
from reactq.shared.workspace_names import workspace_dir_name

if TYPE_CHECKING:
    from reactq.producer.client import Producer

__all__ = ["SessionDeleted", "SessionDetail", "delete_session", "session_detail", "session_turns"]

TURN_EVENTS = ("queued", "started", "final")
"""The events a turn's summary is made of."""

_DELETE = lua_source(__name__, "session_delete")


class SessionDetail(BaseModel):
    """One session: what the store keeps of it and what its turns add up to."""

    session_id: str
    """The session."""
    agent: str
    """The agent its turns run on."""
    active_branch: str
    """The branch new turns run on."""
    created_at: float
    """Unix time the store created it (its first turn started)."""
    updated_at: float
    """Unix time of its last write (a turn, a branch change, its metadata)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """What the application attached to it."""
    message_count: int
    """Messages on the active branch."""
    branches: int
    """How many branches it has."""
    turns: int
    """Turns known: ended, running or waiting (Redis forgets the ones that never ran
    after ``REACTQ_SESSION_META_TTL_SECONDS`` unless the audit log keeps them)."""
    queued: int
    """Turns waiting in its queue."""
    running_turn: str | None = None
    """The turn running or waiting for a decision, if any."""
    last_turn: TurnInfo | None = None
    """Its newest turn."""
    usage: dict[str, int] = Field(default_factory=dict)
    """Token usage summed over its turns' finals."""


class SessionDeleted(BaseModel):
    """What deleting a session removed."""

    session_id: str
    """The session."""
    state_deleted: bool
    """The state store had it (branches, messages, turn records, metadata)."""
    redis_keys: int
    """Keys of its queue and events deleted from Redis."""
    cancelled: list[str] = Field(default_factory=list)
    """Turns cancelled first (running, parked or queued); each has a ``cancelled`` final
    in the audit log."""
    workspace_deleted: bool = False
    """Its file tools' workspace was removed."""
    schedules_deleted: list[str] = Field(default_factory=list)
    """Its scheduled turns, removed so that none recreates it."""


async def session_turns(producer: Producer, session_id: str) -> list[TurnInfo]:
    """The session's turns, oldest first, each with status, attempt, usage and times."""
    validate_session_id(session_id)
    store = await producer.state_store()
    records = {r.turn_id: r for r in await store.list_turns(session_id)}
    statuses = {
        text(k): TurnStatus(text(v))
        for k, v in (await producer.redis.hgetall(producer.keys.turns(session_id))).items()
    }
    live = [e for e in await producer.bus.read(session_id) if e.type in TURN_EVENTS]
    audit = await producer.audit_log()
    kept = [] if audit is None else await audit.session_events(session_id, TURN_EVENTS)
    by_turn: dict[str, list[Event]] = defaultdict(list)
    for event in in_stream_order([*kept, *live]):
        by_turn[event.turn_id].append(event)
    live_turns = {e.turn_id for e in live}
    waiting = await producer.approvals.waiting(session_id)
    out: list[TurnInfo] = []
    for turn_id in {*by_turn, *records, *statuses}:
        record = records.get(turn_id)
        status = record.status if record is not None else statuses.get(turn_id)
        source: Literal["stream", "store"] = "stream" if turn_id in live_turns else "store"
        info = summarize(turn_id, session_id, status, by_turn.get(turn_id, []), source)
        if record is not None:
            info = with_record(info, record)
        calls = [
            PendingCall(
                call_id=a.call_id,
                tool=a.tool,
                arguments=a.arguments,
                requested_at=a.requested_at,
                expires_at=a.expires_at,
            )
            for a in waiting
            if a.turn_id == turn_id
        ]
        out.append(info.model_copy(update={"pending_approvals": calls}) if calls else info)

    def submitted(info: TurnInfo) -> tuple[float, str]:
        record = records.get(info.turn_id)
        at = info.submitted_at or info.started_at or (record.created_at if record else None)
        return (at if at is not None else time.time(), info.turn_id)

    return sorted(out, key=submitted)


async def session_detail(producer: Producer, session_id: str) -> SessionDetail | None:
    """The session's summary, or None when the state store does not have it."""
    validate_session_id(session_id)
    store = await producer.state_store()
    record = await store.get_session(session_id)
    if record is None:
        return None
    branches = await store.list_branches(session_id)
    turns = await session_turns(producer, session_id)
    usage: dict[str, int] = defaultdict(int)
    for turn in turns:
        for name, value in turn.usage.items():
            usage[name] += value
    return SessionDetail(
        session_id=session_id,
        agent=record.agent,
        active_branch=record.active_branch,
        created_at=record.created_at,
        updated_at=record.updated_at,
        metadata=record.metadata,
        message_count=next((b.length for b in branches if b.active), 0),
        branches=len(branches),
        turns=len(turns),
        queued=await producer.redis.llen(producer.keys.pending(session_id)),
        running_turn=await _running_turn(producer, session_id),
        last_turn=turns[-1] if turns else None,
        usage=dict(usage),
    )


async def delete_session(
    producer: Producer, session_id: str, *, force: bool = False, timeout: float | None = None
) -> SessionDeleted:
    """Delete a session: its state, its Redis keys (queue, statuses, events), its
    queued turns (cancelled first, so each ends with a final), its scheduled turns and
    its workspace.

    A turn running or waiting for a decision refuses it (SessionBusyError) unless
    ``force``: the turn is then cancelled through ``Producer.cancel`` and the delete
    waits, up to ``timeout`` seconds, for its worker to let the session go (a lost
    worker's lease must expire first; the default allows for that).
    SessionNotFoundError when nothing of the session exists.
    """
    validate_session_id(session_id)
    settings = producer.settings
    store = await producer.state_store()
    workspace = Path(settings.workspace_root) / workspace_dir_name(session_id)
    keys = producer.keys
    if (
        await store.get_session(session_id) is None
        and not await producer.redis.exists(
            keys.meta(session_id), keys.events(session_id), keys.pending(session_id)
        )
        and not workspace.exists()
    ):
        raise SessionNotFoundError(f"no session {session_id!r}", session_id=session_id)
    if timeout is None:
        timeout = 2 * settings.lease_ttl_seconds + settings.reaper_interval_seconds + 10
    deadline = time.monotonic() + timeout
    script = producer.redis.register_script(_DELETE)
    cancelled: list[str] = []
    while True:
        # A lease without a running turn is a drain between turns: it claims a turn
        # (cancelled below) or lets the session go, so the loop waits for it.
        running = await _running_turn(producer, session_id)
        if running is not None and not force:
            raise SessionBusyError(
                f"session {session_id!r} has a turn running ({running}): delete it with "
                "force to cancel the turn first",
                session_id=session_id,
                turn_id=running,
            )
        # The queued turns first: a worker let go by the running turn would run them.
        for turn_id in await _queued_turns(producer, session_id):
            await producer.cancel(turn_id)
            if turn_id not in cancelled:
                cancelled.append(turn_id)
        if running is not None and running not in cancelled:
            await producer.cancel(running)
            cancelled.append(running)
        reply = await script(
            keys=[
                keys.running(session_id),
                keys.lease(session_id),
                keys.pending(session_id),
                keys.events(session_id),
                keys.meta(session_id),
                keys.turns(session_id),
                keys.steps(session_id),
                keys.approvals(session_id),
                keys.lease_deadlines(session_id),
                keys.approvals_index(session_id),
            ],
            args=[session_id],
        )
        if text(reply[0]) == "ok":
            break
        if time.monotonic() > deadline:
            raise SessionBusyError(
                f"session {session_id!r}: its turn did not stop within {timeout:g} s; "
                "nothing was deleted",
                session_id=session_id,
            )
        await asyncio.sleep(0.05)
    redis_keys = int(reply[1])
    for turn_id in (text(t) for t in reply[2:]):
        # One at a time: on a cluster each index key has its own slot.
        redis_keys += await producer.redis.delete(keys.turn_index(turn_id))
    scheduled = schedules_for(store)
    unscheduled = [
        s.schedule_id
        for s in await scheduled.find(session_id)
        if await scheduled.delete(s.schedule_id)
    ]
    state_deleted = await store.delete_session(session_id)
    removed = await asyncio.to_thread(_remove_tree, workspace)
    return SessionDeleted(
        session_id=session_id,
        state_deleted=state_deleted,
        redis_keys=redis_keys,
        cancelled=cancelled,
        workspace_deleted=removed,
        schedules_deleted=unscheduled,
    )


async def _running_turn(producer: Producer, session_id: str) -> str | None:
    """The turn in the session's running slot (``<attempt>|<lost>|<turn_id>|...``)."""
    slot = await producer.redis.get(producer.keys.running(session_id))
    if slot is None:
        return None
    parts = text(slot).split("|", 3)
    return parts[2] or None if len(parts) == 4 else None


async def _queued_turns(producer: Producer, session_id: str) -> list[str]:
    """The ids of the turns in the session's queue (TurnRequest JSON each)."""
    out = []
    for raw in await producer.redis.lrange(producer.keys.pending(session_id), 0, -1):
        try:
            turn_id = json.loads(raw).get("turn_id")
        except (ValueError, AttributeError):
            continue  # not a turn a worker could run either: the delete drops it
        if isinstance(turn_id, str) and turn_id:
            out.append(turn_id)
    return out


def _remove_tree(path: Path) -> bool:
    """Remove a workspace directory (never following a link); whether there was one."""
    if path.is_symlink():
        path.unlink()
        return True
    if not path.is_dir():
        return False
    shutil.rmtree(path)
    return True
