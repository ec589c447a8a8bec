"""The file tools: read, write, edit, list, search and glob a session's workspace.

``read_file``, ``list_files``, ``search_files`` and ``glob_files`` only read
(``read_only=True``): the executor runs several of them at once. ``write_file`` and ``edit_file``
are ``writes=True`` tools, so each runs alone, in the order the model asked,
and both change the workspace through ``Workspace.commit`` only. Every file
operation is blocking I/O and runs in a thread, off the worker's event loop.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import io
import os
from collections.abc import Iterator
from fractions import Fraction
from functools import partial
from typing import Annotated

from pydantic import Field

from reactq.bundles.globs import GlobPattern
from reactq.bundles.journal import Journal
from reactq.bundles.linematch import find_runs
from reactq.bundles.search import SearchLimits, search
from reactq.bundles.workspace import (
    FileChange,
    Workspace,
    WorkspaceError,
    Workspaces,
    show,
    split_path,
)
from reactq.worker.agent.tools import Tool, ToolContext

__all__ = [
    "EDIT_MAX_BYTES",
    "FUZZY_MAX_CHARS",
    "apply_edit",
    "file_tools",
    "read_window",
    "unified_diff",
]

LINE_BYTES = 2000
"""A longer line is cut in ``read_file``'s output (and says so)."""
EDIT_MAX_BYTES = 10 * 1024 * 1024
"""Largest file ``edit_file`` and ``apply_patch`` load (they hold it in memory)."""
FUZZY_MAX_CHARS = 1024 * 1024
"""Largest file ``edit_file`` matches ignoring whitespace when old_text is not found
exactly (the match is linear in the file, ``linematch``; this bounds its time too)."""
DIFF_CHARS = 20_000
LISTING_LIMIT = 1000


# --- read_file ------------------------------------------------------------------------


def _lines(reader: io.BufferedReader[io.FileIO], cap: int) -> Iterator[tuple[bytes, bool]]:
    """(line without its end, cut) for each line, reading at most ``cap`` bytes of each."""
    while True:
        line = reader.readline(cap + 1)
        if not line:
            return
        if line.endswith(b"\n"):
            yield line[:-1].removesuffix(b"\r"), False
            continue
        if len(line) <= cap:
            yield line, False  # the last line, without a newline
            return
        rest = line
        while rest and not rest.endswith(b"\n"):
            rest = reader.readline(1 << 16)  # skip the rest of a huge line
        yield line[:cap], True


def read_window(ws: Workspace, path: str, offset: int, limit: int) -> str:
    """Lines ``offset``.. of a text file, numbered from 1, as ``read_file`` shows them."""
    return _read_window(ws, path, offset, limit)[0]


def _digest(fd: int) -> str:
    """The revision of an open file's content (read from its start, by position)."""
    hasher = hashlib.sha256()
    position = 0
    while chunk := os.pread(fd, 1 << 20, position):
        hasher.update(chunk)
        position += len(chunk)
    return hasher.hexdigest()


def _read_window(ws: Workspace, path: str, offset: int, limit: int) -> tuple[str, str]:
    """``read_window``'s text and the revision it was read from (the same open file)."""
    shown = show(split_path(path))
    with ws.open_read(path) as (fd, info):
        digest = _digest(fd)
        return _window(fd, info, shown, offset, limit), digest


def _window(fd: int, info: os.stat_result, shown: str, offset: int, limit: int) -> str:
    reader = io.BufferedReader(io.FileIO(fd, "rb", closefd=False), 1 << 16)
    if b"\0" in reader.peek(8192)[:8192]:
        return f"{shown} is a binary file ({info.st_size} bytes); read_file shows text only."
    out: list[str] = []
    number = 0
    for number, (raw, cut) in enumerate(_lines(reader, LINE_BYTES), 1):
        if number < offset:
            continue
        if number >= offset + limit:
            # Count the rest, a chunk at a time: the total tells the model what is left.
            tail = b"\n"
            while chunk := reader.read(1 << 20):
                number += chunk.count(b"\n")
                tail = chunk[-1:]
            number += tail != b"\n"  # a last line without a newline
            break
        text = raw.decode("utf-8", "replace")
        out.append(
            f"{number:6}\t{text}" + (f" [... line cut at {LINE_BYTES} bytes]" if cut else "")
        )
    total = number
    if total == 0:
        return f"{shown} is empty."
    if not out:
        return f"{shown} has {total} line(s); offset {offset} is past its end."
    last = offset + len(out) - 1
    if last < total:
        out.append(
            f"[lines {offset}-{last} of {total}; call read_file with offset={last + 1} for more]"
        )
    return "\n".join(out)


# --- edit_file ------------------------------------------------------------------------


