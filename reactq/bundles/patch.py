"""``apply_patch``: Codex's ``*** Begin Patch`` format, applied all or nothing.

::

    *** Begin Patch
    *** Add File: docs/new.md
    +a line of the new file
    *** Update File: src/app.py
    *** Move to: src/main.py
    @@ def main():
    -    print("hi")
    +    print("hello")
    *** Delete File: old.txt
    *** End Patch

An update's chunks start with ``@@`` (the first may omit it); text after
``@@ `` is a line to find first, the chunk is then searched after it. Chunk
lines are context (`` ``), removed (``-``) or added (``+``); an empty line is
empty context. ``*** End of File`` closes a chunk that belongs at the file's
end. Chunks are found in order, each after the previous one, by trying the
exact lines, then ignoring trailing whitespace, then ignoring surrounding
whitespace, then with Unicode punctuation folded (curly quotes, dashes,
non-breaking spaces); an end-of-file chunk tries the file's tail first. A
chunk with no ``-`` or context lines is inserted after its ``@@`` line, or at
the end of the file without one. Context lines are kept as the file has them:
a match that ignored whitespace or folded punctuation rewrites only the ``-``
and ``+`` lines.

Every change is planned in memory (files read through the confined
workspace) before anything is written, then handed to ``Workspace.commit`` as
one list: a chunk that does not apply, a file to add that exists or a file to
update that does not, and the workspace is left untouched.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from reactq.bundles.journal import Journal, StaleFileError
from reactq.bundles.linematch import find_runs
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
    "AddFile",
    "Chunk",
    "DeleteFile",
    "PatchError",
    "UpdateFile",
    "apply_chunks",
    "apply_patch",
    "parse_patch",
    "patch_tools",
    "plan_patch",
]

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"
MAX_FILE_BYTES = 10 * 1024 * 1024
"""Largest file an update loads (it is held in memory)."""

_HEREDOC = re.compile(r"""^(?:\S*\s+)?<<-?\s*['"]?(\w+)['"]?\s*$""")
# Codex's fold: the punctuation a model writes in place of the ASCII in the file.
_FOLD = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys(
            "\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000",
            " ",
        ),
    }
)


class PatchError(WorkspaceError):
    """A patch that cannot be parsed or applied; nothing was changed."""

    code = "patch_error"


@dataclass
class Chunk:
    """One ``@@`` section of an update."""

    context: str | None
    """The line after ``@@ ``, found before the chunk's lines; None for a bare ``@@``."""
    ops: list[tuple[str, str]] = field(default_factory=list)
    """The chunk's lines in order: (``" "`` context, ``"-"`` removed or ``"+"`` added, text)."""
    end_of_file: bool = False
    """The chunk ends with ``*** End of File``: it belongs at the file's end."""
    line: int = 0
    """Where the chunk starts in the patch (1-based), for messages."""

    @property
    def old(self) -> list[str]:
        """Context and removed lines: what the file has now."""
        return [text for kind, text in self.ops if kind != "+"]

    @property
    def new(self) -> list[str]:
        """Context and added lines: what it has after."""
        return [text for kind, text in self.ops if kind != "-"]

    @property
    def added(self) -> int:
        """``+`` lines."""
        return sum(kind == "+" for kind, _ in self.ops)

    @property
    def removed(self) -> int:
        """``-`` lines."""
        return sum(kind == "-" for kind, _ in self.ops)


@dataclass
class AddFile:
    """``*** Add File``: a new file with these lines."""

    path: str
    lines: list[str]


@dataclass
class DeleteFile:
    """``*** Delete File``."""

    path: str


@dataclass
class UpdateFile:
    """``*** Update File``, maybe moved (``*** Move to``)."""

    path: str
    move_to: str | None
    chunks: list[Chunk]


Hunk = AddFile | DeleteFile | UpdateFile


# --- parsing --------------------------------------------------------------------------


