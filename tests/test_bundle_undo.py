"""The file tools' journal: the stale-file guard (kept in the state store, so two
processes' tools share it), the undo records on every backend, undo itself (all or
nothing, once), and the ``file_change`` events."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from reactq.bundles import StaleFileError, file_tools
from reactq.producer.render import render
from reactq.shared.bus import TurnEmitter
from reactq.shared.errors import ToolError
from reactq.shared.events import FileChangeEvent
from reactq.shared.file_undo import (
    AlreadyUndoneError,
    NothingToUndoError,
    UndoConflictError,
    revert_turn,
)
from reactq.shared.state import FileAction, StateStore, TurnRecord, open_store
from reactq.shared.turns import TurnStatus
from reactq.worker.agent.tools import Tool, ToolContext
from tests.gateway_support import start_gateway
from tests.helpers import clean_env, run_cli
from tests.kernel_support import ListBus
from tests.state_fixtures import (  # noqa: F401 - the fixtures register by import
    store_fixture,
    url_fixture,
)


def tools_of(root: Path) -> dict[str, Tool]:
    """One process's file tools (each call of this is a worker of its own)."""
    return {t.name: t for t in file_tools(root)}


def context(store: StateStore | None, turn: str, bus: ListBus | None = None) -> ToolContext:
    emitter = TurnEmitter(bus, "sess-1", turn) if bus is not None else None  # type: ignore[arg-type]
    return ToolContext(session_id="sess-1", turn_id=turn, store=store, emitter=emitter)


async def call(tools: dict[str, Tool], name: str, ctx: ToolContext, **args: Any) -> str:
    result = await tools[name].call(args, ctx)
    assert isinstance(result, str)
    return result


def turn_id() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


async def test_every_backend_keeps_a_turns_file_actions_in_order_and_undoes_once(
    store: StateStore,
) -> None:
    turn = turn_id()
    binary = bytes(range(256))
    await store.record_file_actions(
        [
            FileAction(session_id="s", turn_id=turn, path="a.bin", kind="read", after_hash="h0"),
            FileAction(
                session_id="s",
                turn_id=turn,
                attempt=2,
                path="a.bin",
                kind="modified",
                before=binary,
                after_hash="h1",
            ),
        ]
    )
    await store.record_file_actions(
        [FileAction(session_id="s", turn_id=turn, path="new.txt", kind="created", after_hash="h2")]
    )
    got = await store.file_actions(turn)
    assert [(a.path, a.kind, a.attempt, a.after_hash) for a in got] == [
        ("a.bin", "read", 1, "h0"),
        ("a.bin", "modified", 2, "h1"),
        ("new.txt", "created", 1, "h2"),
    ]
    assert got[1].before == binary and got[2].before is None and got[0].subagent is None
    assert all(a.created_at > 0 and a.undone_at is None for a in got)
    assert await store.file_actions(turn_id()) == []

    assert await store.mark_file_actions_undone(turn, 123.5) is True
    assert await store.mark_file_actions_undone(turn, 124.0) is False
    assert {a.undone_at for a in await store.file_actions(turn)} == {123.5}
    assert await store.mark_file_actions_undone(turn_id(), 1.0) is False


@pytest.fixture
async def shared_store(tmp_path: Path) -> Any:
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path}/state.db")
    try:
        yield store
    finally:
        await store.close()