def _norm(line: str) -> str:
    return "".join(line.split())


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def apply_edit(text: str, old: str, new: str, replace_all: bool = False) -> tuple[str, str]:
    """``text`` with ``old`` replaced by ``new``, and how it matched (for the model).

    Exact first. When the exact text is nowhere, whole lines are compared with
    whitespace collapsed (a model often gets indentation or spacing wrong) and
    the matched lines are replaced; ``new`` is then re-indented by the
    difference between the file's indentation and ``old``'s. Several matches
    are refused unless ``replace_all``.
    """
    if not old:
        raise WorkspaceError("old_text is empty: to create or overwrite a file, use write_file")
    if old == new:
        raise WorkspaceError("old_text and new_text are the same: there is nothing to change")
    if "\r\n" in text and "\r\n" not in old:
        # The model writes "\n"; a CRLF file is matched, and written back, in its own endings.
        old = old.replace("\n", "\r\n")
        new = new.replace("\r\n", "\n").replace("\n", "\r\n")
    count = text.count(old)
    if count == 1 or (count > 1 and replace_all):
        return text.replace(old, new), f"{count} exact match(es) replaced"
    if count > 1:
        lines: list[str] = []
        start = 0
        while (index := text.find(old, start)) != -1 and len(lines) < 10:
            lines.append(str(_line_of(text, index)))
            start = index + len(old)
        raise WorkspaceError(
            f"old_text matches {count} places (lines {', '.join(lines)}): include more "
            "surrounding lines to make it unique, or set replace_all to change every one"
        )
    return _fuzzy_edit(text, old, new, replace_all)


def _fuzzy_edit(text: str, old: str, new: str, replace_all: bool) -> tuple[str, str]:
    file_lines = text.splitlines(keepends=True)
    old_lines = old.splitlines()
    while old_lines and not old_lines[0].strip():
        old_lines.pop(0)
    while old_lines and not old_lines[-1].strip():
        old_lines.pop()
    not_found = WorkspaceError(
        "old_text was not found, exactly or ignoring whitespace: read the file again and "
        "copy the lines to change exactly"
    )
    if not old_lines:
        raise not_found
    if len(text) > FUZZY_MAX_CHARS:
        raise WorkspaceError(
            f"old_text was not found exactly, and the file is {len(text)} characters: matching "
            f"ignoring whitespace is only tried on files up to {FUZZY_MAX_CHARS} characters. "
            "Read the lines to change again (read_file) and copy them exactly"
        )
    want = [_norm(line) for line in old_lines]
    norms = [_norm(line) for line in file_lines]
    size = len(want)
    starts: list[int] = []
    for index in find_runs(norms, want):
        if not starts or index >= starts[-1] + size:  # leftmost, not overlapping
            starts.append(index)
    if not starts:
        raise not_found
    if len(starts) > 1 and not replace_all:
        raise WorkspaceError(
            f"old_text matches {len(starts)} places ignoring whitespace (lines "
            f"{', '.join(str(s + 1) for s in starts[:10])}): include more surrounding lines "
            "to make it unique, or set replace_all to change every one"
        )
    body = new.replace("\r\n", "\n")
    if old.replace("\r\n", "\n").endswith("\n"):
        body = body.removesuffix("\n")
    if old.replace("\r\n", "\n").startswith("\n"):
        body = body.removeprefix("\n")
    new_lines = body.split("\n") if body else []
    result = list(file_lines)
    for start in reversed(starts):
        matched = file_lines[start : start + size]
        lines = _reindent(old_lines, matched, new_lines)
        eol = "\r\n" if matched[0].endswith("\r\n") else "\n"
        replaced = [line + eol for line in lines]
        if replaced and not matched[-1].endswith("\n"):
            replaced[-1] = replaced[-1].removesuffix(eol)  # the file's last line had no newline
        result[start : start + size] = replaced
    where = ", ".join(f"{s + 1}-{s + size}" for s in starts[:10])
    return "".join(result), f"matched ignoring whitespace at line(s) {where}"


def _reindent(old_lines: list[str], matched: list[str], new_lines: list[str]) -> list[str]:
    """``new_lines`` moved to the file's indentation, when ``old_lines`` had another one.

    Each indentation of old_text maps to the file's at the same line; when that
    map is consistent and covers every indentation new_text uses, new_text is
    mapped line by line. Otherwise, when old_text's first line lacks a constant
    prefix the file has, new_text gets it. Otherwise new_text stays as written.
    """
    # The match compared line by line, blank lines included: the two lists align.
    pairs = [
        (_indent(old), _indent(actual))
        for old, actual in zip(old_lines, matched, strict=True)
        if old.strip()
    ]
    if all(old == actual for old, actual in pairs):
        return new_lines  # old_text's indentation was right
    scaled = _scale_spaces(pairs, new_lines)
    if scaled is not None:
        return scaled
    mapping: dict[str, str] = {}
    consistent = all(mapping.setdefault(old, actual) == actual for old, actual in pairs)
    if consistent and all(_indent(line) in mapping for line in new_lines if line.strip()):
        return [
            mapping[_indent(line)] + line.lstrip() if line.strip() else line for line in new_lines
        ]
    first_old, first_file = pairs[0]
    if first_file.endswith(first_old) and all(
        line.startswith(first_old) for line in new_lines if line.strip()
    ):
        extra = first_file[: len(first_file) - len(first_old)]
        return [extra + line if line.strip() else line for line in new_lines]
    return new_lines


