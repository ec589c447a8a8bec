"""Scheduled turns: what a schedule is, and when it fires.

A schedule submits one turn (its message, to its agent, in its session) at each of
its ticks: a five-field cron expression (minute, hour, day of month, month, day of
week; evaluated in UTC, parsed by Celery's ``crontab``, whose rules it follows: a day
must match both the day of month and the day of week when both are restricted), or a
fixed interval of ``every`` seconds counted from the schedule's creation.

A tick is a point in time both beat processes compute alike from the schedule alone
(``latest_tick``): that is what makes "(schedule, tick)" a claim two beats can race
for, and what makes ticks missed during downtime collapse into the latest one.
"""

from __future__ import annotations

import itertools
import secrets
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from reactq.shared.errors import InvalidScheduleError, ScheduleTooFrequentError
from reactq.shared.tenancy import TenantIdentity

if TYPE_CHECKING:
    from celery.schedules import crontab
    from celery.schedules import schedule as interval

__all__ = [
    "MAX_EVERY",
    "SCHEDULE_ID_PATTERN",
    "Schedule",
    "celery_schedule",
    "check_timing",
    "cron_min_gap",
    "latest_tick",
    "new_schedule_id",
    "next_tick",
    "parse_cron",
]

SCHEDULE_ID_PATTERN = r"^sch_[a-f0-9]{16}$"
"""A schedule id: ``sch_`` then 16 hex digits."""

MAX_EVERY = 2**31 - 1
"""The longest interval (seconds, about 68 years): the SQL column is a 32-bit INTEGER."""

# How far a cron search looks for a matching day (a Feb 29 that is also a Monday
# comes every 28 years).
_SEARCH_DAYS = 366 * 30


class Schedule(BaseModel):
    """A scheduled turn as the store keeps it."""

    model_config = ConfigDict(frozen=True)

    schedule_id: str
    """Its id (``sch_`` and 16 hex digits)."""
    session_id: str
    """The session its turns run in."""
    agent: str
    """The agent that runs them."""
    message: str
    """The user message each turn carries."""
    cron: str | None = None
    """A five-field cron expression (UTC); None for an interval schedule."""
    every: int | None = None
    """Seconds between ticks, counted from ``created_at``; None for a cron schedule."""
    paused: bool = False
    """A paused schedule fires nothing until resumed."""
    created_at: float = 0.0
    """Unix time it was added."""
    last_run_at: float | None = None
    """The tick (Unix time) it last fired for, or when it was resumed (no tick before it
    fires); None before either."""
    last_turn_id: str | None = None
    """The turn its last firing submitted."""
    last_error: str | None = None
    """Why its last firing submitted nothing (``[code] message``); None when it did."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Kept on each turn it submits, beside ``schedule_id`` and ``scheduled_for``."""
    tenant: TenantIdentity | None = None
    """The identity of the API key that added it (None: none, or a trusted producer's
    that named none): every turn it submits carries it (``TurnRequest.tenant``)."""
    fresh_sessions: bool = False
    """Each tick's turn runs in a new session, ``{session_id}-{tick}`` (``session_id``
    is then their common prefix, a tenant's under its own); False: every tick's in
    ``session_id``."""

    def session_for(self, tick: float) -> str:
        """The session the turn of ``tick`` (Unix time) runs in."""
        return f"{self.session_id}-{int(tick)}" if self.fresh_sessions else self.session_id

    @property
    def spec(self) -> str:
        """Its timing as written: the cron expression, or ``every N s``."""
        return self.cron if self.cron is not None else f"every {self.every} s"


def new_schedule_id() -> str:
    """A fresh schedule id."""
    return f"sch_{secrets.token_hex(8)}"


def parse_cron(expression: str) -> crontab:
    """``expression`` (five fields) as Celery's crontab; InvalidScheduleError naming the
    fault when it is not one, or when it never fires."""
    if not isinstance(expression, str):
        raise InvalidScheduleError(f"a cron expression is text, not {expression!r:.60}")
    fields = expression.split()
    if len(fields) != 5:
        raise InvalidScheduleError(
            f"cron expression {expression[:80]!r} has {len(fields)} fields: give five, "
            "'MINUTE HOUR DAY_OF_MONTH MONTH DAY_OF_WEEK' (UTC), such as '0 9 * * 1-5'",
            cron=expression[:200],
        )
    minute, hour, day_of_month, month, day_of_week = fields
    # Celery's schedules module imports Celery itself: only a cron that is read pays for it.
    from celery.schedules import crontab

    try:
        spec = crontab(
            minute=minute,
            hour=hour,
            day_of_month=day_of_month,
            month_of_year=month,
            day_of_week=day_of_week,
        )
    except (ValueError, IndexError, KeyError) as exc:
        raise InvalidScheduleError(
            f"cron expression {expression[:80]!r} is not valid: {exc}", cron=expression[:200]
        ) from None
    if _cron_tick(spec, datetime.now(UTC), backward=False) is None:
        raise InvalidScheduleError(
            f"cron expression {expression[:80]!r} never fires", cron=expression[:200]
        )
    return spec


