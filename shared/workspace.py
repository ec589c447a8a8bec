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
them all and the quota (bytes and inodes, folders included:
``shared/workspace_quota.py``), stages the new contents in ``.reactq/staging``,
journals its intent, then moves each into place with an atomic rename. Nothing
is written before every check passed, and a failure while placing restores what
was placed; a process killed while placing leaves its journal, and the next use
of the workspace finishes the commit (``shared/workspace_intent.py``). Commits
hold the workspace's lock. The file tools' journal (``reactq.bundles.journal``)
checks the list against what the turn read (the stale-file guard), records it
for undo and describes it in ``file_change`` events.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from reactq.shared.errors import ConfigError
from reactq.shared.workspace_fs import (
    NEW_FLAGS,
    RESERVED,
    STAGING,
    SUPPORTED,
    Entry,
    NotFound,
    StagedFile,
    WorkspaceError,
    current_content,
    descend,
    file_parts,
    kind_of,
    link_refusal,
    open_dir,
    opened_file,
    read_all,
    show,
    size_of,
    split_path,
    sweep,
    walk_dir,
)
from reactq.shared.workspace_intent import (
    Step,
    digest,
    drop_journal,
    journal_pending,
    locked,
    place_all,
    recover,
    write_journal,
)
from reactq.shared.workspace_names import workspace_dir_name
from reactq.shared.workspace_quota import Usage, growth, measure, refusal, trim

__all__ = [
    "RESERVED",
    "Entry",
    "FileChange",
    "StagedFile",
    "Workspace",
    "WorkspaceError",
    "Workspaces",
    "session_dir_name",
    "show",
    "split_path",
]

log = logging.getLogger("reactq.bundles")

DEFAULT_MAX_INODES = 20_000
"""Files and folders a workspace may hold, unless ``Workspaces`` says otherwise."""
# getattr: the module imports everywhere; Workspaces refuses to run without them.
_CLOCK_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def session_dir_name(session_id: str) -> str:
    """The directory name of a session's workspace (``workspace_dir_name``)."""
    if not session_id:
        raise WorkspaceError(
            "the file tools need a session: they run inside a turn (ToolContext.session_id)"
        )
    return workspace_dir_name(session_id)


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

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        quota_bytes: int,
        max_inodes: int = DEFAULT_MAX_INODES,
    ) -> None:
        if not SUPPORTED:  # pragma: no cover - every POSIX system has them
            raise ConfigError("the file tools need a POSIX system (openat with O_NOFOLLOW)")
        if quota_bytes <= 0:
            raise ConfigError(f"the workspace quota must be > 0 bytes, got {quota_bytes}")
        if max_inodes <= 0:
            raise ConfigError(f"the workspace's inode limit must be > 0, got {max_inodes}")
        # The root is the operator's (trusted) path; it may itself be a link to a mount.
        self.root = Path(root).expanduser().absolute()
        self.quota_bytes = quota_bytes
        self.max_inodes = max_inodes

    def __repr__(self) -> str:
        return (
            f"Workspaces(root={str(self.root)!r}, quota_bytes={self.quota_bytes}, "
            f"max_inodes={self.max_inodes})"
        )

    def for_session(self, session_id: str) -> Workspace:
        """The workspace of one session (nothing is created before it is used)."""
        return Workspace(self.root, session_id, self.quota_bytes, self.max_inodes)