async def test_a_write_after_someone_else_changed_the_file_is_refused_across_processes(
    tmp_path: Path, shared_store: StateStore
) -> None:
    root = tmp_path / "ws"
    first, second = tools_of(root), tools_of(root)  # two workers: no memory shared
    setup = context(shared_store, turn_id())
    await call(first, "write_file", setup, path="notes.md", content="alpha\nbeta\n")

    turn = context(shared_store, turn_id())
    assert "     1\talpha" in await call(first, "read_file", turn, path="notes.md")
    (root / "sess-1" / "notes.md").write_text("alpha\nBETA by another\n")
    for name, args in [
        ("write_file", {"path": "notes.md", "content": "mine\n"}),
        ("edit_file", {"path": "notes.md", "old_text": "alpha", "new_text": "1"}),
        (
            "apply_patch",
            {"patch": "*** Begin Patch\n*** Delete File: notes.md\n*** End Patch"},
        ),
    ]:
        with pytest.raises(StaleFileError, match=r"notes.md changed since .* re-read it"):
            await call(second, name, turn, **args)
    assert (root / "sess-1" / "notes.md").read_text() == "alpha\nBETA by another\n"

    # Re-read (on the other worker): the write goes through.
    await call(second, "read_file", turn, path="notes.md")
    await call(first, "edit_file", turn, path="notes.md", old_text="alpha", new_text="1")
    # Its own write is what the turn knows now: a second edit needs no new read.
    await call(second, "edit_file", turn, path="notes.md", old_text="1", new_text="uno")
    assert (root / "sess-1" / "notes.md").read_text() == "uno\nBETA by another\n"


async def test_a_file_never_read_may_be_created_or_edited_but_not_overwritten_blind(
    tmp_path: Path, shared_store: StateStore
) -> None:
    root = tmp_path / "ws"
    tools = tools_of(root)
    (root / "sess-1").mkdir(parents=True)
    (root / "sess-1" / "old.txt").write_text("kept\n")
    turn = context(shared_store, turn_id())
    with pytest.raises(StaleFileError, match=r"old\.txt exists and was not read in this turn"):
        await call(tools, "write_file", turn, path="old.txt", content="clobbered\n")
    with pytest.raises(StaleFileError, match="not read in this turn"):
        await call(
            tools,
            "apply_patch",
            turn,
            patch="*** Begin Patch\n*** Delete File: old.txt\n*** End Patch",
        )
    assert (root / "sess-1" / "old.txt").read_text() == "kept\n"
    # An edit rests on the text it replaces; a new file replaces nothing.
    await call(tools, "edit_file", turn, path="old.txt", old_text="kept", new_text="edited")
    await call(tools, "write_file", turn, path="fresh.txt", content="new\n")
    assert issubclass(StaleFileError, ToolError) and StaleFileError.code == "stale_file"


async def test_undo_reverts_a_turns_changes_newest_first_all_or_nothing_once(
    tmp_path: Path, shared_store: StateStore
) -> None:
    root = tmp_path / "ws"
    ws = root / "sess-1"
    tools = tools_of(root)
    before = context(shared_store, turn_id())
    await call(tools, "write_file", before, path="a.txt", content="a1\n")
    await call(tools, "write_file", before, path="gone.txt", content="bye\n")

    bus = ListBus()
    turn = context(shared_store, turn_id(), bus)
    await call(tools, "read_file", turn, path="a.txt")
    await call(tools, "edit_file", turn, path="a.txt", old_text="a1", new_text="a2")
    await call(tools, "edit_file", turn, path="a.txt", old_text="a2", new_text="a3")
    await call(tools, "write_file", turn, path="dir/new.txt", content="new\n")
    await call(tools, "read_file", turn, path="gone.txt")
    patch = (
        "*** Begin Patch\n*** Update File: dir/new.txt\n*** Move to: moved.txt\n@@\n-new\n+newer\n"
        "*** Delete File: gone.txt\n*** End Patch"
    )
    await call(tools, "apply_patch", turn, patch=patch)
    events = bus.of("file_change")
    assert [(e.kind, e.path, e.from_path) for e in events] == [
        ("modified", "a.txt", None),
        ("modified", "a.txt", None),
        ("created", "dir/new.txt", None),
        ("moved", "moved.txt", "dir/new.txt"),
        ("deleted", "gone.txt", None),
    ]
    assert "-a1\n+a2" in events[0].diff and events[2].size == 4
    assert "+newer" in events[3].diff and events[4].size == 0

    # Someone changes a file after the turn: nothing at all is reverted.
    (ws / "a.txt").write_text("a3 and more\n")
    with pytest.raises(UndoConflictError, match=r"a.txt has changed since turn"):
        await revert_turn(shared_store, root, turn.turn_id)
    assert (ws / "moved.txt").read_text() == "newer\n" and not (ws / "gone.txt").exists()

    (ws / "a.txt").write_text("a3\n")
    report, _ = await revert_turn(shared_store, root, turn.turn_id)
    assert [(f.path, f.did, f.now) for f in report.files] == [
        ("gone.txt", "deleted", "restored"),
        ("moved.txt", "created", "removed"),
        ("a.txt", "modified", "restored"),
    ]  # dir/new.txt was created and moved away: the turn left it as it found it
    assert (ws / "a.txt").read_text() == "a1\n" and (ws / "gone.txt").read_text() == "bye\n"
    assert not (ws / "moved.txt").exists() and not (ws / "dir" / "new.txt").exists()
    with pytest.raises(AlreadyUndoneError, match="undone already"):
        await revert_turn(shared_store, root, turn.turn_id)
    with pytest.raises(NothingToUndoError):
        await revert_turn(shared_store, root, turn_id())


