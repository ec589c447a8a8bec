"""``reactq beat``: Celery beat, firing the scheduled turns kept in the state database.

``ScheduleScheduler`` is a ``celery.beat.Scheduler`` whose entries are the stored
schedules (not ``beat_schedule``): it reads them every
``REACTQ_SCHEDULE_REFRESH_SECONDS`` and lets beat's own heap decide when each is due
(a cron expression through Celery's ``crontab``, an interval through its
``schedule``). A due entry is fired by ``producer.schedules.fire`` on a ``Producer``:
the tick is claimed in Redis (``SET NX`` with a TTL), then its turn is submitted like
any other, so two beat processes submit each tick once. An entry's ``last_run_at`` is
the tick it fired for, read back from the store at each refresh: a beat that was down
finds every tick it missed collapsed into one due firing, the latest.

``reactq beat`` runs it; so does
``celery -A reactq.producer.beat beat -S reactq.producer.beat:ScheduleScheduler``.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from celery import Celery
from celery.beat import ScheduleEntry, Scheduler

from reactq.producer.client import Producer
from reactq.producer.schedules import fire, schedule_store
from reactq.producer.sync import _Loop
from reactq.shared.errors import ConfigError
from reactq.shared.protocol.dispatch import celery_app
from reactq.shared.schedules import Schedule, celery_schedule, latest_tick
from reactq.shared.services import redact_url
from reactq.shared.settings import Settings

__all__ = ["ScheduleScheduler", "beat_app", "run_beat"]

log = logging.getLogger("reactq.beat")

FIRE_TASK = "reactq.schedule"
"""The name beat's entries carry; never sent: a firing is a ``Producer.submit``."""

# Long past the refresh interval: another beat learns from the store that a tick
# fired well before its claim expires.
MIN_CLAIM_TTL_SECONDS = 3600


def _at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class ScheduleScheduler(Scheduler):
    """Celery beat's scheduler over the stored schedules (module docstring)."""

    heartbeat_file: Path | None = None
    """Touched at each refresh that read the schedules: a container's liveness probe."""

    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        self.settings = Settings.from_env()
        self.claim_ttl = int(
            max(MIN_CLAIM_TTL_SECONDS, 10 * self.settings.schedule_refresh_seconds)
        )
        self._entries: dict[str, ScheduleEntry] = {}
        self._stored: dict[str, Schedule] = {}
        self._ticks: dict[str, float] = {}
        self._refreshed_at: float | None = None
        self._loop: _Loop | None = None
        self._producer: Producer | None = None
        if kwargs.get("max_interval") is None:
            # beat sleeps at most this long: a refresh is never later than that.
            kwargs["max_interval"] = self.settings.schedule_refresh_seconds
        super().__init__(app, *args, **kwargs)

    def setup_schedule(self) -> None:
        """Start the producer (on a loop thread of its own) and read the schedules."""
        self._loop = _Loop()

        async def make() -> Producer:
            return Producer(self.settings)

        self._producer = self._loop.run(make())
        self._refresh()

    @property
    def schedule(self) -> dict[str, ScheduleEntry]:
        """The active schedules as beat entries, read again once the refresh is due."""
        if self._loop is not None and (
            self._refreshed_at is None
            or time.monotonic() - self._refreshed_at >= self.settings.schedule_refresh_seconds
        ):
            try:
                self._refresh()
            except Exception:
                # The database may be back at the next refresh; fire what is known meanwhile.
                log.exception("beat: could not read the schedules")
                self._refreshed_at = time.monotonic()
        return self._entries

    def _refresh(self) -> None:
        assert self._loop is not None and self._producer is not None
        producer = self._producer

        async def read() -> list[Schedule]:
            return await (await schedule_store(producer)).find()

        stored = {s.schedule_id: s for s in self._loop.run(read(), 60) if not s.paused}
        entries: dict[str, ScheduleEntry] = {}
        for schedule_id, schedule in stored.items():
            last = _at(schedule.last_run_at or schedule.created_at)
            entry = self._entries.get(schedule_id)
            known = self._stored.get(schedule_id)
            if entry is not None and known is not None and known.spec == schedule.spec:
                # Kept (beat's heap holds it): another beat may have fired a tick since.
                if entry.last_run_at is None or entry.last_run_at < last:
                    entry.last_run_at = last
                entries[schedule_id] = entry
                continue
            entries[schedule_id] = self.Entry(
                name=schedule_id,
                task=FIRE_TASK,
                schedule=celery_schedule(schedule),
                args=(schedule_id,),
                last_run_at=last,
                app=self.app,
            )
        self._entries, self._stored = entries, stored
        self._refreshed_at = time.monotonic()
        if self.heartbeat_file is not None:
            self.heartbeat_file.touch()

    def reserve(self, entry: ScheduleEntry) -> ScheduleEntry:
        """The entry after its firing: its ``last_run_at`` is the tick it fires for."""
        stored = self._stored.get(entry.name)
        now = time.time()
        tick = None if stored is None else latest_tick(stored, now)
        if tick is None or (entry.last_run_at is not None and _at(tick) <= entry.last_run_at):
            # Nothing new to fire (a clock that moved back): wait from now.
            self._ticks.pop(entry.name, None)
            after = entry._next_instance(last_run_at=_at(now))
        else:
            self._ticks[entry.name] = tick
            after = entry._next_instance(last_run_at=_at(tick))
        self._entries[entry.name] = after
        return after

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> None:
        """Fire the tick ``reserve`` chose: claim it, then submit its turn."""
        tick = self._ticks.pop(entry.name, None)
        if tick is None or self._loop is None or self._producer is None:
            return
        try:
            self._loop.run(fire(self._producer, entry.name, tick, self.claim_ttl), 120)
        except Exception:
            log.exception("beat: schedule %s: tick %d could not be fired", entry.name, tick)

    @property
    def info(self) -> str:
        """What beat's banner shows about the scheduler."""
        return f"schedules from {redact_url(self.settings.database_url)}"

    def close(self) -> None:
        """Release the producer and its loop."""
        super().close()
        if self._loop is not None and self._producer is not None:
            self._loop.run(self._producer.close(), 30)
            self._loop.stop()
            self._loop = self._producer = None


def beat_app(settings: Settings) -> Celery:
    """The Celery app beat runs on: the pool's, sleeping at most one refresh."""
    app = celery_app(settings)
    app.conf.beat_max_loop_interval = settings.schedule_refresh_seconds
    app.conf.beat_scheduler = f"{__name__}:ScheduleScheduler"
    return app


def run_beat(settings: Settings, loglevel: str = "INFO", heartbeat_file: Path | None = None) -> int:
    """Run beat in this process until stopped (SIGTERM, Ctrl-C); ``heartbeat_file`` is
    touched each time the schedules are read."""
    if settings.database_url.startswith("memory:"):
        raise ConfigError(
            "reactq beat reads the schedules from the state database, and memory:// is "
            "this process's alone: set REACTQ_DATABASE_URL to the producers' database",
            setting="REACTQ_DATABASE_URL",
        )
    app = beat_app(settings)
    # Beat makes the scheduler itself, from a class: the file rides on a subclass.
    scheduler = type("ScheduleScheduler", (ScheduleScheduler,), {"heartbeat_file": heartbeat_file})
    app.Beat(scheduler=scheduler, loglevel=loglevel, pidfile=None).run()
    return 0


def __getattr__(name: str) -> Any:
    # ``celery -A reactq.producer.beat beat`` finds the app here, built on demand so
    # importing this module reads no environment.
    if name == "app":
        return beat_app(Settings.from_env())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
