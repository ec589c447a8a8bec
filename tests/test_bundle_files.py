"""The file tools through ``Tool.call``: numbered reads, writes, edits (exact, fuzzy,
ambiguous), listings, globs, and a regex search that no pattern or file can hang."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from reactq.bundles import SearchLimits, Workspaces, file_tools
from reactq.bundles.linematch import find_runs
from reactq.bundles.text_edit import FUZZY_MAX_CHARS, apply_edit
from reactq.bundles.workspace import WorkspaceError
from reactq.shared.errors import ToolError
from reactq.shared.settings import Settings
from reactq.worker.agent.tools import Tool, ToolContext

CTX = ToolContext(session_id="files-1", turn_id="t_1")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "workspaces"


@pytest.fixture
def tools(root: Path) -> dict[str, Tool]:
    limits = SearchLimits(seconds=1.0, line_bytes=200)
    return {t.name: t for t in file_tools(root, search_limits=limits)}


async def call(tools: dict[str, Tool], name: str, ctx: ToolContext = CTX, **args: Any) -> str:
    result = await tools[name].call(args, ctx)
    assert isinstance(result, str)
    return result


def test_the_bundle_and_its_flags(root: Path) -> None:
    tools = file_tools(root)
    assert [t.name for t in tools] == [
        "read_file",
        "list_files",
        "search_files",
        "glob_files",
        "write_file",
        "edit_file",
        "apply_patch",
    ]
    assert {t.name for t in tools if not t.writes} == {
        "read_file",
        "list_files",
        "search_files",
        "glob_files",
    }
    assert [t.name for t in file_tools(root, read_only=True)] == [
        "read_file",
        "list_files",
        "search_files",
        "glob_files",
    ]
    with_download = file_tools(Settings.from_env({}, workspace_root=str(root)), download=True)
    assert with_download[-1].name == "download_file" and with_download[-1].writes
    for tool in tools:
        assert "ctx" not in tool.parameters["properties"]
        assert tool.description


async def test_write_then_read_with_line_numbers(tools: dict[str, Tool], root: Path) -> None:
    assert await call(tools, "write_file", path="src/app.py", content="a\nb\nc\n") == (
        "Created src/app.py (6 bytes)."
    )
    assert (root / "files-1" / "src" / "app.py").read_text() == "a\nb\nc\n"
    assert await call(tools, "read_file", path="src/app.py") == "     1\ta\n     2\tb\n     3\tc"
    window = await call(tools, "read_file", path="src/app.py", offset=2, limit=1)
    assert window == "     2\tb\n[lines 2-2 of 3; call read_file with offset=3 for more]"
    assert "past its end" in await call(tools, "read_file", path="src/app.py", offset=9)
    await call(tools, "write_file", path="four.txt", content="1\n2\n3\n4")
    window = await call(tools, "read_file", path="four.txt", limit=2)
    assert window.endswith("[lines 1-2 of 4; call read_file with offset=3 for more]")
    assert "Overwrote" in await call(tools, "write_file", path="src/app.py", content="")
    assert await call(tools, "read_file", path="src/app.py") == "src/app.py is empty."


async def test_read_cuts_long_lines_and_spots_binary(tools: dict[str, Tool], root: Path) -> None:
    folder = root / "files-1"
    folder.mkdir(parents=True)
    (folder / "min.js").write_text("x" * 50_000 + "\nshort\n")
    (folder / "blob.bin").write_bytes(b"\x89PNG\0\0\0")
    (folder / "crlf.txt").write_bytes(b"one\r\ntwo")
    text = await call(tools, "read_file", path="min.js")
    first, second = text.split("\n")
    assert first.endswith("[... line cut at 2000 bytes]") and len(first) < 2100
    assert second == "     2\tshort"
    assert "binary file" in await call(tools, "read_file", path="blob.bin")
    assert await call(tools, "read_file", path="crlf.txt") == "     1\tone\n     2\ttwo"


async def test_sessions_do_not_see_each_other(tools: dict[str, Tool]) -> None:
    await call(tools, "write_file", path="mine.txt", content="1")
    other = ToolContext(session_id="files-2")
    with pytest.raises(ToolError, match="no such file"):
        await call(tools, "read_file", other, path="mine.txt")
    with pytest.raises(ToolError, match="need a session"):
        await call(tools, "read_file", ToolContext(), path="mine.txt")


async def test_edit_exact_ambiguous_and_replace_all(tools: dict[str, Tool]) -> None:
    await call(tools, "write_file", path="f.py", content="x = 1\ny = 1\n")
    with pytest.raises(ToolError, match=r"matches 2 places \(lines 1, 2\)"):
        await call(tools, "edit_file", path="f.py", old_text="= 1", new_text="= 2")
    diff = await call(tools, "edit_file", path="f.py", old_text="y = 1", new_text="y = 3")
    assert diff.splitlines()[1:] == [
        "--- a/f.py",
        "+++ b/f.py",
        "@@ -1,2 +1,2 @@",
        " x = 1",
        "-y = 1",
        "+y = 3",
    ]
    out = await call(
        tools, "edit_file", path="f.py", old_text=" = ", new_text="=", replace_all=True
    )
    assert "2 exact match(es)" in out
    assert await call(tools, "read_file", path="f.py") == "     1\tx=1\n     2\ty=3"
    with pytest.raises(ToolError, match="not found"):
        await call(tools, "edit_file", path="f.py", old_text="z=9", new_text="z=0")
    with pytest.raises(ToolError, match="use write_file"):
        await call(tools, "edit_file", path="f.py", old_text="", new_text="z")


def test_fuzzy_edits_match_whole_lines_ignoring_whitespace() -> None:
    text = "class A:\n    def f(self):\n        return  1\n\n    x = 1\n"
    # Indentation lost and spacing different: matched on whole lines, re-indented.
    after, how = apply_edit(text, "def f(self):\nreturn 1\n", "def f(self):\n    return 2\n")
    assert "ignoring whitespace at line(s) 2-3" in how
    assert after == "class A:\n    def f(self):\n        return 2\n\n    x = 1\n"
    # Two-space indentation mapped to the file's four.
    after, _ = apply_edit(
        text, "  def f(self):\n    return 1", "  def f(self):\n    if x:\n      return 2"
    )
    assert after == "class A:\n    def f(self):\n        if x:\n            return 2\n\n    x = 1\n"
    with pytest.raises(ToolError, match="2 places ignoring whitespace"):
        apply_edit("a  b\nc\na b\n", "a b ", "z")
    assert apply_edit("a  b\nc\na b\n", "a b ", "z", replace_all=True)[0] == "z\nc\nz\n"
    # CRLF files keep their endings, exact or fuzzy.
    assert apply_edit("a\r\nb\r\n", "a\nb", "c\nd")[0] == "c\r\nd\r\n"
    assert apply_edit("  a\r\nb\r\n", "a\n", "c\n")[0] == "  c\r\nb\r\n"


async def test_list_and_glob_never_follow_links(tools: dict[str, Tool], root: Path) -> None:
    for path in ("src/a.py", "src/pkg/b.py", "src/pkg/c.ts", "README.md"):
        await call(tools, "write_file", path=path, content="x\n")
    (root / "files-1" / "out").symlink_to(root.parent)
    listing = await call(tools, "list_files")
    assert listing.splitlines() == [
        "README.md  (2 bytes)",
        "out  (symbolic link, not followed)",
        "src/",
        "src/a.py  (2 bytes)",
        "src/pkg/",
    ]
    deep = await call(tools, "list_files", path="src", depth=5)
    assert "src/pkg/b.py  (2 bytes)" in deep
    assert (await call(tools, "glob_files", pattern="**/*.py")).splitlines() == [
        "src/a.py",
        "src/pkg/b.py",
    ]
    assert (await call(tools, "glob_files", pattern="*.{py,ts}", path="src/pkg")).splitlines() == [
        "src/pkg/b.py",
        "src/pkg/c.ts",
    ]
    assert "No file matches" in await call(tools, "glob_files", pattern="*.rs")
    assert "No file matches" in await call(tools, "glob_files", pattern="out/**")
    with pytest.raises(ToolError, match="symbolic link"):
        await call(tools, "list_files", path="out")


async def test_search_finds_lines_in_order(tools: dict[str, Tool]) -> None:
    await call(tools, "write_file", path="b.py", content="def b():\n    return 2\n")
    await call(tools, "write_file", path="a.py", content="def a():\n    return 1\n")
    await call(tools, "write_file", path="notes.md", content="return to sender\n")
    out = await call(tools, "search_files", pattern=r"return \d")
    assert out.splitlines() == [
        "a.py:2:     return 1",
        "b.py:2:     return 2",
        "[2 matching line(s) in 2 file(s); 3 of 3 file(s) searched]",
    ]
    only_md = await call(tools, "search_files", pattern="RETURN", ignore_case=True, glob="*.md")
    assert only_md.splitlines()[0] == "notes.md:1: return to sender"
    capped = await call(tools, "search_files", pattern="def", max_results=1)
    assert "a.py:1: def a():" in capped and "only the first 1 matching lines" in capped
    with pytest.raises(ToolError, match="invalid regular expression"):
        await call(tools, "search_files", pattern="(unclosed")
    assert "No line matches" in await call(tools, "search_files", pattern="nowhere")


async def test_a_catastrophic_pattern_cannot_hang_the_worker(tools: dict[str, Tool]) -> None:
    """The regex runs in a child process that is killed when the budget is spent: the
    event loop keeps running meanwhile, and what was found first is kept."""
    await call(tools, "write_file", path="a.txt", content="aaa found early\n")
    await call(tools, "write_file", path="b.txt", content="a" * 40 + "!\n")
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    started = time.monotonic()
    try:
        out = await call(tools, "search_files", pattern=r"^(a+)+$|found")
    finally:
        ticking.cancel()
    elapsed = time.monotonic() - started
    assert 0.9 < elapsed < 3.0, elapsed
    assert out.splitlines()[0] == "a.txt:1: aaa found early"
    assert "stopped after its 1 s time budget" in out
    assert max(gaps) < 0.5, "the event loop stalled during the search"


async def test_a_minified_line_is_searched_only_up_to_the_cap(
    tools: dict[str, Tool], root: Path
) -> None:
    folder = root / "files-1"
    folder.mkdir(parents=True)
    (folder / "min.js").write_text("var start=1;" + "x" * 3_000_000 + "needle\n")
    out = await call(tools, "search_files", pattern="start")
    line = out.splitlines()[0]
    assert line.startswith("min.js:1: var start=1;xxx") and line.endswith("[line cut]")
    assert len(line) < 300
    assert "No line matches" in await call(tools, "search_files", pattern="needle")


async def test_search_skips_binary_and_large_files(root: Path) -> None:
    limits = SearchLimits(file_bytes=1000)
    tools = {t.name: t for t in file_tools(root, search_limits=limits)}
    folder = root / "files-1"
    folder.mkdir(parents=True)
    (folder / "blob.bin").write_bytes(b"match\0")
    (folder / "big.txt").write_text("match\n" * 1000)
    (folder / "ok.txt").write_text("match\n")
    out = await call(tools, "search_files", pattern="match")
    assert out.splitlines()[0] == "ok.txt:1: match"
    assert "skipped 1 binary file(s) and 1 over 1000 bytes" in out


def test_a_workspaces_root_and_quota_from_settings(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"REACTQ_WORKSPACE_ROOT": str(tmp_path / "w"), "REACTQ_WORKSPACE_QUOTA_BYTES": "5"}
    )
    tools = {t.name: t for t in file_tools(settings)}

    async def main() -> None:
        with pytest.raises(ToolError, match="quota"):
            await call(tools, "write_file", path="x", content="123456")

    asyncio.run(main())
    assert (tmp_path / "w" / "files-1").is_dir()
    assert repr(Workspaces(tmp_path, quota_bytes=1)).startswith("Workspaces(root=")


def _on_disk(folder: Path) -> tuple[int, int]:
    """(bytes, inodes) under ``folder`` as a disk sees them: files' sizes, 4096 a folder."""
    size = inodes = 0
    for _, dirs, files in os.walk(folder):
        inodes += len(dirs) + len(files)
        size += 4096 * len(dirs)
    size += sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return size, inodes


