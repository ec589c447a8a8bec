"""What the fault suite (tests/test_fault_suite.py) checks of every turn once a run has
settled, counted: one final a turn and its status, the messages stored once, the audit
rows, each session's order, nothing left running. ``Tally`` holds the counts, prints
them on one line and lists each check that failed with a few of the turns it names."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from reactq.producer import Producer, TurnHandle
from reactq.shared.events import FinalEvent
from reactq.shared.redis_client import text
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.config import (
    DEFAULT_ERROR_FALLBACK_MESSAGE,
    DEFAULT_ERROR_PERMANENT_MESSAGE,
)

__all__ = ["Tally", "open_work", "tally"]

SAMPLE = 5
"""How many of the turns (or sessions) a failed check names."""


@dataclass
class Tally:
    """The counts of one run, and the turns or sessions behind each failed check."""

    scenario: str
    turns: int = 0
    finals: int = 0
    completed: int = 0
    errors: int = 0
    missing_finals: int = 0
    doubled_finals: int = 0
    stored_twice: int = 0
    user_missing: int = 0
    apologies: int = 0
    missing_queued_rows: int = 0
    missing_final_rows: int = 0
    sessions_out_of_order: int = 0
    left_running: int = 0
    leases_held: int = 0
    left_pending: int = 0
    statuses_open: int = 0
    records_missing: int = 0
    faults: int = 0
    open_at_faults: list[int] = field(default_factory=list)
    settled: bool = True
    elapsed: float = 0.0
    examples: dict[str, list[str]] = field(default_factory=dict)

    def note(self, check: str, what: str) -> None:
        """Remember one turn (or session) a check failed on; the first few are kept."""
        found = self.examples.setdefault(check, [])
        if len(found) < SAMPLE:
            found.append(what)

    def line(self) -> str:
        """The counts on one line, as the suite prints them."""
        return (
            f"fault suite [{self.scenario}]: turns={self.turns} finals={self.finals} "
            f"completed={self.completed} errors={self.errors} "
            f"missing_finals={self.missing_finals} doubled_finals={self.doubled_finals} "
            f"user_msgs_stored_twice={self.stored_twice} user_msgs_missing={self.user_missing} "
            f"apologies_stored={self.apologies} "
            f"missing_audit_rows(queued={self.missing_queued_rows}, "
            f"final={self.missing_final_rows}) "
            f"sessions_out_of_order={self.sessions_out_of_order} "
            f"left(running={self.left_running}, leases={self.leases_held}, "
            f"pending={self.left_pending}, open_statuses={self.statuses_open}, "
            f"records_missing={self.records_missing}) "
            f"faults={self.faults} open_turns_at_each={self.open_at_faults} "
            f"settled={self.settled} elapsed={self.elapsed:.1f}s"
        )

    def failures(self) -> list[str]:
        """One line per check that failed, with the count and a few examples."""
        checks = {
            "every turn settled (a final each, nothing running) before the deadline": (
                0 if self.settled else 1
            ),
            "turns without a final": self.missing_finals,
            "turns with more than one final": self.doubled_finals,
            "turns whose final is not completed": self.turns - self.completed,
            "user messages stored more than once": self.stored_twice,
            "user messages not stored": self.user_missing,
            "assistant messages holding the error fallback text": self.apologies,
            "turns without a queued audit row": self.missing_queued_rows,
            "turns without a final audit row": self.missing_final_rows,
            "sessions whose finals are out of submission order": self.sessions_out_of_order,
            "sessions with a turn left in the running slot": self.left_running,
            "sessions with a lease held": self.leases_held,
            "sessions with turns left pending": self.left_pending,
            "turns whose status is not final": self.statuses_open,
            "completed turns without a committed record": self.records_missing,
        }
        return [
            f"{name}: {count} {self.examples.get(name, [])}"
            for name, count in checks.items()
            if count
        ]


async def open_work(producer: Producer, handles: list[TurnHandle]) -> list[str]:
    """What keeps a run from being settled: turns with no final in their stream and
    sessions with a turn running, a lease held or turns pending (empty once settled)."""
    keys, redis = producer.keys, producer.redis
    left: list[str] = []
    for sid, mine in _by_session(handles).items():
        events = await producer.bus.read(sid, after="0")
        ended = {e.turn_id for e in events if isinstance(e, FinalEvent)}
        left += [f"no final: {t}" for t in mine if t not in ended]
        if await redis.exists(keys.running(sid), keys.lease(sid)):
            left.append(f"running or leased: {sid}")
        if await redis.llen(keys.pending(sid)):
            left.append(f"pending: {sid}")
    return left


async def tally(
    scenario: str, producer: Producer, handles: list[TurnHandle], texts: dict[str, str]
) -> Tally:
    """Count every check over the turns of ``handles`` (``texts``: turn id -> the
    message submitted), reading the streams, Redis's queue keys, the state store and
    the audit log in PostgreSQL."""
    t = Tally(scenario, turns=len(handles))
    keys, redis = producer.keys, producer.redis
    audit = await producer.audit_log()
    assert audit is not None, "the audit log lives in the SQL state store"
    store = await producer.state_store()
    for sid, mine in _by_session(handles).items():
        events = await producer.bus.read(sid, after="0")
        finals = [e for e in events if isinstance(e, FinalEvent) and e.turn_id in mine]
        t.finals += len(finals)
        per_turn = Counter(e.turn_id for e in finals)
        for turn_id in mine:
            _count_finals(t, turn_id, [e for e in finals if e.turn_id == turn_id])
        seen = list(dict.fromkeys(e.turn_id for e in finals))
        if seen != [x for x in mine if x in per_turn]:
            t.sessions_out_of_order += 1
            t.note("sessions whose finals are out of submission order", sid)

        _count_history(t, sid, [texts[x] for x in mine], await producer.history(sid))

        rows = await audit.session_events(sid, types={"queued", "final"})
        for kind, attr in (("queued", "missing_queued_rows"), ("final", "missing_final_rows")):
            have = {e.turn_id for e in rows if e.type == kind}
            for turn_id in mine:
                if turn_id not in have:
                    setattr(t, attr, getattr(t, attr) + 1)
                    t.note(f"turns without a {kind} audit row", turn_id)

        if await redis.exists(keys.running(sid)):
            t.left_running += 1
            t.note("sessions with a turn left in the running slot", sid)
        if await redis.exists(keys.lease(sid)):
            t.leases_held += 1
            t.note("sessions with a lease held", sid)
        if await redis.llen(keys.pending(sid)):
            t.left_pending += 1
            t.note("sessions with turns left pending", sid)
        raw_statuses = await redis.hgetall(keys.turns(sid))
        statuses = {text(k): text(v) for k, v in raw_statuses.items()}
        for turn_id in mine:
            raw = statuses.get(turn_id)
            if raw is None or not TurnStatus(raw).is_final:
                t.statuses_open += 1
                t.note("turns whose status is not final", f"{turn_id}={raw!r}")
            if per_turn[turn_id] and (await store.get_turn(turn_id)) is None:
                completed = all(e.status == "completed" for e in finals if e.turn_id == turn_id)
                if completed:
                    t.records_missing += 1
                    t.note("completed turns without a committed record", turn_id)
    return t


def _count_finals(t: Tally, turn_id: str, finals: list[FinalEvent]) -> None:
    count = len(finals)
    if count == 0:
        t.missing_finals += 1
        t.note("turns without a final", turn_id)
        return
    if count > 1:
        t.doubled_finals += 1
        t.note("turns with more than one final", f"{turn_id}: {_finals_of(finals)}")
    if all(f.status == "completed" for f in finals):
        t.completed += 1
    else:
        t.note("turns whose final is not completed", f"{turn_id}: {_reasons(finals)}")
    if any(f.status == "error" for f in finals):
        t.errors += 1


def _finals_of(finals: list[FinalEvent]) -> list[str]:
    """Each final as status/attempt/code@stream id: which holders published them."""
    return [f"{f.status}/{f.attempt}/{f.code}@{f.id}" for f in finals]


def _reasons(finals: list[FinalEvent]) -> list[tuple[str, str | None]]:
    return [(str(f.status), f.code) for f in finals]


def _count_history(t: Tally, sid: str, sent: list[str], history: list[Any]) -> None:
    """The session's user messages must be exactly ``sent``, in order, each once."""
    stored = [m.content for m in history if m.role == "user"]
    counts = Counter(stored)
    for message in sent:
        if counts[message] == 0:
            t.user_missing += 1
            t.note("user messages not stored", message)
        elif counts[message] > 1:
            t.stored_twice += 1
            t.note("user messages stored more than once", f"{message} x{counts[message]}")
    if stored != sent and not t.user_missing and not t.stored_twice:
        t.sessions_out_of_order += 1
        t.note("sessions whose finals are out of submission order", f"{sid} (history)")
    for stored_message in history:
        content = stored_message.content or ""
        if stored_message.role == "assistant" and any(
            apology in content
            for apology in (DEFAULT_ERROR_FALLBACK_MESSAGE, DEFAULT_ERROR_PERMANENT_MESSAGE)
        ):
            t.apologies += 1
            t.note("assistant messages holding the error fallback text", sid)


def _by_session(handles: list[TurnHandle]) -> dict[str, list[str]]:
    """Each session's turn ids in submission order."""
    found: dict[str, list[str]] = {}
    for h in handles:
        found.setdefault(h.session_id, []).append(h.turn_id)
    return found
