"""A session's workspace: one directory per session, every file access confined to it.

Every worker mounts the same root (``REACTQ_WORKSPACE_ROOT``); a session's
directory under it is created on first use, so a session's turns see the same
files whichever worker runs them. The file tools (``reactq.bundles``) change it;
undo (``shared/file_undo.py``, on a worker or a producer that mounts the root)
puts changes back, both through this module.

Paths come from the model, so they are untrusted. Two layers keep them inside:

1. ``split_path`` judges the string: relative, ``/``-separated, no ``..``, no
   NUL or control characters, never the workspace's own ``.reactq`` folder.
2. Every access walks from the session directory one component at a time with
   ``openat``-style calls (``os.open(part, dir_fd=..., flags=O_NOFOLLOW)``),
   holding a descriptor of each directory on the way. There is no separate
   check to race: a component that is a symbolic link is refused by the same
   call that would have used it, even when it was swapped in mid-call. Walks
   (listing, globbing, searching, the quota's sum) never descend into a link.

Every change goes through one method, ``Workspace.commit``: it takes the whole
list of ``FileChange`` (each with the content it expects to replace), checks
them all and the quota, stages the new contents in ``.reactq/staging``, then
moves each into place with an atomic rename. Nothing is written before every
check passed, and a failure while placing restores what was placed. The file
tools' journal (``reactq.bundles.journal``) checks the list against what the
turn read (the stale-file guard), records it for undo and describes it in
``file_change`` events.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from reactq.shared.errors import ConfigError, ToolError
from reactq.shared.workspace_names import path_text_refusal, workspace_dir_name

__all__ = [
    "RESERVED",
    "Entry",
    "FileChange",
    "StagedFile",
    "Workspace",
    "WorkspaceError",
    "Workspaces",
    "session_dir_name",
    "split_path",
]

log = logging.getLogger("reactq.bundles")

RESERVED = ".reactq"
"""The workspace's own folder at its top (staged writes); no tool path may name it."""

