"""A commit interrupted by a real SIGKILL (issue 28 item 6): the intent was recorded
before the first rename, so the next use of the workspace rolls it forward and a
retried undo completes instead of answering a conflict."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from reactq.bundles import file_tools
from reactq.bundles.workspace import FileChange, Workspace, Workspaces
from reactq.shared.file_undo import AlreadyUndoneError, revert_turn
from reactq.shared.state import StateStore, open_store
from reactq.worker.agent.tools import Tool, ToolContext

FILES = 100

# Runs in a child process: SIGKILLs itself as it places the Nth change.
_KILLED_AT_RENAME = """
import asyncio, os, signal, sys
import reactq.shared.workspace  # before the patch: it checks os.rename's dir_fd support
n = int(sys.argv[1])
count = 0

def killing(real, placing):
    def call(name, *args, **kw):
        global count
        if placing(str(name)):
            count += 1
            if count == n:
                os.kill(os.getpid(), signal.SIGKILL)
        return real(name, *args, **kw)
    return call

# Placing a change: a staged file renamed or linked into place, a file deleted.
os.rename = killing(os.rename, lambda name: name.startswith("tmp-"))
os.link = killing(os.link, lambda name: name.startswith("tmp-"))
os.unlink = killing(os.unlink, lambda name: not name.startswith(("tmp-", "journal")))
"""

_UNDO = """
from reactq.shared.file_undo import revert_turn
from reactq.shared.state import open_store

async def main():
    store = await open_store(sys.argv[2])
    await revert_turn(store, sys.argv[3], sys.argv[4])

asyncio.run(main())
"""

_COMMIT = """
import json
from reactq.bundles.workspace import FileChange, Workspaces
ws = Workspaces(sys.argv[2], quota_bytes=1 << 30).for_session("s1")
changes = [FileChange(p, b.encode() if b else None, a.encode() if a else None)
           for p, b, a in json.loads(sys.argv[3])]
ws.commit(changes)
"""


def _killed_at(n: int, body: str, *args: str) -> None:
    script = _KILLED_AT_RENAME + body
    done = subprocess.run(
        [sys.executable, "-c", script, str(n), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -signal.SIGKILL, done.stderr


async def _call(tools: dict[str, Tool], name: str, ctx: ToolContext, **args: Any) -> str:
    return str(await tools[name].call(args, ctx))


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await open_store(f"sqlite+aiosqlite:///{tmp_path}/state.db")
    try:
        yield opened
    finally:
        await opened.close()


def _leftovers(ws: Path) -> list[str]:
    private = ws / ".reactq"
    return sorted(os.listdir(private / "staging")) + [
        n for n in os.listdir(private) if n.startswith("journal")
    ]


async def test_an_undo_killed_mid_commit_completes_when_retried(
    tmp_path: Path, store: StateStore
) -> None:
    root = tmp_path / "ws"
    tools = {t.name: t for t in file_tools(root)}
    setup = ToolContext(session_id="s1", turn_id=f"t_{uuid.uuid4().hex[:8]}", store=store)
    turn = ToolContext(session_id="s1", turn_id=f"t_{uuid.uuid4().hex[:8]}", store=store)
    for i in range(FILES):
        await _call(tools, "write_file", setup, path=f"f{i:03}.txt", content=f"old {i}\n")
    for i in range(FILES):
        await _call(tools, "read_file", turn, path=f"f{i:03}.txt")
        await _call(tools, "write_file", turn, path=f"f{i:03}.txt", content=f"new {i}\n")

    url = f"sqlite+aiosqlite:///{tmp_path}/state.db"
    _killed_at(50, _UNDO, url, str(root), turn.turn_id)
    ws = root / "s1"
    texts = [(ws / f"f{i:03}.txt").read_text() for i in range(FILES)]
    assert sum(t.startswith("old") for t in texts) == 49  # killed at the 50th rename

    report, _ = await revert_turn(store, root, turn.turn_id)
    assert len(report.files) == FILES
    assert all((ws / f"f{i:03}.txt").read_text() == f"old {i}\n" for i in range(FILES))
    assert _leftovers(ws) == []
    with pytest.raises(AlreadyUndoneError):
        await revert_turn(store, root, turn.turn_id)


def _workspace(tmp_path: Path) -> Workspace:
    return Workspaces(tmp_path / "root", quota_bytes=1 << 30).for_session("s1")


@pytest.mark.parametrize("killed_at", [2, 4])
def test_a_killed_commit_of_adds_updates_and_deletes_is_rolled_forward_on_next_use(
    tmp_path: Path, killed_at: int
) -> None:
    ws = _workspace(tmp_path)
    ws.commit([FileChange("a.txt", None, b"a\n"), FileChange("gone.txt", None, b"g\n")])
    changes = [
        ("a.txt", "a\n", "a2\n"),
        ("gone.txt", "g\n", None),
        ("new/deep/n.txt", None, "n\n"),
        ("z.txt", None, "z\n"),
    ]
    _killed_at(killed_at, _COMMIT, str(ws.root), json.dumps(changes))
    # Any use of the workspace (here a read) finishes the commit first.
    assert ws.current("a.txt") == b"a2\n"
    assert ws.current("gone.txt") is None
    assert ws.current("new/deep/n.txt") == b"n\n" and ws.current("z.txt") == b"z\n"
    assert _leftovers(ws.path) == []


def test_a_journal_that_does_not_parse_is_dropped_and_changes_nothing(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    ws.commit([FileChange("keep.txt", None, b"k\n")])
    planted = ws.path / ".reactq" / "journal.json"
    for bad in (
        "not json",
        json.dumps({"version": 1, "steps": [{"path": ["..", "x"], "staged": None}]}),
        json.dumps({"version": 1, "steps": [{"path": ["keep.txt"], "staged": "../../x"}]}),
        json.dumps({"version": 9, "steps": []}),
    ):
        planted.write_text(bad)
        assert ws.current("keep.txt") == b"k\n"
        assert not planted.exists()
