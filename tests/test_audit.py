"""The audit log: every event of every turn, read back after the run, on every SQL
backend (and the in-memory sink); a sink failure never kills a run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reactq.shared.audit import (
    AuditedBus,
    AuditSink,
    MemoryAuditSink,
    audit_sink_for,
    open_audit_sink,
)
from reactq.shared.bus import TurnEmitter
from reactq.shared.bus_memory import MemoryEventBus
from reactq.shared.errors import ConfigError
from reactq.shared.events import BaseEvent, DeltaEvent, FinalEvent, StartedEvent
from reactq.shared.state import MemoryStateStore, open_store
from reactq.shared.state.sql.audit import SqlAuditSink
from reactq.shared.turns import TurnStatus
from tests.state_fixtures import backend_url, sid


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def audit_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return backend_url(request.param, tmp_path, request)


@pytest.fixture
async def sink(audit_url: str) -> AsyncIterator[AuditSink]:
    opened = await open_audit_sink(audit_url)
    try:
        yield opened
    finally:
        await opened.close()


async def run_turn(bus: AuditedBus, session_id: str, turn_id: str, attempt: int = 1) -> None:
    emitter = TurnEmitter(bus, session_id, turn_id, attempt)
    await emitter.emit(StartedEvent, worker="w1")
    await emitter.emit(DeltaEvent, text="odd \ud800 text")
    await emitter.emit(FinalEvent, text="done", status=TurnStatus.COMPLETED)


async def test_every_event_of_a_turn_is_recorded(sink: AuditSink) -> None:
    assert isinstance(sink, AuditSink)
    memory = MemoryEventBus()
    bus = AuditedBus(memory, sink, close_sink=False)
    s, t = sid(), f"t-{sid()}"
    await run_turn(bus, s, t, attempt=1)
    await run_turn(bus, s, t, attempt=2)
    await run_turn(bus, s, f"{t}-other")
    got = await sink.turn_events(t)
    assert [(e.type, e.attempt, e.seq) for e in got] == [
        (kind, attempt, seq)
        for attempt in (1, 2)
        for seq, kind in enumerate(("started", "delta", "final"), start=1)
    ]
    published = [e for e in await memory.read(s, after="0") if e.turn_id == t]
    assert [e.id for e in got] == [e.id for e in published]  # with their stream ids
    assert got[1].text == "odd \ud800 text"  # type: ignore[union-attr]
    assert got[2].status is TurnStatus.COMPLETED  # type: ignore[union-attr]
    assert await sink.turn_events("t-unknown") == []
    await bus.close()


class BrokenSink(MemoryAuditSink):
    async def record(self, event: BaseEvent) -> None:
        raise RuntimeError("audit database down")


async def test_a_sink_failure_logs_and_never_kills_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = MemoryEventBus()
    bus = AuditedBus(memory, BrokenSink())
    s = sid()
    with caplog.at_level(logging.ERROR, logger="reactq.audit"):
        await run_turn(bus, s, "t1")
    assert [e.type for e in await bus.read(s)] == ["started", "delta", "final"]
    assert "could not record" in caplog.text
    strict = AuditedBus(MemoryEventBus(), BrokenSink(), strict=True)
    with pytest.raises(RuntimeError, match="audit database down"):
        await run_turn(strict, s, "t2")
    await bus.close()
    await strict.close()


async def test_sink_for_a_store(tmp_path: Path) -> None:
    assert audit_sink_for(MemoryStateStore()) is None
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path}/s.db")
    try:
        sink = audit_sink_for(store)
        assert isinstance(sink, SqlAuditSink) and sink.store is store
        await sink.close()  # does not close the store it shares
        await store.ensure_session("s", "a")
    finally:
        await store.close()
    with pytest.raises(ConfigError, match="SQL database"):
        await open_audit_sink("redis://localhost:6379/0")


async def test_a_lingering_sink_writes_a_turn_with_its_final(tmp_path: Path) -> None:
    """A worker's sink (``linger``) keeps a turn's rows until its final, then writes
    them in one go; rows with no final behind them wait at most ``linger``."""
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    writes: list[int] = []
    sink = SqlAuditSink(store, linger=30.0)
    insert = sink._insert

    async def counted(rows: list[dict[str, object]]) -> None:
        writes.append(len(rows))
        await insert(rows)

    sink._insert = counted  # type: ignore[method-assign]
    try:
        emitter = TurnEmitter(AuditedBus(MemoryEventBus(), sink), sid(), "t_linger", 1)
        await emitter.emit(StartedEvent, worker="w")
        await emitter.emit(DeltaEvent, text="hi")
        await asyncio.sleep(0.05)
        assert writes == []  # waiting for more rows, well within linger
        await emitter.emit(FinalEvent, status=TurnStatus.COMPLETED, text="hi")
        await sink.flush()
        assert writes == [3]  # the final wrote the turn's rows in one go
        assert [e.type for e in await sink.turn_events("t_linger")] == ["started", "delta", "final"]
        quick = SqlAuditSink(store, linger=0.05)
        await AuditedBus(MemoryEventBus(), quick).publish(
            StartedEvent(session_id=sid(), turn_id="t_parked", attempt=1, seq=1, worker="w")
        )
        reader = SqlAuditSink(store)  # reads without flushing the other sink's rows
        assert await reader.turn_events("t_parked") == []
        for _ in range(100):  # no final comes: written once the linger is over
            if await reader.turn_events("t_parked"):
                break
            await asyncio.sleep(0.02)
        assert [e.type for e in await reader.turn_events("t_parked")] == ["started"]
    finally:
        await sink.close()
        await store.close()