# getattr: the module imports everywhere; Workspaces refuses to run without them.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC
# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0)
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
_SUPPORTED = (
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
_STAGING = (RESERVED, "staging")
# A staged file this old was left by a worker that died mid-write.
_STALE_STAGED_SECONDS = 6 * 3600


class WorkspaceError(ToolError):
    """A file tool refused a path or a change; the message says why, for the model."""

    code = "workspace_error"


class _NotFound(WorkspaceError):
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


def session_dir_name(session_id: str) -> str:
    """The directory name of a session's workspace (``workspace_dir_name``)."""
    if not session_id:
        raise WorkspaceError(
            "the file tools need a session: they run inside a turn (ToolContext.session_id)"
        )
    return workspace_dir_name(session_id)


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


@dataclass(frozen=True)
class FileChange:
    """One file's change, as ``Workspace.commit`` applies it.

    ``before`` is the content the change expects to find (None: the file must
    not exist) and ``after`` the content to leave (None: delete the file).
    """

    path: str
    """Relative to the workspace."""
    before: bytes | None
    """The content the file must have now; None when it must not exist."""
    after: bytes | StagedFile | None
    """The new content (bytes, or a file staged with ``Workspace.stage``); None to delete."""
    source: str | None = None
    """For a file a move creates: the path it moved from (deleted by another change of
    the same list); it only describes the change, for its ``file_change`` event."""
    parts: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = split_path(self.path)
        if not parts:
            raise WorkspaceError("a change needs a file path, not the workspace itself")
        if self.before is None and self.after is None:
            raise WorkspaceError(f"{self.path}: a change must create, update or delete")
        object.__setattr__(self, "parts", parts)
        object.__setattr__(self, "path", show(parts))

    @property
    def kind(self) -> str:
        """``add``, ``update`` or ``delete``."""
        if self.before is None:
            return "add"
        return "delete" if self.after is None else "update"

    @property
    def after_size(self) -> int:
        """Bytes the file has after the change (0 when deleted)."""
        if self.after is None:
            return 0
        return self.after.size if isinstance(self.after, StagedFile) else len(self.after)


class Workspaces:
    """Every session's workspace: a root directory and the per-session quota."""

    def __init__(self, root: str | os.PathLike[str], *, quota_bytes: int) -> None:
        if not _SUPPORTED:  # pragma: no cover - every POSIX system has them
            raise ConfigError("the file tools need a POSIX system (openat with O_NOFOLLOW)")
        if quota_bytes <= 0:
            raise ConfigError(f"the workspace quota must be > 0 bytes, got {quota_bytes}")
        # The root is the operator's (trusted) path; it may itself be a link to a mount.
        self.root = Path(root).expanduser().absolute()
        self.quota_bytes = quota_bytes

    def __repr__(self) -> str:
        return f"Workspaces(root={str(self.root)!r}, quota_bytes={self.quota_bytes})"

    def for_session(self, session_id: str) -> Workspace:
        """The workspace of one session (nothing is created before it is used)."""
        return Workspace(self.root, session_id, self.quota_bytes)


class Workspace:
    """One session's directory; every method is blocking I/O (call it off the event loop)."""

    def __init__(self, root: Path, session_id: str, quota_bytes: int) -> None:
        self.root = root
        self.session_id = session_id
        self.name = session_dir_name(session_id)
        self.quota_bytes = quota_bytes

    @property
    def path(self) -> Path:
        """The session's directory on this machine (never shown to the model)."""
        return self.root / self.name

    # --- reading ----------------------------------------------------------------------

    def read_bytes(self, path: str, *, limit: int | None = None) -> bytes:
        """A regular file's content; WorkspaceError when missing, linked, or over ``limit``."""
        parts = _file_parts(path)
        with self._top() as top, _opened_file(top, parts) as (fd, info):
            if limit is not None and info.st_size > limit:
                raise WorkspaceError(
                    f"{show(parts)} is {info.st_size} bytes, over the {limit}-byte limit"
                )
            return _read_all(fd, limit)

    def read_text(self, path: str, *, limit: int | None = None) -> str:
        """A file's content as UTF-8 text (strict: an edit must write back what it read)."""
        data = self.read_bytes(path, limit=limit)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise WorkspaceError(f"{show(split_path(path))} is not UTF-8 text") from None

    @contextmanager
    def open_read(self, path: str) -> Iterator[tuple[int, os.stat_result]]:
        """A regular file's descriptor and its stat, for reading it piece by piece."""
        parts = _file_parts(path)
        with self._top() as top, _opened_file(top, parts) as opened:
            yield opened

    def current(self, path: str) -> bytes | None:
        """A file's content, or None when it does not exist (a link or a folder is refused)."""
        parts = _file_parts(path)
        with self._top() as top:
            return _current(top, parts)[0]

    def kind(self, path: str) -> str | None:
        """``file``, ``dir``, ``link``, ``other``, or None when nothing is there."""
        parts = split_path(path)
        if not parts:
            return "dir"
        with self._top() as top:
            try:
                fd = _descend(top, parts[:-1])
            except _NotFound:
                return None
            try:
                info = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return None
            finally:
                os.close(fd)
        return _kind(info.st_mode)

    def walk(
        self, path: str = ".", *, max_depth: int | None = None, limit: int | None = None
    ) -> tuple[list[Entry], bool]:
        """Everything under ``path`` (depth-first, sorted by name), never through a link.

        ``max_depth`` 1 lists ``path`` itself; returns the entries and whether
        ``limit`` cut the list short. ``path`` may name a file (a list of one).
        """
        parts = split_path(path)
        entries: list[Entry] = []
        with self._top() as top:
            if parts:
                fd0 = _descend(top, parts[:-1])
                try:
                    info = os.stat(parts[-1], dir_fd=fd0, follow_symlinks=False)
                except FileNotFoundError:
                    raise _NotFound(f"no such file or directory: {show(parts)}") from None
                finally:
                    os.close(fd0)
                if not stat.S_ISDIR(info.st_mode):
                    kind = _kind(info.st_mode)
                    if kind == "link":
                        raise _link_refusal(show(parts))
                    return [Entry(show(parts), kind, _size(info))], False
            fd = _descend(top, parts)
            try:
                truncated = _walk_dir(fd, parts, 1, max_depth, limit, entries)
            finally:
                os.close(fd)
        return entries, truncated

    def usage(self) -> int:
        """Bytes of every regular file in the workspace (staged ones included)."""
        with self._top() as top:
            return _usage(top)

    def free_bytes(self) -> int:
        """What the quota leaves for new content."""
        return max(0, self.quota_bytes - self.usage())

    # --- changing -----------------------------------------------------------------------

    def stage(self) -> StagedFile:
        """An empty staged file, for content written piece by piece (then ``commit``)."""
        with self._top() as top:
            staging = _descend(top, _STAGING, create=True)
        try:
            _sweep(staging)
            name = f"tmp-{secrets.token_hex(8)}"
            fd = os.open(name, _NEW_FLAGS, 0o644, dir_fd=staging)
        except BaseException:
            os.close(staging)
            raise
        return StagedFile(staging, name, fd)

    def commit(self, changes: Sequence[FileChange]) -> None:
        """Apply every change, or none: the one way the file tools change the workspace.

        Each change's ``before`` must match the disk (else: changed since it was
        read), the quota must hold what grows, and a file to create must not
        exist. New contents are staged first; then each is moved into place
        (atomic rename; creation without replacing), and a failure restores
        what was already placed. Staged files passed in are consumed.
        """
        seen: set[tuple[str, ...]] = set()
        for change in changes:
            if change.parts in seen:
                raise WorkspaceError(f"{change.path} is changed twice in one go")
            seen.add(change.parts)
        if not changes:
            return
        with self._top() as top:
            modes: list[int | None] = []
            for change in changes:
                now, mode = _current(top, change.parts)
                if now != change.before:
                    if change.before is None:
                        raise WorkspaceError(f"{change.path} already exists")
                    if now is None:
                        raise WorkspaceError(f"{change.path} no longer exists")
                    raise WorkspaceError(
                        f"{change.path} changed on disk since it was read: read it again"
                    )
                modes.append(mode)
            grow = sum(c.after_size - len(c.before or b"") for c in changes)
            if grow > 0:
                used = _usage(top)
                if used + grow > self.quota_bytes:
                    raise WorkspaceError(
                        f"the workspace quota ({self.quota_bytes} bytes) would be passed: "
                        f"{used} bytes are used and this change adds {grow}"
                    )
            staged: list[StagedFile | None] = []
            ours: list[StagedFile] = []
            try:
                for change, mode in zip(changes, modes, strict=True):
                    if isinstance(change.after, bytes):
                        item = self.stage()
                        ours.append(item)
                        item.write(change.after)
                        item.finish(stat.S_IMODE(mode) if mode is not None else None)
                        staged.append(item)
                    elif isinstance(change.after, StagedFile):
                        change.after.finish(stat.S_IMODE(mode) if mode is not None else None)
                        staged.append(change.after)
                    else:
                        staged.append(None)
                _place_all(top, changes, staged)
            finally:
                for item in ours:
                    item.discard()
                for change in changes:
                    if isinstance(change.after, StagedFile):
                        change.after._consumed()

    # --- the session directory ---------------------------------------------------------

    @contextmanager
    def _top(self) -> Iterator[int]:
        """A descriptor of the session's directory, created on first use."""
        os.makedirs(self.root, exist_ok=True)
        root_fd = os.open(self.root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        try:
            with suppress(FileExistsError):
                os.mkdir(self.name, 0o700, dir_fd=root_fd)
            # A session directory replaced by a link is refused like any other link.
            fd = _open_dir(self.name, root_fd, ".")
        finally:
            os.close(root_fd)
        try:
            yield fd
        finally:
            os.close(fd)


# --- descriptor-level helpers (every walk goes through these) --------------------------


def _file_parts(path: str) -> tuple[str, ...]:
    parts = split_path(path)
    if not parts:
        raise WorkspaceError("give a file path, not the workspace itself")
    return parts


def _link_refusal(shown: str) -> WorkspaceError:
    return WorkspaceError(
        f"{shown}: a symbolic link is in the way, and the file tools never follow links"
    )


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


def _size(info: os.stat_result) -> int:
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def _open_dir(name: str, dir_fd: int, shown: str) -> int:
    """Open one directory component under ``dir_fd``, refusing a link."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise _NotFound(f"no such directory: {shown}") from None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
    # Which refusal: Linux answers ENOTDIR before ELOOP for a link opened as a directory.
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise _NotFound(f"no such directory: {shown}") from None
    if stat.S_ISLNK(info.st_mode):
        raise _link_refusal(shown)
    raise WorkspaceError(f"{shown} is not a directory")


def _descend(
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
            child = _open_dir(part, fd, show(parts[: index + 1]))
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def _opened_file(top: int, parts: tuple[str, ...]) -> Iterator[tuple[int, os.stat_result]]:
    """A regular file's read descriptor and stat, opened without following a link."""
    parent = _descend(top, parts[:-1])
    try:
        fd = os.open(parts[-1], _READ_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        raise _NotFound(f"no such file: {show(parts)}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_refusal(show(parts)) from None
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


def _read_all(fd: int, limit: int | None) -> bytes:
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


def _current(top: int, parts: tuple[str, ...]) -> tuple[bytes | None, int | None]:
    """(content, mode) of a file, or (None, None) when it (or a parent) does not exist."""
    try:
        parent = _descend(top, parts[:-1])
    except _NotFound:
        return None, None
    try:
        info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None, None
    finally:
        os.close(parent)
    if stat.S_ISLNK(info.st_mode):
        raise _link_refusal(show(parts))
    with _opened_file(top, parts) as (fd, opened):
        return _read_all(fd, None), opened.st_mode


def _scan(fd: int, *, skip_reserved: bool) -> list[tuple[str, os.stat_result]]:
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


def _walk_dir(
    fd: int,
    prefix: tuple[str, ...],
    depth: int,
    max_depth: int | None,
    limit: int | None,
    out: list[Entry],
) -> bool:
    """Append what is under ``fd`` to ``out`` in pre-order; True when ``limit`` cut it."""
    for name, info in _scan(fd, skip_reserved=not prefix):
        if limit is not None and len(out) >= limit:
            return True
        kind = _kind(info.st_mode)
        out.append(Entry(show((*prefix, name)), kind, _size(info)))
        if kind != "dir" or (max_depth is not None and depth >= max_depth):
            continue
        try:
            sub = _open_dir(name, fd, show((*prefix, name)))
        except WorkspaceError:
            continue  # replaced (by a link, say) since the listing: not followed
        try:
            if _walk_dir(sub, (*prefix, name), depth + 1, max_depth, limit, out):
                return True
        finally:
            os.close(sub)
    return False


def _usage(top: int) -> int:
    total = 0
    stack = [os.dup(top)]
    try:
        while stack:
            fd = stack.pop()
            try:
                for name, info in _scan(fd, skip_reserved=False):
                    if stat.S_ISREG(info.st_mode):
                        total += info.st_size
                    elif stat.S_ISDIR(info.st_mode):
                        with suppress(WorkspaceError):
                            stack.append(_open_dir(name, fd, name))
            finally:
                os.close(fd)
    finally:
        for fd in stack:
            os.close(fd)
    return total


def _sweep(staging: int) -> None:
    """Remove staged files a dead worker left behind."""
    cutoff = time.time() - _STALE_STAGED_SECONDS
    for name, info in _scan(staging, skip_reserved=False):
        if info.st_mtime < cutoff:
            with suppress(OSError):
                os.unlink(name, dir_fd=staging)


def _place_all(
    top: int, changes: Sequence[FileChange], staged: Sequence[StagedFile | None]
) -> None:
    """Move every staged content into place (or delete); undo the placed ones on failure."""
    placed: list[FileChange] = []
    made: list[tuple[str, ...]] = []
    try:
        for change, item in zip(changes, staged, strict=True):
            _place(top, change, item, made)
            placed.append(change)
    except BaseException:
        _restore(top, placed, made)
        raise


def _place(
    top: int, change: FileChange, item: StagedFile | None, made: list[tuple[str, ...]]
) -> None:
    parts = change.parts
    leaf = parts[-1]
    if item is None:
        parent = _descend(top, parts[:-1])
        try:
            os.unlink(leaf, dir_fd=parent)
        finally:
            os.close(parent)
        return
    parent = _descend(top, parts[:-1], create=True, made=made)
    try:
        if change.before is not None:
            os.rename(item.name, leaf, src_dir_fd=item.dir_fd, dst_dir_fd=parent)
            return
        # Create without replacing: a link fails if the name exists, atomically.
        try:
            os.link(
                item.name, leaf, src_dir_fd=item.dir_fd, dst_dir_fd=parent, follow_symlinks=False
            )
        except FileExistsError:
            raise WorkspaceError(f"{change.path} already exists") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
                raise
            # A filesystem without hard links: check, then rename (a narrow race).
            with suppress(FileNotFoundError):
                os.stat(leaf, dir_fd=parent, follow_symlinks=False)
                raise WorkspaceError(f"{change.path} already exists") from None
            os.rename(item.name, leaf, src_dir_fd=item.dir_fd, dst_dir_fd=parent)
            return
        os.unlink(item.name, dir_fd=item.dir_fd)
    finally:
        os.close(parent)


def _restore(top: int, placed: Sequence[FileChange], made: Sequence[tuple[str, ...]]) -> None:
    """Best effort: put back what ``placed`` changed, remove the folders made for it."""
    for change in reversed(placed):
        try:
            parent = _descend(top, change.parts[:-1], create=change.before is not None)
            try:
                if change.before is None:
                    os.unlink(change.parts[-1], dir_fd=parent)
                else:
                    name = f"tmp-{secrets.token_hex(8)}"
                    fd = os.open(name, _NEW_FLAGS, 0o644, dir_fd=parent)
                    try:
                        os.write(fd, change.before)
                    finally:
                        os.close(fd)
                    os.rename(name, change.parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            finally:
                os.close(parent)
        except Exception:
            log.warning("could not restore %s after a failed change", change.path, exc_info=True)
    for parts in reversed(made):
        with suppress(Exception):
            parent = _descend(top, parts[:-1])
            try:
                os.rmdir(parts[-1], dir_fd=parent)
            finally:
                os.close(parent)