def _scale_spaces(pairs: list[tuple[str, str]], new_lines: list[str]) -> list[str] | None:
    """new_lines re-indented by the linear map (file = a * old + b columns) that takes
    old_text's space indentation to the file's, when one map fits every line."""
    if not all(old.strip(" ") == "" and actual.strip(" ") == "" for old, actual in pairs):
        return None  # tabs: no column arithmetic
    widths = sorted({(len(old), len(actual)) for old, actual in pairs})
    olds = sorted({w[0] for w in widths})
    if len(olds) != len(widths):
        return None  # one old width maps to two file widths
    if len(olds) == 1:
        scale = Fraction(1)
    else:
        (o1, f1), (o2, f2) = widths[0], widths[-1]
        scale = Fraction(f2 - f1, o2 - o1)
    offset = widths[0][1] - scale * widths[0][0]
    if scale <= 0 or any(scale * o + offset != f for o, f in widths):
        return None
    out = []
    for line in new_lines:
        if not line.strip():
            out.append(line)
            continue
        indent = _indent(line)
        if indent.strip(" "):
            return None
        width = scale * len(indent) + offset
        if width < 0 or width.denominator != 1:
            return None
        out.append(" " * int(width) + line.lstrip())
    return out


def unified_diff(path: str, before: str, after: str) -> str:
    """A unified diff of one file (``a/path`` -> ``b/path``), cut when very long."""
    diff = "\n".join(
        difflib.unified_diff(
            before.splitlines(),
            after.splitlines(),
            f"a/{path}",
            f"b/{path}",
            lineterm="",
        )
    )
    if len(diff) > DIFF_CHARS:
        diff = diff[:DIFF_CHARS] + f"\n[... diff cut at {DIFF_CHARS} characters]"
    return diff


def _edit(
    ws: Workspace,
    path: str,
    old: str,
    new: str,
    replace_all: bool,
    known: dict[str, str | None],
) -> tuple[str, list[FileChange]]:
    parts = split_path(path)
    before = ws.read_text(path, limit=EDIT_MAX_BYTES)
    raw = before.encode("utf-8")
    # Before matching: a stale file is "re-read it", not an old_text that misses.
    Journal.check_one(show(parts), raw, known)
    after, how = apply_edit(before, old, new, replace_all)
    changes = [FileChange(path, raw, after.encode("utf-8"))]
    ws.commit(changes)
    return f"Edited {show(parts)} ({how}).\n{unified_diff(show(parts), before, after)}", changes


def _write(
    ws: Workspace, path: str, content: str, known: dict[str, str | None]
) -> tuple[str, list[FileChange]]:
    parts = split_path(path)
    data = content.encode("utf-8", "replace")
    before = ws.current(path)
    Journal.check_one(show(parts), before, known, blind=True)
    changes = [FileChange(path, before, data)]
    ws.commit(changes)
    if before is None:
        return f"Created {show(parts)} ({len(data)} bytes).", changes
    return f"Overwrote {show(parts)} ({len(data)} bytes; it had {len(before)}).", changes


# --- list_files, glob_files ---------------------------------------------------------


def _listing(ws: Workspace, path: str, depth: int) -> str:
    entries, truncated = ws.walk(path, max_depth=depth, limit=LISTING_LIMIT)
    lines = []
    for entry in entries:
        if entry.kind == "dir":
            lines.append(f"{entry.path}/")
        elif entry.kind == "file":
            lines.append(f"{entry.path}  ({entry.size} bytes)")
        elif entry.kind == "link":
            lines.append(f"{entry.path}  (symbolic link, not followed)")
        else:
            lines.append(f"{entry.path}  (not a regular file)")
    if not lines:
        return f"{show(split_path(path))} is empty."
    if truncated:
        lines.append(f"[only the first {LISTING_LIMIT} entries; list a subfolder for more]")
    return "\n".join(lines)


def _glob(ws: Workspace, pattern: str, path: str) -> str:
    matcher = GlobPattern(pattern.removeprefix("./"))
    base = split_path(path)
    entries, walk_cut = ws.walk(path, limit=LISTING_LIMIT * 50)
    found = []
    for entry in entries:
        if entry.kind != "file":
            continue
        relative = "/".join(entry.path.split("/")[len(base) :])
        if matcher.matches(relative):
            found.append(entry.path)
    if not found:
        return f"No file matches {pattern!r} under {show(base)}."
    lines = found[:LISTING_LIMIT]
    if len(found) > LISTING_LIMIT:
        lines.append(f"[{len(found)} files match; only the first {LISTING_LIMIT} are shown]")
    if walk_cut:
        lines.append("[the folder is very large: only part of it was looked at]")
    return "\n".join(lines)