def _body(text: str) -> list[str]:
    """The patch's lines, forgiving the wrappers models add (a heredoc, a code fence)."""
    lines = text.strip().splitlines()
    if lines and lines[0].startswith("```"):
        lines = lines[1:-1] if lines[-1].strip() == "```" else lines[1:]
    if len(lines) >= 2 and (heredoc := _HEREDOC.match(lines[0].strip())):
        if lines[-1].strip() == heredoc.group(1):
            lines = lines[1:-1]
    return lines


def parse_patch(text: str) -> list[Hunk]:
    """The hunks of a patch; PatchError naming the line when it is malformed."""
    lines = _body(text)
    if not lines or lines[0].strip() != BEGIN:
        raise PatchError(f"the patch must start with {BEGIN!r}")
    if lines[-1].strip() != END:
        raise PatchError(f"the patch must end with {END!r}")
    end = len(lines) - 1
    hunks: list[Hunk] = []
    index = 1
    while index < end:
        header = lines[index].strip()
        if not header:
            index += 1
            continue
        if header.startswith(ADD):
            path = _path(header[len(ADD) :], index)
            index += 1
            content = []
            while index < end and lines[index].startswith("+"):
                content.append(lines[index][1:])
                index += 1
            hunks.append(AddFile(path, content))
        elif header.startswith(DELETE):
            hunks.append(DeleteFile(_path(header[len(DELETE) :], index)))
            index += 1
        elif header.startswith(UPDATE):
            path = _path(header[len(UPDATE) :], index)
            index += 1
            move_to = None
            if index < end and lines[index].strip().startswith(MOVE):
                move_to = _path(lines[index].strip()[len(MOVE) :], index)
                index += 1
            chunks: list[Chunk] = []
            while index < end:
                if not lines[index].strip():
                    index += 1  # blank lines between chunks
                    continue
                if lines[index].startswith("***"):
                    break
                chunk, index = _chunk(lines, index, end, first=not chunks)
                chunks.append(chunk)
            if not chunks:
                raise PatchError(f"line {index}: *** Update File: {path} has no chunk")
            hunks.append(UpdateFile(path, move_to, chunks))
        else:
            raise PatchError(
                f"line {index + 1}: expected '*** Add File: ', '*** Update File: ' or "
                f"'*** Delete File: ', got {lines[index]!r}"
            )
    if not hunks:
        raise PatchError("the patch changes no file")
    return hunks


def _path(raw: str, index: int) -> str:
    path = raw.strip()
    try:
        parts = split_path(path)
    except WorkspaceError as exc:
        raise PatchError(f"line {index + 1}: {exc.message}") from None
    if not parts:
        raise PatchError(f"line {index + 1}: the file path is missing")
    return show(parts)


def _chunk(lines: list[str], index: int, end: int, *, first: bool) -> tuple[Chunk, int]:
    line = lines[index]
    chunk = Chunk(context=None, line=index + 1)
    if line.rstrip() == "@@":
        index += 1
    elif line.startswith("@@ "):
        chunk.context = line[3:]
        index += 1
    elif not first:
        raise PatchError(f"line {index + 1}: expected an @@ line to start a chunk, got {line!r}")
    count = 0
    while index < end:
        line = lines[index]
        if line.rstrip() == END_OF_FILE:
            chunk.end_of_file = True
            index += 1
            break
        if line == "":
            chunk.ops.append((" ", ""))
        elif line[0] in " -+":
            chunk.ops.append((line[0], line[1:]))
        elif count == 0:
            raise PatchError(
                f"line {index + 1}: a chunk line starts with ' ', '-' or '+', got {line!r}"
            )
        else:
            break  # the next chunk or file
        count += 1
        index += 1
    if count == 0:
        raise PatchError(f"line {chunk.line}: the chunk has no lines")
    return chunk, index


# --- applying -------------------------------------------------------------------------


def _fold(line: str) -> str:
    return line.strip().translate(_FOLD)


_PASSES: tuple[Callable[[str], str], ...] = (lambda s: s, str.rstrip, str.strip, _fold)


