"""The session workspace: paths confined to it, links never followed (even swapped in
mid-call), the quota, and commits that apply every change or none."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from reactq.bundles.workspace import (
    FileChange,
    Workspace,
    WorkspaceError,
    Workspaces,
    session_dir_name,
    split_path,
)
from reactq.shared import workspace_fs, workspace_intent, workspace_quota


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspaces(tmp_path / "root", quota_bytes=100_000).for_session("s1")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("outside secret\n")
    return folder


def tree(path: Path) -> dict[str, str]:
    """Every file and folder under ``path`` (links as such), for before/after comparisons."""
    out = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            full = Path(root, name)
            key = str(full.relative_to(path))
            if full.is_symlink():
                out[key] = f"link -> {os.readlink(full)}"
            elif full.is_dir():
                out[key] = "dir"
            else:
                out[key] = full.read_text()
    return out


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../x", "'..'"),
        ("a/../../x", "'..'"),
        ("/etc/passwd", "absolute"),
        ("~/x", "absolute"),
        ("C:/x", "absolute"),
        ("C:", "absolute"),
        ("a\\b", "backslash"),
        ("a\0b", "control"),
        ("a\nb", "control"),
        (".reactq/staging/x", "own folder"),
        ("x" * 300, "255 bytes"),
    ],
)
def test_paths_that_could_leave_are_refused(path: str, reason: str) -> None:
    with pytest.raises(WorkspaceError, match=reason):
        split_path(path)


def test_paths_are_normalised() -> None:
    assert split_path("./a//b/") == ("a", "b")
    assert split_path(".") == split_path("") == ()
    assert split_path("sub/.reactq/x") == ("sub", ".reactq", "x")  # reserved at the top only


def test_session_directories_cannot_alias(tmp_path: Path) -> None:
    assert session_dir_name("chat-1:a") == "chat-1:a"
    for odd in (".", "..", ".hidden", "a/b", "x" * 200):
        name = session_dir_name(odd)
        assert name.startswith("~") and "/" not in name and len(name) < 100
    assert session_dir_name("..") != session_dir_name(".")
    with pytest.raises(WorkspaceError, match="need a session"):
        session_dir_name("")
    ws = Workspaces(tmp_path / "root", quota_bytes=100).for_session("..")
    ws.commit([FileChange("f", None, b"x")])
    assert ws.path.parent == tmp_path / "root" and (ws.path / "f").read_bytes() == b"x"


def test_the_workspace_is_created_on_first_use(ws: Workspace) -> None:
    assert not ws.path.exists()
    assert ws.walk() == ([], False)
    assert ws.path.is_dir()


def test_links_are_refused_and_never_walked(ws: Workspace, outside: Path) -> None:
    ws.commit([FileChange("sub/inside.txt", None, b"inside\n")])
    os.symlink(outside, ws.path / "sub" / "out")
    os.symlink(outside / "secret.txt", ws.path / "leaf.txt")
    os.symlink("inside.txt", ws.path / "sub" / "relative.txt")  # even one pointing inside
    for path in ("sub/out/secret.txt", "leaf.txt", "sub/relative.txt"):
        with pytest.raises(WorkspaceError, match="symbolic link"):
            ws.read_bytes(path)
    with pytest.raises(WorkspaceError, match="symbolic link"):
        ws.commit([FileChange("sub/out/new.txt", None, b"x")])
    with pytest.raises(WorkspaceError, match="symbolic link"):
        ws.commit([FileChange("leaf.txt", b"outside secret\n", b"x")])
    with pytest.raises(WorkspaceError, match="symbolic link"):
        ws.walk("sub/out")
    entries, _ = ws.walk()
    assert {(e.path, e.kind) for e in entries} == {
        ("leaf.txt", "link"),
        ("sub", "dir"),
        ("sub/inside.txt", "file"),
        ("sub/out", "link"),
        ("sub/relative.txt", "link"),
    }
    assert (outside / "secret.txt").read_text() == "outside secret\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_a_link_swapped_in_during_the_call_is_refused(
    ws: Workspace, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk checks each component in the same call that opens it: there is no
    check-then-use window for a swap to slip into."""
    ws.commit([FileChange("sub/secret.txt", None, b"inside\n")])
    real_open_dir = workspace_fs.open_dir
    swaps = []

    def swapping_open_dir(name: str, dir_fd: int, shown: str) -> int:
        if name == "sub" and not swaps:
            # Between the path's check (it was a plain folder) and its use.
            os.rename(ws.path / "sub", ws.path / "sub-old")
            os.symlink(outside, ws.path / "sub")
            swaps.append(name)
        return real_open_dir(name, dir_fd, shown)

    monkeypatch.setattr(workspace_fs, "open_dir", swapping_open_dir)
    with pytest.raises(WorkspaceError, match="symbolic link"):
        ws.read_bytes("sub/secret.txt")
    assert swaps == ["sub"]

    swaps.clear()
    os.unlink(ws.path / "sub")
    os.rename(ws.path / "sub-old", ws.path / "sub")
    with pytest.raises(WorkspaceError, match="symbolic link"):
        ws.commit([FileChange("sub/new.txt", None, b"planted")])
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_a_link_flipping_under_concurrent_reads_never_leaks(ws: Workspace, outside: Path) -> None:
    ws.commit([FileChange("sub/secret.txt", None, b"inside\n")])
    (ws.path / "sub-real").mkdir()
    (ws.path / "sub-real" / "secret.txt").write_text("inside\n")
    stop = threading.Event()

    def flip() -> None:
        # Swap sub between a real folder and a link to the outside, as fast as possible.
        while not stop.is_set():
            os.replace(ws.path / "sub", ws.path / "sub-tmp")
            os.symlink(outside, ws.path / "sub")
            os.unlink(ws.path / "sub")
            os.replace(ws.path / "sub-tmp", ws.path / "sub")

    flipper = threading.Thread(target=flip)
    flipper.start()
    seen: set[bytes] = set()
    try:
        deadline = time.monotonic() + 0.4
        while time.monotonic() < deadline:
            try:
                seen.add(ws.read_bytes("sub/secret.txt"))
            except WorkspaceError:
                seen.add(b"refused")
    finally:
        stop.set()
        flipper.join()
    assert b"outside secret\n" not in seen
    assert seen <= {b"inside\n", b"refused"}