def check_timing(cron: str | None, every: int | None, min_interval: int = 1) -> None:
    """Refuse anything but exactly one of a valid cron expression or an interval of
    whole seconds from 1 to ``MAX_EVERY`` (InvalidScheduleError), and ticks closer
    together than ``min_interval`` seconds (ScheduleTooFrequentError)."""
    if (cron is None) == (every is None):
        raise InvalidScheduleError("give a schedule either a cron expression or every=SECONDS")
    if cron is not None:
        gap = cron_min_gap(parse_cron(cron))
        if gap < min_interval:
            raise ScheduleTooFrequentError(
                f"cron expression {cron[:80]!r} fires {gap} s apart, under the minimum of "
                f"{min_interval} s (REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS)",
                cron=cron[:200],
                min_interval=min_interval,
            )
    elif isinstance(every, bool) or not isinstance(every, int) or not 1 <= every <= MAX_EVERY:
        raise InvalidScheduleError(
            f"every= wants a whole number of seconds from 1 to {MAX_EVERY}, got {every!r:.60}",
            every=str(every)[:60],
        )
    elif every < min_interval:
        raise ScheduleTooFrequentError(
            f"every={every} is under the minimum interval of {min_interval} s "
            "(REACTQ_SCHEDULE_MIN_INTERVAL_SECONDS)",
            every=str(every),
            min_interval=min_interval,
        )


def cron_min_gap(spec: crontab) -> int:
    """The shortest time between two ticks of ``spec``, in seconds: between two of its
    minutes in a day, or from a day's last to the next matching day's first."""
    minutes = sorted(h * 60 + m for h in spec.hour for m in spec.minute)
    gaps = [b - a for a, b in itertools.pairwise(minutes)]
    days = _min_day_gap(spec)
    if days is not None:
        gaps.append(days * 24 * 60 - minutes[-1] + minutes[0])
    return 60 * min(gaps) if gaps else _SEARCH_DAYS * 86400


def _min_day_gap(spec: crontab) -> int | None:
    """The fewest days between two matching days (1 when two days in a row match),
    None when no two match within the search window."""
    day, previous, best = datetime.now(UTC).date(), None, None
    for offset in range(_SEARCH_DAYS):
        if _day_matches(spec, day):
            if previous is not None:
                best = offset - previous if best is None else min(best, offset - previous)
                if best == 1:
                    break
            previous = offset
        day += timedelta(days=1)
    return best


def celery_schedule(schedule: Schedule) -> crontab | interval:
    """What Celery beat times the schedule with."""
    if schedule.cron is not None:
        return parse_cron(schedule.cron)
    from celery.schedules import schedule as interval

    return interval(timedelta(seconds=schedule.every or 1))


def latest_tick(schedule: Schedule, now: float) -> float | None:
    """The schedule's newest tick at or before ``now`` (Unix time), None if it has none."""
    if schedule.cron is not None:
        at = _cron_tick(parse_cron(schedule.cron), _utc(now), backward=True)
        return None if at is None else at.timestamp()
    every = schedule.every or 1
    if now < schedule.created_at + every:
        return None
    return schedule.created_at + ((now - schedule.created_at) // every) * every


def next_tick(schedule: Schedule, after: float) -> float | None:
    """The schedule's first tick after ``after`` (Unix time), None if it has none."""
    if schedule.cron is not None:
        start = _utc(after).replace(second=0, microsecond=0) + timedelta(minutes=1)
        at = _cron_tick(parse_cron(schedule.cron), start, backward=False)
        return None if at is None else at.timestamp()
    every = schedule.every or 1
    if after < schedule.created_at:
        return schedule.created_at + every
    return schedule.created_at + ((after - schedule.created_at) // every + 1) * every


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _day_matches(spec: crontab, day: date) -> bool:
    # cron numbers Sunday 0; Python's weekday() numbers Monday 0.
    return (
        day.month in spec.month_of_year
        and day.day in spec.day_of_month
        and (day.weekday() + 1) % 7 in spec.day_of_week
    )


def _cron_tick(spec: crontab, at: datetime, *, backward: bool) -> datetime | None:
    """The newest matching minute at or before ``at`` (``backward``), else the first at or
    after it; None when none comes within the search window."""
    times = sorted((h, m) for h in spec.hour for m in spec.minute)
    step = timedelta(days=-1 if backward else 1)
    day = at.date()
    for offset in range(_SEARCH_DAYS):
        if _day_matches(spec, day):
            if offset == 0:
                bound = (at.hour, at.minute)
                if backward:
                    fits = [t for t in times if t <= bound]
                else:
                    first = (at.hour, at.minute) if at.second == at.microsecond == 0 else None
                    fits = [t for t in times if t > bound or t == first]
            else:
                fits = times
            if fits:
                hour, minute = fits[-1] if backward else fits[0]
                return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)
        day += step
    return None
