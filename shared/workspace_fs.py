"""The descriptor-level walk every workspace access goes through (``shared/workspace.py``).

A path's string is judged by ``split_path``; then every access walks from the
session directory one component at a time (``openat``-style, ``O_NOFOLLOW``),
holding a descriptor of each directory on the way, so a symbolic link is refused
by the very call that would have used it. ``StagedFile`` is new content written in
the private staging folder, waiting for ``Workspace.commit``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from reactq.shared.errors import ToolError
from reactq.shared.workspace_names import path_text_refusal

__all__ = [
    "DIR_FLAGS",
    "MAX_PATH_CHARS",
    "NEW_FLAGS",
    "READ_FLAGS",
    "RESERVED",
    "STAGING",
    "SUPPORTED",
    "Entry",
    "NotFound",
    "StagedFile",
    "WorkspaceError",
    "current_content",
    "descend",
    "file_parts",
    "kind_of",
    "link_refusal",
    "open_dir",
    "opened_file",
    "read_all",
    "scan",
    "show",
    "size_of",
    "split_path",
    "sweep",
    "walk_dir",
]

RESERVED = ".reactq"
"""The workspace's own folder at its top (staged writes); no tool path may name it."""

# getattr: the module imports everywhere; Workspaces refuses to run without them.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC
# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
READ_FLAGS = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0)
NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
SUPPORTED = (
    bool(_NOFOLLOW and _DIRECTORY)
    and {
        os.open,
        os.mkdir,
        os.rename,
        os.link,
        os.unlink,
        os.rmdir,
        os.stat,
    }
    <= os.supports_dir_fd
)

MAX_PATH_CHARS = 1024
STAGING = (RESERVED, "staging")
# A staged file this old was left by a worker that died mid-write.
_STALE_STAGED_SECONDS = 6 * 3600


class WorkspaceError(ToolError):
    """A file tool refused a path or a change; the message says why, for the model."""

    code = "workspace_error"


class NotFound(WorkspaceError):
    """A path (or a directory on its way) does not exist."""


def split_path(path: str) -> tuple[str, ...]:
    """The components of a workspace-relative path; WorkspaceError when it could leave.

    ``""`` and ``"."`` are the workspace itself (no components); ``a//b`` and
    ``./a`` are accepted and normalised.
    """
    if not isinstance(path, str):
        raise WorkspaceError("the path must be a string")
    if len(path) > MAX_PATH_CHARS:
        raise WorkspaceError(f"the path is longer than {MAX_PATH_CHARS} characters")
    if refusal := path_text_refusal(path):
        raise WorkspaceError(refusal)
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        raise WorkspaceError("the path may not contain NUL or control characters")
    if "\\" in path:
        raise WorkspaceError(f"{path!r}: separate path components with '/', not backslashes")
    if path.startswith("/") or path.startswith("~") or re.match(r"[A-Za-z]:(/|$)", path):
        raise WorkspaceError(
            f"{path!r} is absolute: give a path relative to the workspace (like 'src/app.py')"
        )
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise WorkspaceError(f"{path!r}: '..' is not allowed; paths stay inside the workspace")
    if parts and parts[0] == RESERVED:
        raise WorkspaceError(f"{path!r}: {RESERVED}/ is the workspace's own folder")
    if any(len(p.encode("utf-8", "surrogateescape")) > 255 for p in parts):
        raise WorkspaceError(f"{path!r}: a path component is longer than 255 bytes")
    return parts


def show(parts: Sequence[str]) -> str:
    """A path's components as the model reads them (``.`` for the workspace itself)."""
    return "/".join(parts) or "."


@dataclass(frozen=True, slots=True)
class Entry:
    """One thing found in the workspace."""

    path: str
    """Relative to the workspace, ``/``-separated."""
    kind: str
    """``file``, ``dir``, ``link`` (never followed) or ``other`` (a FIFO, a socket...)."""
    size: int
    """Bytes, for a file; 0 otherwise."""


class StagedFile:
    """New content written in the workspace's staging folder; ``commit`` moves it into place.

    Used for content too large to hold in memory (a download). Write with
    ``write``; ``discard`` removes it (a no-op once committed).
    """

    def __init__(self, dir_fd: int, name: str, fd: int) -> None:
        self.dir_fd = dir_fd
        self.name = name
        self._fd: int | None = fd
        self.size = 0
        """Bytes written so far."""
        self._hash = hashlib.sha256()

    def write(self, data: bytes) -> None:
        """Append ``data`` (blocking: call it off the event loop)."""
        if self._fd is None:
            raise WorkspaceError("the staged file is closed")
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self.size += len(data)
        self._hash.update(data)

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of what was written so far: the content's revision."""
        return self._hash.hexdigest()

    def finish(self, mode: int | None = None) -> None:
        """Flush the content to disk and close it (``commit`` does it when needed)."""
        if self._fd is None:
            return
        try:
            if mode is not None:
                os.fchmod(self._fd, mode)
            # Durable before the rename makes it visible: a crash then leaves the
            # old file or the new one, never an empty one.
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        """Remove the staged content (a no-op once it was moved into place)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.dir_fd >= 0:
            with suppress(FileNotFoundError):
                os.unlink(self.name, dir_fd=self.dir_fd)
            os.close(self.dir_fd)
            self.dir_fd = -1

    def _consumed(self) -> None:
        """The content is in place: only the staging folder's descriptor remains."""
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1