class Workspace:
    """One session's directory; every method is blocking I/O (call it off the event loop)."""

    def __init__(
        self,
        root: Path,
        session_id: str,
        quota_bytes: int,
        max_inodes: int = DEFAULT_MAX_INODES,
    ) -> None:
        self.root = root
        self.session_id = session_id
        self.name = session_dir_name(session_id)
        self.quota_bytes = quota_bytes
        self.max_inodes = max_inodes

    @property
    def path(self) -> Path:
        """The session's directory on this machine (never shown to the model)."""
        return self.root / self.name

    # --- reading ----------------------------------------------------------------------

    def read_bytes(self, path: str, *, limit: int | None = None) -> bytes:
        """A regular file's content; WorkspaceError when missing, linked, or over ``limit``."""
        parts = file_parts(path)
        with self._top() as top, opened_file(top, parts) as (fd, info):
            if limit is not None and info.st_size > limit:
                raise WorkspaceError(
                    f"{show(parts)} is {info.st_size} bytes, over the {limit}-byte limit"
                )
            return read_all(fd, limit)

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
        parts = file_parts(path)
        with self._top() as top, opened_file(top, parts) as opened:
            yield opened

    def current(self, path: str) -> bytes | None:
        """A file's content, or None when it does not exist (a link or a folder is refused)."""
        parts = file_parts(path)
        with self._top() as top:
            return current_content(top, parts)[0]

    def kind(self, path: str) -> str | None:
        """``file``, ``dir``, ``link``, ``other``, or None when nothing is there."""
        parts = split_path(path)
        if not parts:
            return "dir"
        with self._top() as top:
            try:
                fd = descend(top, parts[:-1])
            except NotFound:
                return None
            try:
                info = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return None
            finally:
                os.close(fd)
        return kind_of(info.st_mode)

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
                fd0 = descend(top, parts[:-1])
                try:
                    info = os.stat(parts[-1], dir_fd=fd0, follow_symlinks=False)
                except FileNotFoundError:
                    raise NotFound(f"no such file or directory: {show(parts)}") from None
                finally:
                    os.close(fd0)
                if not stat.S_ISDIR(info.st_mode):
                    kind = kind_of(info.st_mode)
                    if kind == "link":
                        raise link_refusal(show(parts))
                    return [Entry(show(parts), kind, size_of(info))], False
            fd = descend(top, parts)
            try:
                truncated = walk_dir(fd, parts, 1, max_depth, limit, entries)
            finally:
                os.close(fd)
        return entries, truncated

    def usage(self) -> int:
        """Bytes the quota counts: every file's size, every folder's ``DIR_BYTES`` (staged
        files included)."""
        return self.measure().bytes

    def measure(self) -> Usage:
        """Bytes and inodes, as the quota counts them."""
        with self._top() as top:
            return measure(top)

    def free_bytes(self) -> int:
        """What the quota leaves for new content."""
        return max(0, self.quota_bytes - self.usage())

    def over_quota(self) -> bool:
        """Whether the workspace holds more than its quota (bytes or inodes)."""
        used = self.measure()
        return used.bytes > self.quota_bytes or used.inodes > self.max_inodes

    def clock(self) -> int:
        """The filesystem's time now (ns), as it stamps what changes after: ``trim``'s
        ``since``. Strictly later than anything changed before the call: the kernel stamps
        files from a coarse clock (a tick of some ms), so it waits for the next tick."""
        with self._top() as top:
            private = descend(top, (RESERVED,), create=True)
            try:
                fd = os.open("clock", _CLOCK_FLAGS, 0o600, dir_fd=private)
            finally:
                os.close(private)
            try:
                os.utime(fd)
                before = os.fstat(fd).st_ctime_ns
                deadline = time.monotonic() + 1.0
                while True:
                    os.utime(fd)
                    now = os.fstat(fd).st_ctime_ns
                    if now > before or time.monotonic() > deadline:
                        return now
                    time.sleep(0.001)
            finally:
                os.close(fd)

    def trim(self, since_ns: int) -> list[str]:
        """Bring a workspace over its quota back within it by removing what changed since
        ``since_ns`` (``clock``), newest first; the paths removed (none when within)."""
        with self._top() as top, locked(top):
            return trim(top, since_ns, self.quota_bytes, self.max_inodes)

    # --- changing -----------------------------------------------------------------------

    def stage(self) -> StagedFile:
        """An empty staged file, for content written piece by piece (then ``commit``)."""
        with self._top() as top:
            return _stage(top)

    def commit(self, changes: Sequence[FileChange]) -> None:
        """Apply every change, or none: the one way the file tools change the workspace.

        Each change's ``before`` must match the disk (else: changed since it was
        read), the quota must hold what grows, and a file to create must not
        exist. New contents are staged first; the intent is journalled
        (``workspace_intent``); then each is moved into place (atomic rename;
        creation without replacing), and a failure restores what was already
        placed. The workspace's lock is held throughout. Staged files passed in
        are consumed.
        """
        seen: set[tuple[str, ...]] = set()
        for change in changes:
            if change.parts in seen:
                raise WorkspaceError(f"{change.path} is changed twice in one go")
            seen.add(change.parts)
        if not changes:
            return
        with self._top() as top, locked(top):
            recover(top)  # a journal left by a process that died between our look and the lock
            modes = self._check(top, changes)
            staged: list[StagedFile | None] = []
            ours: list[StagedFile] = []
            try:
                for change, mode in zip(changes, modes, strict=True):
                    if isinstance(change.after, bytes):
                        item = _stage(top)
                        ours.append(item)
                        item.write(change.after)
                        item.finish(stat.S_IMODE(mode) if mode is not None else None)
                        staged.append(item)
                    elif isinstance(change.after, StagedFile):
                        change.after.finish(stat.S_IMODE(mode) if mode is not None else None)
                        staged.append(change.after)
                    else:
                        staged.append(None)
                steps = [
                    Step(
                        change.parts,
                        item.name if item is not None else None,
                        change.before is None,
                        None if change.before is None else digest(change.before),
                    )
                    for change, item in zip(changes, staged, strict=True)
                ]
                staging = descend(top, STAGING, create=True)
                try:
                    write_journal(top, staging, steps)
                    place_all(top, staging, steps, [c.before for c in changes])
                finally:
                    # Whole, put back, or never begun (a journal half-written): nothing
                    # is left to roll forward, and our staged files go next.
                    try:
                        drop_journal(top)
                    finally:
                        os.close(staging)
            finally:
                for item in ours:
                    item.discard()
                for change in changes:
                    if isinstance(change.after, StagedFile):
                        change.after._consumed()

    def _check(self, top: int, changes: Sequence[FileChange]) -> list[int | None]:
        """Every change's ``before`` against the disk, then the quota; the files' modes."""
        modes: list[int | None] = []
        for change in changes:
            now, mode = current_content(top, change.parts)
            if now != change.before:
                if change.before is None:
                    raise WorkspaceError(f"{change.path} already exists")
                if now is None:
                    raise WorkspaceError(f"{change.path} no longer exists")
                raise WorkspaceError(
                    f"{change.path} changed on disk since it was read: read it again"
                )
            modes.append(mode)
        sizes = [
            (
                c.parts,
                None if c.before is None else len(c.before),
                None if c.after is None else c.after_size,
            )
            for c in changes
        ]
        grow = growth(top, sizes)
        if grow.bytes > 0 or grow.inodes > 0:
            reason = refusal(measure(top), grow, self.quota_bytes, self.max_inodes)
            if reason is not None:
                raise WorkspaceError(reason)
        return modes

    # --- the session directory ---------------------------------------------------------

    @contextmanager
    def _top(self) -> Iterator[int]:
        """A descriptor of the session's directory, created on first use; a commit a dead
        process left half-placed is finished first, whatever the caller came for."""
        os.makedirs(self.root, exist_ok=True)
        root_fd = os.open(self.root, _ROOT_FLAGS)
        try:
            with suppress(FileExistsError):
                os.mkdir(self.name, 0o700, dir_fd=root_fd)
            # A session directory replaced by a link is refused like any other link.
            fd = open_dir(self.name, root_fd, ".")
        finally:
            os.close(root_fd)
        try:
            if journal_pending(fd):
                with locked(fd):
                    recover(fd)
            yield fd
        finally:
            os.close(fd)


def _stage(top: int) -> StagedFile:
    staging = descend(top, STAGING, create=True)
    try:
        sweep(staging)
        name = f"tmp-{secrets.token_hex(8)}"
        fd = os.open(name, NEW_FLAGS, 0o644, dir_fd=staging)
    except BaseException:
        os.close(staging)
        raise
    return StagedFile(staging, name, fd)