def test_special_files_and_hard_links_are_not_read(ws: Workspace, outside: Path) -> None:
    ws.commit([FileChange("a.txt", None, b"a")])
    os.mkfifo(ws.path / "fifo")
    with pytest.raises(WorkspaceError, match="not a regular file"):
        ws.read_bytes("fifo")  # and it does not hang waiting for a writer
    os.link(outside / "secret.txt", ws.path / "hard.txt")
    with pytest.raises(WorkspaceError, match="hard links"):
        ws.read_bytes("hard.txt")
    ws.commit([FileChange("b/c", None, b"x")])
    with pytest.raises(WorkspaceError, match="is a directory"):
        ws.read_bytes("b")
    with pytest.raises(WorkspaceError, match="not a directory"):
        ws.commit([FileChange("a.txt/x", None, b"x")])


def test_the_quota_refuses_growth_but_allows_shrinking(tmp_path: Path) -> None:
    ws = Workspaces(tmp_path, quota_bytes=100).for_session("q")
    ws.commit([FileChange("a", None, b"x" * 80)])
    with pytest.raises(WorkspaceError, match="quota"):
        ws.commit([FileChange("b", None, b"y" * 30)])
    assert ws.kind("b") is None
    # A replacement counts only what it adds; shrinking is always allowed.
    ws.commit([FileChange("a", b"x" * 80, b"x" * 95)])
    ws.commit([FileChange("a", b"x" * 95, b"x")])
    assert ws.usage() == 1 and ws.free_bytes() == 99


def test_commit_checks_everything_before_writing_anything(ws: Workspace) -> None:
    ws.commit([FileChange("keep.txt", None, b"one\n"), FileChange("old.txt", None, b"old\n")])
    before = tree(ws.path)
    for bad in (
        FileChange("keep.txt", b"stale\n", b"x"),  # changed since it was read
        FileChange("new.txt", b"x", b"y"),  # no longer exists
        FileChange("old.txt", None, b"y"),  # already exists
    ):
        with pytest.raises(WorkspaceError):
            ws.commit(
                [
                    FileChange("first/created.txt", None, b"1"),
                    FileChange("keep.txt", b"one\n", b"two\n"),
                    bad,
                ]
            )
        assert tree(ws.path) == before