async def test_downloads_and_reads_are_recorded_with_their_revisions(
    tmp_path: Path, shared_store: StateStore
) -> None:
    tools = tools_of(tmp_path / "ws")
    turn = context(shared_store, turn_id())
    await call(tools, "write_file", turn, path="x.txt", content="x\n")
    await call(tools, "read_file", turn, path="x.txt")  # the same revision: no new row
    kinds = [(a.kind, a.path) for a in await shared_store.file_actions(turn.turn_id)]
    assert kinds == [("created", "x.txt")]
    assert time.time() - (await shared_store.file_actions(turn.turn_id))[0].created_at < 60


async def _a_changed_turn(tmp_path: Path) -> tuple[str, Path]:
    """A finished turn (of session sess-1) that overwrote a.txt and created b.txt; the
    workspace root and database under ``tmp_path``."""
    root = tmp_path / "ws"
    (root / "sess-1").mkdir(parents=True)
    (root / "sess-1" / "a.txt").write_text("original\n")
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path}/state.db")
    try:
        tools = tools_of(root)
        turn = context(store, turn_id())
        await call(tools, "read_file", turn, path="a.txt")
        await call(tools, "write_file", turn, path="a.txt", content="overwritten\n")
        await call(tools, "write_file", turn, path="b.txt", content="new\n")
        # It ended (undo refuses a turn that has not; its reverts' events say nothing of it).
        await store.ensure_session("sess-1", "files")
        record = TurnRecord(
            turn_id=turn.turn_id,
            session_id="sess-1",
            status=TurnStatus.COMPLETED,
            created_at=time.time(),
        )
        await store.commit_turn("sess-1", [], record)
    finally:
        await store.close()
    return turn.turn_id, root


def _env(redis_url: str, namespace: str, tmp_path: Path) -> dict[str, str]:
    return clean_env(
        REACTQ_REDIS_URL=redis_url,
        REACTQ_NAMESPACE=namespace,
        REACTQ_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path}/state.db",
        REACTQ_WORKSPACE_ROOT=str(tmp_path / "ws"),
    )


async def test_reactq_undo_reports_what_it_put_back_and_refuses_twice(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    turn, root = await _a_changed_turn(tmp_path)
    env = _env(redis_url, namespace, tmp_path)
    out = run_cli(env, "undo", turn)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"undid turn {turn} (session sess-1):",
        "  removed  b.txt  (the turn had created it)",
        "  restored a.txt  (the turn had modified it)",
    ]
    assert (root / "sess-1" / "a.txt").read_text() == "original\n"
    assert not (root / "sess-1" / "b.txt").exists()
    again = run_cli(env, "undo", turn)
    assert again.returncode == 2
    assert again.stderr.strip() == (
        f"reactq: error: turn {turn}'s file changes were undone already [already_undone]"
    )
    unknown = run_cli(env, "undo", "t_nosuchturn", "--json")
    assert unknown.returncode == 2 and '"code": "nothing_to_undo"' in unknown.stderr