async def test_deep_empty_folders_count_against_the_quota(tmp_path: Path) -> None:
    """Issue 29 item 4: 40 writes of 500-deep paths left 80 MB under a 1 MiB quota."""
    quota = 1 << 20
    settings = Settings.from_env({}, workspace_root=str(tmp_path), workspace_quota_bytes=quota)
    tools = {t.name: t for t in file_tools(settings)}
    refused = 0
    for i in range(40):
        deep = f"{i}/" + "d/" * 499 + "f.txt"
        try:
            await call(tools, "write_file", path=deep, content="x")
        except ToolError as exc:
            assert "each new folder counts 4096" in exc.message
            refused += 1
    assert refused == 40
    assert _on_disk(tmp_path / "files-1")[0] <= quota
    # A shallow path still fits, and its folders count.
    await call(tools, "write_file", path="a/b/c.txt", content="12345")
    assert Workspaces(tmp_path, quota_bytes=quota).for_session("files-1").usage() >= 2 * 4096 + 5


async def test_the_inode_limit_refuses_a_file_too_many(tmp_path: Path) -> None:
    settings = Settings.from_env({}, workspace_root=str(tmp_path), workspace_max_inodes=10)
    tools = {t.name: t for t in file_tools(settings)}
    for i in range(10):
        await call(tools, "write_file", path=f"f{i}", content="")
    with pytest.raises(ToolError, match="limit of 10 files and folders would be passed"):
        await call(tools, "write_file", path="one-more", content="")
    assert len([p for p in (tmp_path / "files-1").iterdir() if p.name != ".reactq"]) == 10


