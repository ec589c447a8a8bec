"""``apply_patch`` against the corpus in tests/patches/, plus the tool itself.

Each ``tests/patches/*.patch`` is one case, in sections headed like ``head``'s::

    # what the case checks
    ==> before/PATH <==      a file in the workspace before (repeatable)
    ==> patch <==            the patch, exactly as a model sends it
    ==> after/PATH <==       a file after (repeatable): the whole workspace, nothing else
    ==> error <==            or: the patch must fail with this in its message

A file header may end with ``(no newline)`` (no final newline), ``(crlf)`` (CRLF
line endings) or ``(latin-1)`` (encoded as Latin-1). A failing case must leave
the workspace exactly as it was.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reactq.bundles import Workspaces, file_tools
from reactq.bundles.patch import PatchError, apply_patch, parse_patch
from reactq.bundles.workspace import Workspace
from reactq.shared.errors import ToolError
from reactq.worker.agent.tools import ToolContext

CASES = sorted((Path(__file__).parent / "patches").glob("*.patch"))
_HEADER = re.compile(r"^==> (.+?)(?: \((no newline|crlf|latin-1)\))? <==$")


@dataclass
class Case:
    before: dict[str, bytes] = field(default_factory=dict)
    after: dict[str, bytes] = field(default_factory=dict)
    patch: str = ""
    error: str | None = None


def _encode(lines: list[str], option: str | None) -> bytes:
    text = "".join(line + "\n" for line in lines)
    if option == "no newline":
        text = text[:-1]
    if option == "crlf":
        text = text.replace("\n", "\r\n")
    return text.encode("latin-1" if option == "latin-1" else "utf-8")


def load(path: Path) -> Case:
    case = Case()
    name: str | None = None
    option: str | None = None
    body: list[str] = []

    def close() -> None:
        if name is None:
            return
        if name == "patch":
            case.patch = "\n".join(body) + "\n"
        elif name == "error":
            case.error = "\n".join(body).strip()
        elif name.startswith("before/"):
            case.before[name.removeprefix("before/")] = _encode(body, option)
        elif name.startswith("after/"):
            case.after[name.removeprefix("after/")] = _encode(body, option)
        else:
            raise ValueError(f"{path.name}: unknown section {name!r}")

    for line in path.read_text(encoding="utf-8").split("\n")[:-1]:
        header = _HEADER.match(line)
        if header:
            close()
            name, option, body = header.group(1), header.group(2), []
        elif name is None:
            assert line.startswith("# "), f"{path.name}: text before the first section"
        else:
            body.append(line)
    close()
    assert case.patch, f"{path.name} has no patch"
    return case


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (the workspace's own .reactq folder aside), and its folders."""
    out: dict[str, bytes] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not (folder == str(root) and d == ".reactq")]
        for name in files:
            full = Path(folder, name)
            out[str(full.relative_to(root))] = full.read_bytes()
        for name in dirs:
            out[str(Path(folder, name).relative_to(root)) + "/"] = b""
    return out


def _files_only(tree: dict[str, bytes]) -> dict[str, bytes]:
    return {k: v for k, v in tree.items() if not k.endswith("/")}


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspaces(tmp_path / "root", quota_bytes=1_000_000).for_session("patch")


def test_the_corpus_has_passing_and_failing_cases() -> None:
    cases = [load(path) for path in CASES]
    assert len(cases) >= 30
    assert sum(c.error is None for c in cases) >= 15
    assert sum(c.error is not None for c in cases) >= 15


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus(path: Path, ws: Workspace) -> None:
    case = load(path)
    ws.path.mkdir(parents=True)
    for name, data in case.before.items():
        (ws.path / name).parent.mkdir(parents=True, exist_ok=True)
        (ws.path / name).write_bytes(data)
    before = snapshot(ws.path)
    if case.error is not None:
        assert not case.after, f"{path.name}: a failing case has no after"
        with pytest.raises(PatchError) as raised:
            apply_patch(ws, case.patch)
        assert case.error in raised.value.message
        assert snapshot(ws.path) == before, "a failed patch changed the workspace"
        return
    summary = apply_patch(ws, case.patch)
    assert summary.startswith("Applied the patch")
    assert _files_only(snapshot(ws.path)) == case.after


def test_parse_keeps_every_detail() -> None:
    hunks = parse_patch(
        "*** Begin Patch\n"
        "*** Update File: a.py\n"
        "*** Move to: b.py\n"
        "@@ class A:\n"
        " keep\n"
        "-old\n"
        "+new\n"
        "\n"
        "*** End of File\n"
        "*** Delete File: c.py\n"
        "*** End Patch"
    )
    update, delete = hunks
    assert update.path == "a.py" and update.move_to == "b.py"  # type: ignore[union-attr]
    (chunk,) = update.chunks  # type: ignore[union-attr]
    assert chunk.context == "class A:" and chunk.end_of_file
    assert chunk.old == ["keep", "old", ""] and chunk.new == ["keep", "new", ""]
    assert (chunk.added, chunk.removed, chunk.line) == (1, 1, 4)
    assert delete.path == "c.py"


async def test_the_tool_applies_and_reports(tmp_path: Path) -> None:
    tools = {t.name: t for t in file_tools(tmp_path)}
    tool = tools["apply_patch"]
    assert tool.writes and "*** Begin Patch" in tool.description
    ctx = ToolContext(session_id="p1")
    out = await tool.call(
        {"patch": "*** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** End Patch\n"}, ctx
    )
    assert out == "Applied the patch; nothing else changed:\nA a.txt (+2)"
    out = await tool.call(
        {
            "patch": "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n@@\n one\n"
            "-two\n+2\n*** End Patch"
        },
        ctx,
    )
    assert out.endswith("R a.txt -> b.txt (+1 -1)")
    assert (tmp_path / "p1" / "b.txt").read_text() == "one\n2\n"
    with pytest.raises(ToolError) as raised:
        await tool.call({"patch": "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch"}, ctx)
    assert raised.value.code == "patch_error"


def test_a_quota_refusal_is_a_patch_error_and_changes_nothing(tmp_path: Path) -> None:
    ws = Workspaces(tmp_path, quota_bytes=10).for_session("q")
    with pytest.raises(PatchError, match="not applied: the workspace quota"):
        apply_patch(ws, "*** Begin Patch\n*** Add File: a\n+" + "x" * 20 + "\n*** End Patch")
    assert snapshot(ws.path) == {}