def test_a_failure_while_placing_restores_what_was_placed(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws.commit([FileChange("a.txt", None, b"a\n"), FileChange("gone.txt", None, b"g\n")])
    before = tree(ws.path)
    real_place = workspace_intent._place
    calls = []

    def failing_place(top: int, staging: int, step: workspace_intent.Step, *args: object) -> None:
        calls.append(step.parts)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        real_place(top, staging, step, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(workspace_intent, "_place", failing_place)
    with pytest.raises(OSError, match="No space"):
        ws.commit(
            [
                FileChange("a.txt", b"a\n", b"changed\n"),
                FileChange("gone.txt", b"g\n", None),
                FileChange("new/dir/n.txt", None, b"n\n"),
                FileChange("z.txt", None, b"z\n"),
            ]
        )
    assert tree(ws.path) == before
    assert os.listdir(ws.path / ".reactq" / "staging") == []


def test_replacing_keeps_the_mode_and_leaves_no_staged_file(ws: Workspace) -> None:
    ws.commit([FileChange("run.sh", None, b"echo 1\n")])
    os.chmod(ws.path / "run.sh", 0o755)
    ws.commit([FileChange("run.sh", b"echo 1\n", b"echo 2\n")])
    assert (ws.path / "run.sh").stat().st_mode & 0o777 == 0o755
    assert os.listdir(ws.path / ".reactq" / "staging") == []
    assert [e.path for e in ws.walk()[0]] == ["run.sh"]  # .reactq is never listed


def test_walk_depth_and_limit(ws: Workspace) -> None:
    ws.commit([FileChange(f"d{i}/e/f.txt", None, b"x") for i in range(3)])
    assert [e.path for e in ws.walk(max_depth=1)[0]] == ["d0", "d1", "d2"]
    assert [e.path for e in ws.walk("d1")[0]] == ["d1/e", "d1/e/f.txt"]
    entries, cut = ws.walk(limit=4)
    assert cut and [e.path for e in entries] == ["d0", "d0/e", "d0/e/f.txt", "d1"]
    assert ws.walk("d1/e/f.txt")[0][0].kind == "file"


def test_folders_and_inodes_count_and_a_commit_past_either_is_refused(tmp_path: Path) -> None:
    ws = Workspaces(tmp_path, quota_bytes=3 * 4096, max_inodes=4).for_session("q")
    ws.commit([FileChange("a/b/f", None, b"x")])  # two folders and a file
    assert ws.measure() == workspace_quota.Usage(2 * 4096 + 1, 3)
    with pytest.raises(WorkspaceError, match="each new folder counts 4096"):
        ws.commit([FileChange("c/g", None, b"")])
    ws.commit([FileChange("a/g", None, b"")])
    with pytest.raises(WorkspaceError, match="limit of 4 files and folders"):
        ws.commit([FileChange("a/h", None, b"")])
    ws.commit([FileChange("a/g", b"", None), FileChange("a/h", None, b"")])  # one out, one in


def test_trim_removes_what_changed_since_newest_first_and_keeps_older_files(
    tmp_path: Path,
) -> None:
    """What a run_code run does to a workspace, without the sandbox: files and folders
    written behind the tools' back, past the quota."""
    ws = Workspaces(tmp_path, quota_bytes=50_000).for_session("t")
    ws.commit([FileChange("old.txt", None, b"o" * 10_000)])
    since = ws.clock()
    assert ws.trim(since) == []  # within the quota: nothing goes
    for i in range(8):
        (ws.path / f"new{i}").write_bytes(b"n" * 10_000)
    deep = ws.path.joinpath(*["d"] * 30)
    deep.mkdir(parents=True)
    assert ws.over_quota()
    removed = ws.trim(since)
    assert not ws.over_quota() and ws.usage() <= 50_000
    assert (ws.path / "old.txt").read_bytes() == b"o" * 10_000
    assert removed[0] == "new7" and "old.txt" not in removed
    assert not deep.exists()  # its deepest folders went too
