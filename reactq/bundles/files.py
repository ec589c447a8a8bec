"""The file tools: read, write, edit, list, search and glob a session's workspace.

``read_file``, ``list_files``, ``search_files`` and ``glob_files`` only read
(``read_only=True``): the executor runs several of them at once. ``write_file`` and ``edit_file``
are ``writes=True`` tools, so each runs alone, in the order the model asked,
and both change the workspace through ``Workspace.commit`` only. Every file
operation is blocking I/O and runs in a thread, off the worker's event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
from collections.abc import Iterator
from functools import partial
from typing import Annotated

from pydantic import Field

from reactq.bundles.globs import GlobPattern
from reactq.bundles.journal import Journal
from reactq.bundles.search import SearchLimits, search
from reactq.bundles.text_edit import apply_edit, unified_diff
from reactq.bundles.workspace import (
    FileChange,
    Workspace,
    Workspaces,
    show,
    split_path,
)
from reactq.worker.agent.tools import Tool, ToolContext

__all__ = [
    "EDIT_MAX_BYTES",
    "file_tools",
    "read_window",
]

LINE_BYTES = 2000
"""A longer line is cut in ``read_file``'s output (and says so)."""
EDIT_MAX_BYTES = 10 * 1024 * 1024
"""Largest file ``edit_file`` and ``apply_patch`` load (they hold it in memory)."""
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


# --- edit_file, write_file (the edit itself: text_edit.py) -----------------------------


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
