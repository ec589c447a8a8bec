"""Branches and the audit log through the producer and the ``reactq`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reactq.producer.client import Producer
from reactq.shared.audit import AuditedBus
from reactq.shared.bus import TurnEmitter
from reactq.shared.bus_memory import MemoryEventBus
from reactq.shared.errors import BranchNotFoundError, ConfigError
from reactq.shared.events import FinalEvent, StartedEvent
from reactq.shared.messages import ChatMessage
from reactq.shared.settings import Settings
from reactq.shared.state import TRUNK, open_store
from reactq.shared.state.sql.audit import SqlAuditSink
from reactq.shared.state.sql.schema import SCHEMA_REVISION
from reactq.shared.state.sql.store import SqlStateStore
from reactq.shared.turns import TurnStatus
from tests.state_fixtures import record, sid, user

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path}/state.db"


@pytest.fixture
async def producer(redis_url: str, namespace: str, database_url: str) -> AsyncIterator[Producer]:
    settings = Settings(redis_url=redis_url, namespace=namespace, database_url=database_url)
    async with Producer(settings) as opened:
        yield opened


async def seed(database_url: str, session_id: str) -> None:
    store = await open_store(database_url)
    try:
        await store.ensure_session(session_id, "a")
        for n, text in ((1, "first"), (2, "second")):
            reply = ChatMessage(role="assistant", content=f"re: {text}")
            await store.commit_turn(session_id, [user(text), reply], record(session_id, f"t{n}"))
        assert isinstance(store, SqlStateStore)
        bus = AuditedBus(MemoryEventBus(), SqlAuditSink(store))
        emitter = TurnEmitter(bus, session_id, "t1")
        await emitter.emit(StartedEvent, worker="w1")
        await emitter.emit(FinalEvent, text="re: first", status=TurnStatus.COMPLETED)
        await bus.close()
    finally:
        await store.close()


async def test_producer_branches(producer: Producer, database_url: str) -> None:
    s = sid()
    await seed(database_url, s)
    branch = await producer.fork(s, 2, new_branch="edit")
    assert branch == "edit"
    assert [m.content for m in await producer.history(s)] == ["first", "re: first"]
    assert [m.sequence for m in await producer.history(s, branch=TRUNK)] == [1, 2, 3, 4]
    listed = {b.branch_id: b for b in await producer.branches(s)}
    assert listed["edit"].active and listed["edit"].fork_sequence == 2
    await producer.switch_branch(s, TRUNK)
    assert len(await producer.history(s)) == 4
    with pytest.raises(BranchNotFoundError):
        await producer.switch_branch(s, "nope")
    events = await producer.turn_events("t1")
    assert [e.type for e in events] == ["started", "final"]


async def test_producer_turn_events_needs_sql(redis_url: str, namespace: str) -> None:
    settings = Settings(redis_url=redis_url, namespace=namespace, database_url="memory://")
    async with Producer(settings) as producer:
        with pytest.raises(ConfigError, match="SQL database"):
            await producer.turn_events("t1")


def reactq(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reactq.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_cli_branch_commands(
    redis_url: str, namespace: str, database_url: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": namespace,
        "REACTQ_DATABASE_URL": database_url,
    }
    fresh = {**env, "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/fresh.db"}
    upgraded = reactq(fresh, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"revision {SCHEMA_REVISION}" in upgraded.stdout
    s = sid()
    await seed(database_url, s)
    history = reactq(env, "history", s)
    assert history.returncode == 0, history.stderr
    assert history.stdout.splitlines()[2].split() == ["3", "user:", "second"]
    forked = reactq(env, "fork", s, "2", "--name", "edit")
    assert (forked.returncode, forked.stdout.strip()) == (0, "edit")
    lines = reactq(env, "branches", s).stdout.splitlines()
    assert lines[0].split() == ["trunk", "4", "messages"]
    assert lines[1].split() == ["*", "edit", "2", "messages", "from", "trunk@2"]
    as_json = [json.loads(x) for x in reactq(env, "history", s, "--json").stdout.splitlines()]
    assert [(m["sequence"], m["content"]) for m in as_json] == [(1, "first"), (2, "re: first")]
    on_trunk = reactq(env, "history", s, "--branch", "trunk").stdout
    assert "re: second" in on_trunk
    assert reactq(env, "switch", s, "trunk").returncode == 0
    assert "re: second" in reactq(env, "history", s).stdout
    missing = reactq(env, "switch", s, "nope")
    assert missing.returncode == 2 and "[branch_not_found]" in missing.stderr
    bad = reactq(env, "fork", s, "9")
    assert bad.returncode == 2 and "cannot fork" in bad.stderr
    audit = reactq(env, "audit", "t1")
    assert audit.returncode == 0, audit.stderr
    assert len(audit.stdout.splitlines()) == 2 and "#1.1" in audit.stdout
    audit_json = [json.loads(x) for x in reactq(env, "audit", "t1", "--json").stdout.splitlines()]
    assert [e["type"] for e in audit_json] == ["started", "final"]
    assert reactq(env, "audit", "t-unknown").returncode == 1