def test_a_fuzzy_miss_on_a_large_file_is_a_clear_error() -> None:
    """Issue 29 item 5: a 4 MB file and a 16 KB old_text that misses burned 40 s of CPU."""
    # The worst case of a slice compared at every start: every line matches but the last.
    text = "x = 1\n" * 700_000
    assert len(text) > 4_000_000
    old = "x = 1\n" * 2_700 + "y = 2\n"
    assert len(old) > 16_000
    with pytest.raises(WorkspaceError, match=f"only tried on files up to {FUZZY_MAX_CHARS}"):
        apply_edit(text, old, "x")


class _Counted(str):
    """A line that counts its comparisons."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _Counted.compared += 1
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


def test_line_runs_are_found_in_linear_work() -> None:
    """The worst case of a slice compared at every start (lines x old lines, here 20
    million comparisons) stays within twice the lines, and the answer is the same."""
    hay = [_Counted("a")] * 20_000
    needle = [_Counted("a")] * 999 + [_Counted("b")]
    _Counted.compared = 0
    assert list(find_runs(hay, needle)) == []
    assert _Counted.compared <= 2 * (len(hay) + len(needle))
    rng = random.Random(7)
    for _ in range(300):
        lines = [rng.choice("ab") for _ in range(rng.randint(0, 30))]
        pattern = [rng.choice("ab") for _ in range(rng.randint(1, 4))]
        start = rng.randint(0, 5)
        naive = [
            i
            for i in range(start, len(lines) - len(pattern) + 1)
            if lines[i : i + len(pattern)] == pattern
        ]
        assert list(find_runs(lines, pattern, start)) == naive
    # Within the size bound, a fuzzy edit on a long, repetitive file still matches.
    text = "x = 1\n" * 50_000 + "y = 2\n"
    after, how = apply_edit(text, "x=1\n" * 300 + "y=2\n", "z = 3\n")
    assert after.endswith("x = 1\n" * (50_000 - 300) + "z = 3\n") and "ignoring whitespace" in how