def file_parts(path: str) -> tuple[str, ...]:
    """``split_path`` for a path that must name a file (not the workspace itself)."""
    parts = split_path(path)
    if not parts:
        raise WorkspaceError("give a file path, not the workspace itself")
    return parts


def link_refusal(shown: str) -> WorkspaceError:
    """The error for a symbolic link met on the way."""
    return WorkspaceError(
        f"{shown}: a symbolic link is in the way, and the file tools never follow links"
    )


def kind_of(mode: int) -> str:
    """``file``, ``dir``, ``link`` or ``other``, from a stat's mode."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


def size_of(info: os.stat_result) -> int:
    """Bytes of a regular file; 0 for anything else."""
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def open_dir(name: str, dir_fd: int, shown: str) -> int:
    """Open one directory component under ``dir_fd``, refusing a link."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise NotFound(f"no such directory: {shown}") from None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
    # Which refusal: Linux answers ENOTDIR before ELOOP for a link opened as a directory.
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise NotFound(f"no such directory: {shown}") from None
    if stat.S_ISLNK(info.st_mode):
        raise link_refusal(shown)
    raise WorkspaceError(f"{shown} is not a directory")


def descend(
    top: int,
    parts: Sequence[str],
    *,
    create: bool = False,
    made: list[tuple[str, ...]] | None = None,
) -> int:
    """A new descriptor of the directory ``parts`` under ``top``, walked one component at
    a time; ``create`` makes missing ones (recorded in ``made``)."""
    fd = os.dup(top)
    try:
        for index, part in enumerate(parts):
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if made is not None:
                        made.append(tuple(parts[: index + 1]))
                except FileExistsError:
                    pass
            child = open_dir(part, fd, show(parts[: index + 1]))
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def opened_file(top: int, parts: tuple[str, ...]) -> Iterator[tuple[int, os.stat_result]]:
    """A regular file's read descriptor and stat, opened without following a link."""
    parent = descend(top, parts[:-1])
    try:
        fd = os.open(parts[-1], READ_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        raise NotFound(f"no such file: {show(parts)}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise link_refusal(show(parts)) from None
        raise
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise WorkspaceError(f"{show(parts)} is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise WorkspaceError(f"{show(parts)} is not a regular file")
        # A second name may live outside the workspace (a hard link planted by other
        # means), so only single-link files are read; checked on the open file.
        if info.st_nlink != 1:
            raise WorkspaceError(f"{show(parts)} has several hard links; it is not read")
        yield fd, info
    finally:
        os.close(fd)


def read_all(fd: int, limit: int | None) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if limit is not None and total > limit:  # it grew after the fstat
            raise WorkspaceError(f"the file grew over the {limit}-byte limit while read")
        chunks.append(chunk)


def current_content(top: int, parts: tuple[str, ...]) -> tuple[bytes | None, int | None]:
    """(content, mode) of a file, or (None, None) when it (or a parent) does not exist."""
    try:
        parent = descend(top, parts[:-1])
    except NotFound:
        return None, None
    try:
        info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None, None
    finally:
        os.close(parent)
    if stat.S_ISLNK(info.st_mode):
        raise link_refusal(show(parts))
    with opened_file(top, parts) as (fd, opened):
        return read_all(fd, None), opened.st_mode


def scan(fd: int, *, skip_reserved: bool) -> list[tuple[str, os.stat_result]]:
    """A directory's entries (name, lstat), sorted by name."""
    out = []
    with os.scandir(fd) as it:
        for entry in it:
            if skip_reserved and entry.name == RESERVED:
                continue
            with suppress(FileNotFoundError):  # removed since the listing
                out.append((entry.name, entry.stat(follow_symlinks=False)))
    out.sort(key=lambda item: item[0])
    return out


def walk_dir(
    fd: int,
    prefix: tuple[str, ...],
    depth: int,
    max_depth: int | None,
    limit: int | None,
    out: list[Entry],
) -> bool:
    """Append what is under ``fd`` to ``out`` in pre-order; True when ``limit`` cut it."""
    for name, info in scan(fd, skip_reserved=not prefix):
        if limit is not None and len(out) >= limit:
            return True
        kind = kind_of(info.st_mode)
        out.append(Entry(show((*prefix, name)), kind, size_of(info)))
        if kind != "dir" or (max_depth is not None and depth >= max_depth):
            continue
        try:
            sub = open_dir(name, fd, show((*prefix, name)))
        except WorkspaceError:
            continue  # replaced (by a link, say) since the listing: not followed
        try:
            if walk_dir(sub, (*prefix, name), depth + 1, max_depth, limit, out):
                return True
        finally:
            os.close(sub)
    return False


def sweep(staging: int) -> None:
    """Remove staged files a dead worker left behind."""
    cutoff = time.time() - _STALE_STAGED_SECONDS
    for name, info in scan(staging, skip_reserved=False):
        if info.st_mtime < cutoff:
            with suppress(OSError):
                os.unlink(name, dir_fd=staging)