async def test_the_gateway_undoes_a_turn_and_names_a_conflict(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    turn, root = await _a_changed_turn(tmp_path)
    (root / "sess-1" / "b.txt").write_text("changed by a person\n")
    gateway = start_gateway(_env(redis_url, namespace, tmp_path), tmp_path, None)
    try:
        with gateway.client() as client:
            refused = client.post(f"/v1/turns/{turn}/undo")
            assert refused.status_code == 409
            body = refused.json()
            assert body["code"] == "undo_conflict" and "b.txt has changed" in body["message"]
            assert (root / "sess-1" / "a.txt").read_text() == "overwritten\n"

            (root / "sess-1" / "b.txt").write_text("new\n")
            done = client.post(f"/v1/turns/{turn}/undo")
            assert done.status_code == 200, done.text
            assert done.json()["files"] == [
                {"path": "b.txt", "did": "created", "now": "removed"},
                {"path": "a.txt", "did": "modified", "now": "restored"},
            ]
            assert client.post(f"/v1/turns/{turn}/undo").json()["code"] == "already_undone"
            missing = client.post("/v1/turns/t_nosuchturn/undo")
            assert (missing.status_code, missing.json()["code"]) == (404, "nothing_to_undo")
            # The page draws a file_change (its view in the page's table, the drawing in app.js).
            assert '"file_change": {"kind": "file"' in client.get("/static/events.js").text
            assert "  file(box, ev, view) {" in client.get("/static/app.js").text
    finally:
        gateway.stop()


async def test_deleting_a_session_forgets_its_file_actions(store: StateStore) -> None:
    turn, session = turn_id(), f"del-{uuid.uuid4().hex[:8]}"
    await store.ensure_session(session, "a")
    action = FileAction(session_id=session, turn_id=turn, path="x", kind="created", after_hash="h")
    await store.record_file_actions([action])
    assert await store.delete_session(session) is True
    assert await store.file_actions(turn) == []


def test_watch_shows_a_file_change_as_one_line() -> None:
    common = {"session_id": "s", "turn_id": "t_4dd0c2aa", "seq": 3}
    moved = FileChangeEvent(**common, path="b.py", kind="moved", from_path="a.py", size=1200)
    gone = FileChangeEvent(**common, path="old.txt", kind="deleted", diff="-x")
    assert render(moved, show_turn=True) == "t_4dd0c2 file       moved a.py -> b.py (1,200 bytes)"
    assert render(gone) == "file       deleted old.txt"


async def test_a_producers_undo_publishes_a_file_change_for_each_revert(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    from reactq.producer import Producer
    from reactq.shared.settings import Settings

    turn, _ = await _a_changed_turn(tmp_path)
    env = _env(redis_url, f"{namespace}-{uuid.uuid4().hex[:6]}", tmp_path)
    async with Producer(Settings.from_env(env)) as producer:
        report = await producer.undo(turn)
        assert [f.path for f in report.files] == ["b.txt", "a.txt"]
        # On the session's stream, as a worker's reverts are: what a page or watch shows.
        live = [e for e in await producer.bus.read("sess-1", after="0") if e.turn_id == turn]
        assert [(e.type, e.kind, e.path, e.size) for e in live] == [  # type: ignore[union-attr]
            ("file_change", "deleted", "b.txt", 0),
            ("file_change", "modified", "a.txt", len("original\n")),
        ]
        assert "-overwritten\n+original" in live[1].diff  # type: ignore[union-attr]
        # And in the audit log, through the producer's publisher.
        recorded = [e for e in await producer.turn_events(turn) if e.type == "file_change"]
        assert [(e.id, e.path) for e in recorded] == [(e.id, e.path) for e in live]  # type: ignore[union-attr]