def _seek(lines: Sequence[str], pattern: Sequence[str], start: int, eof: bool) -> int | None:
    """Where ``pattern`` is in ``lines`` at or after ``start``, each pass looser than the last."""
    if not pattern:
        return start
    size = len(pattern)
    last = len(lines) - size
    if last < start:
        return None
    passes = [([norm(line) for line in lines], [norm(p) for p in pattern]) for norm in _PASSES]
    if eof:
        # The tail first: "End of File" says where the chunk belongs.
        for normed, want in passes:
            if normed[last:] == want:
                return last
    for normed, want in passes:
        # Linear in the lines (a slice compared at every start was lines x chunk lines).
        for at in find_runs(normed, want, start):
            return at
    return None


def apply_chunks(text: str, chunks: Sequence[Chunk], path: str) -> str:
    """``text`` with the chunks applied in order; PatchError naming the chunk that misses."""
    eol = "\r\n" if "\r\n" in text and text.count("\r\n") == text.count("\n") else "\n"
    lines = text.replace("\r\n", "\n").split("\n") if eol == "\r\n" else text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the empty "line" after the last newline
    replacements: list[tuple[int, int, list[str]]] = []
    cursor = 0
    for number, chunk in enumerate(chunks, 1):
        where = f"*** Update File: {path}, chunk {number} (patch line {chunk.line})"
        if chunk.context is not None:
            found = _seek(lines, [chunk.context], cursor, False)
            if found is None:
                raise PatchError(
                    f"{where}: the @@ line {chunk.context!r} is not in the file"
                    + (" after the previous chunk" if cursor else "")
                )
            cursor = found + 1
        ops = chunk.ops
        if not chunk.old:
            at = cursor if chunk.context is not None else len(lines)
            replacements.append((at, 0, chunk.new))
            continue
        found = _seek(lines, chunk.old, cursor, chunk.end_of_file)
        if found is None and ops[-1] == (" ", ""):
            # A trailing empty context line is often just the patch's last newline.
            ops = ops[:-1]
            found = _seek(lines, [t for k, t in ops if k != "+"], cursor, chunk.end_of_file)
        if found is None:
            shown = "\n".join(chunk.old[:30])
            raise PatchError(
                f"{where}: these lines are not in the file"
                + (" after the previous chunk" if cursor else "")
                + f" (read it again and copy them exactly):\n{shown}"
            )
        # Context lines stay as the file has them: a match that ignored whitespace or
        # folded punctuation must not rewrite the lines the patch only pointed at.
        new: list[str] = []
        at = found
        for kind, text in ops:
            if kind == " ":
                new.append(lines[at])
            if kind != "+":
                at += 1
            if kind == "+":
                new.append(text)
        replacements.append((found, at - found, new))
        cursor = at
    replacements.sort(key=lambda r: (r[0], r[1]))
    for (start, size, _), (after, _, _) in itertools.pairwise(replacements):
        if start + size > after:
            raise PatchError(f"*** Update File: {path}: two chunks change the same lines")
    for start, size, new in reversed(replacements):
        lines[start : start + size] = new
    return eol.join(lines) + eol if lines else ""


def plan_patch(ws: Workspace, hunks: Sequence[Hunk]) -> tuple[list[FileChange], list[str]]:
    """The changes a patch makes (nothing is written) and a summary line per file."""
    changes: list[FileChange] = []
    summary: list[str] = []
    touched: set[str] = set()

    def claim(path: str) -> None:
        if path in touched:
            raise PatchError(f"{path} appears twice in the patch: give each file one section")
        touched.add(path)

    for hunk in hunks:
        if isinstance(hunk, AddFile):
            claim(hunk.path)
            if ws.kind(hunk.path) is not None:
                raise PatchError(
                    f"*** Add File: {hunk.path}: it exists; use *** Update File to change it"
                )
            content = "".join(line + "\n" for line in hunk.lines)
            changes.append(FileChange(hunk.path, None, content.encode("utf-8")))
            summary.append(f"A {hunk.path} (+{len(hunk.lines)})")
        elif isinstance(hunk, DeleteFile):
            claim(hunk.path)
            before = _existing(ws, hunk.path, "Delete File")
            changes.append(FileChange(hunk.path, before, None))
            summary.append(f"D {hunk.path}")
        else:
            claim(hunk.path)
            before = _existing(ws, hunk.path, "Update File")
            try:
                text = before.decode("utf-8")
            except UnicodeDecodeError:
                raise PatchError(f"*** Update File: {hunk.path}: not UTF-8 text") from None
            after = apply_chunks(text, hunk.chunks, hunk.path).encode("utf-8")
            counts = (
                f"(+{sum(c.added for c in hunk.chunks)} -{sum(c.removed for c in hunk.chunks)})"
            )
            if hunk.move_to is not None and hunk.move_to != hunk.path:
                claim(hunk.move_to)
                if ws.kind(hunk.move_to) is not None:
                    raise PatchError(f"*** Move to: {hunk.move_to}: it exists already")
                changes.append(FileChange(hunk.path, before, None))
                changes.append(FileChange(hunk.move_to, None, after, source=hunk.path))
                summary.append(f"R {hunk.path} -> {hunk.move_to} {counts}")
            else:
                changes.append(FileChange(hunk.path, before, after))
                summary.append(f"M {hunk.path} {counts}")
    return changes, summary


