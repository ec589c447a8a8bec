"""The file tools on real `reactq worker` processes sharing one workspace root.

A session's turn edits files on one worker; that worker stops, and the session's
next turns, on the other worker, see the edits; undo then puts back the original,
newest turn first. A turn that read a file and is resumed on another worker after
someone changed the file has its write refused (the revision it read is kept with
the turn, in the state store). A turn cancelled, rolled back, or cancelled while
parked for approval keeps none of its changes."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from reactq.producer import Producer
from reactq.shared.events import Event, FileChangeEvent, FinalEvent, StartedEvent
from reactq.shared.file_undo import AlreadyUndoneError, NothingToUndoError, UndoConflictError
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from tests.bundle_agents import NOTES, README, files_script
from tests.helpers import WorkerPool, wait_until, worker_pid

pytestmark = pytest.mark.e2e


async def _turn(producer: Producer, session: str, message: str) -> tuple[str, str, list[Event]]:
    """Send a turn; (its final text, the worker that ran it, its events)."""
    handle = await producer.submit(session, message, agent="files")
    events: list[Event] = []
    async for event in handle.events():
        events.append(event)
    final = await handle.result(timeout=30)
    assert final.status == "completed", final
    (started,) = [e for e in events if isinstance(e, StartedEvent)]
    return final.text, started.worker, events


def _env(redis_url: str, namespace: str, tmp_path: Path, server: ScriptedServer) -> dict[str, str]:
    return {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-files{uuid.uuid4().hex[:6]}",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        "REACTQ_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        # A killed worker's turn resumes on the other one within seconds.
        "REACTQ_LEASE_TTL_SECONDS": "1.5",
        "REACTQ_REAPER_INTERVAL_SECONDS": "0.3",
    }


async def test_a_session_edits_on_one_worker_reads_on_another_and_undoes_both(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    server = ScriptedServer(files_script).start_in_thread()
    env = _env(redis_url, namespace, tmp_path, server)
    pool = WorkerPool(env, tmp_path, agents="tests.bundle_agents:agent", concurrency=4)
    session = f"files-{uuid.uuid4().hex[:8]}"
    ws = tmp_path / "workspaces" / session
    ws.mkdir(parents=True)
    (ws / README).write_text("original\n")
    try:
        pool.start(2)
        await asyncio.to_thread(pool.wait_ready, redis_url, env["REACTQ_NAMESPACE"], 2)
        async with Producer(Settings.from_env(env)) as producer:
            text, first, events = await asyncio.wait_for(
                _turn(producer, session, "write notes"), 60
            )
            assert "Edited README.md" in text and "+original, by turn 1" in text
            assert (ws / NOTES).read_text() == "hello from turn 1, edited\n"
            changes = [e for e in events if isinstance(e, FileChangeEvent)]
            assert [(e.kind, e.path) for e in changes] == [
                ("created", NOTES),
                ("modified", NOTES),
                ("modified", README),
            ]
            assert "+hello from turn 1, edited" in changes[1].diff
            turn_1 = changes[0].turn_id

            # The worker that ran turn 1 leaves; the next turns can only run on the other.
            (gone,) = [p for p in pool.procs if p.pid == worker_pid(first)]
            gone.terminate()
            await asyncio.to_thread(gone.wait, 30)

            text, second, _ = await asyncio.wait_for(_turn(producer, session, "read notes"), 60)
            assert second != first
            read, found = text.split(" | ")
            assert read == "     1\thello from turn 1, edited"
            assert found.startswith(f"{NOTES}:1: hello from turn 1, edited")

            text, _, events = await asyncio.wait_for(_turn(producer, session, "review notes"), 60)
            assert "+hello from turn 1, edited, reviewed" in text
            turn_3 = events[0].turn_id

            # Turn 3 changed a file after turn 1: undoing turn 1 first reverts nothing.
            with pytest.raises(UndoConflictError, match=f"{NOTES} has changed since turn"):
                await producer.undo(turn_1)
            assert (ws / README).read_text() == "original, by turn 1\n"
            with pytest.raises(NothingToUndoError):
                await producer.undo("t_nosuchturn")

            report = await producer.undo(turn_3)
            assert [(f.path, f.now) for f in report.files] == [(NOTES, "restored")]
            assert (ws / NOTES).read_text() == "hello from turn 1, edited\n"
            report = await producer.undo(turn_1)
            assert [(f.path, f.did, f.now) for f in report.files] == [
                (README, "modified", "restored"),
                (NOTES, "created", "removed"),
            ]
            assert (ws / README).read_text() == "original\n" and not (ws / NOTES).exists()
            with pytest.raises(AlreadyUndoneError):
                await producer.undo(turn_1)
    finally:
        pool.stop()
        server.stop()


GUARDED = "guarded.txt"
KEPT = "kept.txt"


def _guard_script(hold: dict[str, float]) -> Any:
    """Turn "guard": read GUARDED; then (after ``hold["read"]`` seconds, while the test
    changes the file and kills the worker) edit it; answer with the edit's result.
    Turn "slow": edit KEPT and create scratch.txt; then answer after ``hold["slow"]``
    (``hold["slow_asked"]`` counts those answers: a delay is read when the model is asked)."""

    def script(request: Mapping[str, Any]) -> Reply:
        messages = list(request["messages"])
        start = max(i for i, m in enumerate(messages) if m["role"] == "user")
        asked = str(messages[start]["content"])
        results = [str(m["content"]) for m in messages[start:] if m["role"] == "tool"]
        if asked == "gated":
            if not results:
                return Reply.tool_calls([("write_file", {"path": "parked.txt", "content": "p\n"})])
            patch = "*** Begin Patch\n*** Delete File: parked.txt\n*** End Patch"
            return Reply.tool_calls([("apply_patch", {"patch": patch})])
        if asked == "guard":
            if not results:
                return Reply.tool_calls([("read_file", {"path": GUARDED})])
            if len(results) == 1:
                edit = {"path": GUARDED, "old_text": "v1 line", "new_text": "turn's line"}
                return Reply.tool_calls([("edit_file", edit)]).but(delay=hold["read"])
            return Reply.text(results[-1])
        if not results:
            return Reply.tool_calls(
                [
                    ("edit_file", {"path": KEPT, "old_text": "kept", "new_text": "changed"}),
                    ("write_file", {"path": "scratch.txt", "content": "scratch\n"}),
                ]
            )
        hold["slow_asked"] += 1
        return Reply.text("slow done").but(delay=hold["slow"])

    return script


async def test_the_stale_guard_holds_across_workers_and_a_cancel_reverts_files(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    hold = {"read": 30.0, "slow": 20.0, "slow_asked": 0}
    server = ScriptedServer(_guard_script(hold)).start_in_thread()
    env = _env(redis_url, namespace, tmp_path, server)
    pool = WorkerPool(env, tmp_path, agents="tests.bundle_agents:agents", concurrency=4)
    session = f"guard-{uuid.uuid4().hex[:8]}"
    ws = tmp_path / "workspaces" / session
    ws.mkdir(parents=True)
    (ws / GUARDED).write_text("v1 line\n")
    (ws / KEPT).write_text("kept\n")
    try:
        pool.start(2)
        await asyncio.to_thread(pool.wait_ready, redis_url, env["REACTQ_NAMESPACE"], 2)
        async with Producer(Settings.from_env(env)) as producer:
            handle = await producer.submit(session, "guard", agent="files")

            async def read_done() -> list[Event]:
                events = await producer.bus.read(session, after="0")
                return [
                    e for e in events if e.turn_id == handle.turn_id and e.type == "observation"
                ]

            await wait_until(read_done, 30, "the read")
            # Someone else changes the file; the worker holding the turn dies before its
            # edit, and the turn resumes on the other worker, which never saw the read.
            (ws / GUARDED).write_text("v1 line\nanother party's line\n")
            events = await producer.bus.read(session, after="0")
            (started,) = [e for e in events if isinstance(e, StartedEvent)]
            hold["read"] = 0.0
            os.kill(worker_pid(started.worker), signal.SIGKILL)
            final = await handle.result(timeout=40)
            assert final.status == "completed", final
            assert final.text.startswith("[stale_file]") and "re-read it" in final.text
            assert GUARDED in final.text
            assert (ws / GUARDED).read_text() == "v1 line\nanother party's line\n"
            events = [
                e for e in await producer.bus.read(session, after="0") if e.turn_id == final.turn_id
            ]
            assert [e.attempt for e in events if isinstance(e, StartedEvent)] == [1, 2]

            # A turn cancelled after it changed files leaves none of its changes.
            slow = await producer.submit(session, "slow", agent="files")

            async def changed() -> bool:
                events = await producer.bus.read(session, after="0")
                return sum(isinstance(e, FileChangeEvent) for e in events) >= 2

            await wait_until(changed, 30, "the slow turn's changes")
            assert (ws / KEPT).read_text() == "changed\n" and (ws / "scratch.txt").exists()
            assert (await producer.cancel(slow.turn_id)).outcome == "cancelling"
            final = await slow.result(timeout=30)
            assert final.status == "cancelled"
            assert (ws / KEPT).read_text() == "kept\n" and not (ws / "scratch.txt").exists()
            events = [
                e for e in await producer.bus.read(session, after="0") if e.turn_id == slow.turn_id
            ]
            reverts = [(e.kind, e.path) for e in events if isinstance(e, FileChangeEvent)][2:]
            assert sorted(reverts) == [("deleted", "scratch.txt"), ("modified", KEPT)]
            assert isinstance(events[-1], FinalEvent)
            with pytest.raises(AlreadyUndoneError):
                await producer.undo(slow.turn_id)

            # Rolled back by a newer message: the same. The newer turn makes the same
            # changes, which it can only do on the files as they were.
            asked = hold["slow_asked"]
            rolled = await producer.submit(session, "slow", agent="files")

            async def rolled_waits() -> bool:
                # Its changes made and its answer asked for (held for 20 s): releasing
                # the hold sooner would let it complete before the rollback lands.
                events = await producer.bus.read(session, after="0")
                return hold["slow_asked"] > asked and any(
                    isinstance(e, FileChangeEvent) and e.turn_id == rolled.turn_id for e in events
                )

            await wait_until(rolled_waits, 30, "the rolled-back turn's changes")
            hold["slow"] = 0.0
            newer = await producer.submit(session, "slow", agent="files", strategy="rollback")
            assert (await rolled.result(timeout=30)).status == "cancelled"
            assert (await newer.result(timeout=30)).status == "completed"
            events = await producer.bus.read(session, after="0")
            kinds = [e.kind for e in events if isinstance(e, FileChangeEvent)]
            # Made, reverted newest first, made again by the newer turn.
            made, undone = ["modified", "created"], ["deleted", "modified"]
            assert kinds[-6:] == [*made, *undone, *made]
            assert (ws / KEPT).read_text() == "changed\n"

            # Parked for approval, then cancelled: the producer reverts what it did.
            gated = f"gated-{uuid.uuid4().hex[:8]}"
            parked = await producer.submit(gated, "gated", agent="files-gated")

            async def waiting() -> bool:
                events = await producer.bus.read(gated, after="0")
                return any(e.type == "approval_requested" for e in events)

            await wait_until(waiting, 30, "the parked turn")
            made = tmp_path / "workspaces" / gated / "parked.txt"
            assert made.read_text() == "p\n"
            assert (await producer.cancel(parked.turn_id)).outcome == "cancelled"
            assert (await parked.result(timeout=10)).status == "cancelled"
            assert not made.exists()
            # The producer's revert is told as a worker's is: on the stream, before the
            # final, and in the audit log.
            events = [
                e for e in await producer.bus.read(gated, after="0") if e.turn_id == parked.turn_id
            ]
            told = [(e.type, getattr(e, "kind", None), getattr(e, "path", None)) for e in events]
            assert told[-2:] == [("file_change", "deleted", "parked.txt"), ("final", None, None)]
            audited = [e.id for e in await producer.turn_events(parked.turn_id)]
            assert events[-2].id in audited
    finally:
        pool.stop()
        server.stop()