# --- the tools ------------------------------------------------------------------------


def file_tools(
    workspaces: Workspaces,
    *,
    read_only: bool = False,
    search_limits: SearchLimits | None = None,
    journal: Journal | None = None,
) -> list[Tool]:
    """The file tools over ``workspaces`` (each call works in its session's workspace);
    ``journal`` keeps what each turn read and changed (shared with ``apply_patch``)."""
    limits = search_limits or SearchLimits()
    journal = journal or Journal()

    def workspace(ctx: ToolContext) -> Workspace:
        return workspaces.for_session(ctx.session_id)

    async def read_file(
        ctx: ToolContext,
        path: str,
        offset: Annotated[int, Field(ge=1)] = 1,
        limit: Annotated[int, Field(ge=1, le=10_000)] = 2000,
    ) -> str:
        """Read a text file of the workspace; every line is prefixed with its 1-based number.

        Args:
            path: The file, relative to the workspace (e.g. "src/app.py").
            offset: The first line to show (1-based).
            limit: How many lines to show at most.
        """
        known = await journal.known(ctx)
        text, digest = await asyncio.to_thread(_read_window, workspace(ctx), path, offset, limit)
        shown = show(split_path(path))
        await journal.saw(ctx, shown, digest, known.get(shown))
        return text

    async def list_files(
        ctx: ToolContext, path: str = ".", depth: Annotated[int, Field(ge=1, le=20)] = 2
    ) -> str:
        """List the files and folders of the workspace (folders end with /).

        Args:
            path: The folder to list, relative to the workspace ("." is the workspace).
            depth: How many levels to descend (1: the folder's own entries).
        """
        return await asyncio.to_thread(_listing, workspace(ctx), path, depth)

    async def glob_files(ctx: ToolContext, pattern: str, path: str = ".") -> str:
        """Find files whose path matches a glob pattern, like "**/*.py" or "src/*.{ts,tsx}".

        Args:
            pattern: The glob, relative to path (* stays in a folder, ** spans folders).
            path: The folder to search from, relative to the workspace.
        """
        return await asyncio.to_thread(_glob, workspace(ctx), pattern, path)

    async def search_files(
        ctx: ToolContext,
        pattern: str,
        path: str = ".",
        glob: str | None = None,
        ignore_case: bool = False,
        max_results: Annotated[int, Field(ge=1, le=1000)] = 100,
    ) -> str:
        """Search the workspace's text files for lines matching a regular expression.

        Args:
            pattern: A Python regular expression, matched against each line.
            path: The folder (or file) to search, relative to the workspace.
            glob: Only files matching this glob ("*.py" matches at any depth).
            ignore_case: Match without regard to case.
            max_results: Stop after this many matching lines.
        """
        result = await search(
            workspace(ctx),
            pattern,
            path=path,
            glob=glob,
            ignore_case=ignore_case,
            max_results=max_results,
            limits=limits,
        )
        return result.render(pattern, max_results, limits)

    async def write_file(ctx: ToolContext, path: str, content: str) -> str:
        """Create a file, or replace a file's whole content; missing folders are created.

        Args:
            path: The file, relative to the workspace.
            content: The complete new content.
        """
        known = await journal.known(ctx)
        return await journal.apply(ctx, partial(_write, workspace(ctx), path, content, known))

    async def edit_file(
        ctx: ToolContext, path: str, old_text: str, new_text: str, replace_all: bool = False
    ) -> str:
        """Replace old_text with new_text in a file and return the diff. old_text must match
        one place exactly (copy it from read_file, without the line numbers); when it
        matches nowhere, whole lines are compared ignoring whitespace.

        Args:
            path: The file, relative to the workspace.
            old_text: The text to replace; include enough lines to make it unique.
            new_text: The replacement.
            replace_all: Replace every occurrence instead of refusing several.
        """
        known = await journal.known(ctx)
        return await journal.apply(
            ctx, partial(_edit, workspace(ctx), path, old_text, new_text, replace_all, known)
        )

    readers = [
        Tool(read_file, name="read_file", read_only=True),
        Tool(list_files, name="list_files", read_only=True),
        Tool(search_files, name="search_files", read_only=True),
        Tool(glob_files, name="glob_files", read_only=True),
    ]
    if read_only:
        return readers
    writers = [
        Tool(write_file, name="write_file", writes=True),
        Tool(edit_file, name="edit_file", writes=True),
    ]
    return readers + writers