def _existing(ws: Workspace, path: str, what: str) -> bytes:
    kind = ws.kind(path)
    if kind is None:
        raise PatchError(f"*** {what}: {path}: no such file")
    if kind != "file":
        raise PatchError(f"*** {what}: {path}: not a regular file ({kind})")
    try:
        return ws.read_bytes(path, limit=MAX_FILE_BYTES)
    except PatchError:
        raise
    except WorkspaceError as exc:
        raise PatchError(f"*** {what}: {path}: {exc.message}") from None


def apply_patch(ws: Workspace, text: str) -> str:
    """Parse, plan and commit a patch (blocking); the summary the model reads."""
    return _apply(ws, text, None)[0]


def _apply(
    ws: Workspace, text: str, known: dict[str, str | None] | None
) -> tuple[str, list[FileChange]]:
    """``apply_patch``, checked against the revisions the turn saw (``known``, unless
    None); the summary and the changes made."""
    hunks = parse_patch(text)
    try:
        changes, summary = plan_patch(ws, hunks)
        if known is not None:
            blind = {h.path for h in hunks if isinstance(h, DeleteFile)}
            Journal.check(changes, known, {show(split_path(p)) for p in blind})
        ws.commit(changes)
    except (PatchError, StaleFileError):
        raise
    except WorkspaceError as exc:  # a link in the way, the quota, a file changed meanwhile
        raise PatchError(f"the patch was not applied: {exc.message}") from None
    return "Applied the patch; nothing else changed:\n" + "\n".join(summary), changes


DESCRIPTION = (
    "Apply a patch to the workspace's files, all or nothing. Format: '*** Begin Patch', then "
    "for each file '*** Add File: PATH' with every line prefixed by '+', or '*** Delete File: "
    "PATH', or '*** Update File: PATH' (optionally followed by '*** Move to: NEWPATH') and "
    "chunks that each start with '@@' (or '@@ a line to find first') and list context lines "
    "prefixed by ' ', removed lines by '-' and added lines by '+', with 3 lines of context "
    "around each change; '*** End of File' ends a chunk that belongs at the file's end; "
    "finally '*** End Patch'. Paths are relative to the workspace."
)


def patch_tools(workspaces: Workspaces, journal: Journal | None = None) -> list[Tool]:
    """``apply_patch`` over ``workspaces`` (``journal``: shared with the file tools, so a
    patch is checked against what ``read_file`` read)."""
    journal = journal or Journal()

    async def apply_patch_tool(ctx: ToolContext, patch: str) -> str:
        """Apply a patch in the *** Begin Patch format.

        Args:
            patch: The whole patch, from '*** Begin Patch' to '*** End Patch'.
        """
        ws = workspaces.for_session(ctx.session_id)
        known = await journal.known(ctx)
        return await journal.apply(ctx, partial(_apply, ws, patch, known))

    return [Tool(apply_patch_tool, name="apply_patch", description=DESCRIPTION, writes=True)]
