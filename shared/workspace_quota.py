"""A workspace's quota as a hard bound: bytes and inodes, folders included.

What counts: every regular file its size, every folder at least ``DIR_BYTES``
(what a folder takes on disk: 40 calls making 500-deep empty paths once held
80 MB under a 1 MiB quota), anything else its size; and every one of them is an
inode, bounded by ``REACTQ_WORKSPACE_MAX_INODES``. The private folder's contents
count too (code run by ``run_code`` can write there); only its own bookkeeping
(the folder, the staging folder, the lock, the journal) is left out.

A commit is refused when it would pass either bound (``Workspace.commit``).
Code run by ``run_code`` writes around commits; the run's watchdog kills it once
the workspace is over, and ``trim`` then removes what the run changed, newest
first, until the workspace is within its quota again.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass

from reactq.shared.workspace_fs import (
    RESERVED,
    NotFound,
    WorkspaceError,
    descend,
    open_dir,
    scan,
    show,
)

__all__ = ["DIR_BYTES", "Usage", "growth", "measure", "refusal", "trim"]

log = logging.getLogger("reactq.bundles")

DIR_BYTES = 4096
"""What a folder counts for, at least (a block: what an empty one holds on disk)."""

# The private folder's own bookkeeping: never counted, never trimmed.
_OWN = frozenset({(RESERVED,), (RESERVED, "staging"), (RESERVED, "lock")}) | {
    (RESERVED, name) for name in ("journal.json", "journal.tmp", "clock")
}


@dataclass(frozen=True)
class Usage:
    """What a workspace holds, as the quota counts it."""

    bytes: int
    """Files' sizes plus what folders count for."""
    inodes: int
    """Files, folders, links and the rest, each one."""


def _charge(info: os.stat_result) -> int:
    if stat.S_ISREG(info.st_mode):
        return info.st_size
    if stat.S_ISDIR(info.st_mode):
        return max(DIR_BYTES, info.st_blocks * 512)
    return info.st_size


def _entries(top: int) -> list[tuple[tuple[str, ...], os.stat_result]]:
    """Everything in the workspace (path, lstat), parents before children, never
    through a link; the private folder's bookkeeping left out."""
    out: list[tuple[tuple[str, ...], os.stat_result]] = []
    stack: list[tuple[int, tuple[str, ...]]] = [(os.dup(top), ())]
    try:
        while stack:
            fd, prefix = stack.pop()
            try:
                for name, info in scan(fd, skip_reserved=False):
                    parts = (*prefix, name)
                    if parts not in _OWN:
                        out.append((parts, info))
                    if stat.S_ISDIR(info.st_mode):
                        with suppress(WorkspaceError):
                            stack.append((open_dir(name, fd, show(parts)), parts))
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return out


def measure(top: int) -> Usage:
    """The workspace's usage now."""
    entries = _entries(top)
    return Usage(sum(_charge(info) for _, info in entries), len(entries))


def growth(top: int, changes: Sequence[tuple[tuple[str, ...], int | None, int | None]]) -> Usage:
    """What a commit adds: (path, size before or None, size after or None) per change;
    the folders it creates count too."""
    grow = 0
    inodes = 0
    missing: set[tuple[str, ...]] = set()
    for parts, before, after in changes:
        grow += (after or 0) - (before or 0)
        if before is None and after is not None:
            inodes += 1
            missing.update(_missing_parents(top, parts[:-1]))
        elif after is None and before is not None:
            inodes -= 1
    return Usage(grow + DIR_BYTES * len(missing), inodes + len(missing))


def _missing_parents(top: int, folder: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The folders on the way to ``folder`` that do not exist yet."""
    for depth in range(len(folder), -1, -1):
        try:
            fd = descend(top, folder[:depth])
        except NotFound:
            continue
        os.close(fd)
        return [folder[:d] for d in range(depth + 1, len(folder) + 1)]
    return []  # pragma: no cover - the workspace itself always exists


def refusal(used: Usage, grow: Usage, quota_bytes: int, max_inodes: int) -> str | None:
    """Why a change that adds ``grow`` to ``used`` passes the quota, or None."""
    if grow.bytes > 0 and used.bytes + grow.bytes > quota_bytes:
        return (
            f"the workspace quota ({quota_bytes} bytes) would be passed: {used.bytes} bytes "
            f"are used and this change adds {grow.bytes} (each new folder counts {DIR_BYTES})"
        )
    if grow.inodes > 0 and used.inodes + grow.inodes > max_inodes:
        return (
            f"the workspace's limit of {max_inodes} files and folders would be passed: "
            f"{used.inodes} are there and this change adds {grow.inodes}"
        )
    return None


def trim(top: int, since_ns: int, quota_bytes: int, max_inodes: int) -> list[str]:
    """Remove what changed since ``since_ns`` (by status-change time, which code cannot
    set back), newest first and files before folders, until the workspace is within
    its quota; the paths removed. Older files are never touched."""
    entries = _entries(top)
    used_bytes = sum(_charge(info) for _, info in entries)
    used_inodes = len(entries)
    if used_bytes <= quota_bytes and used_inodes <= max_inodes:
        return []
    fresh = [(parts, info) for parts, info in entries if info.st_ctime_ns >= since_ns]
    files = [e for e in fresh if not stat.S_ISDIR(e[1].st_mode)]
    folders = [e for e in fresh if stat.S_ISDIR(e[1].st_mode)]
    files.sort(key=lambda e: (e[1].st_ctime_ns, len(e[0])), reverse=True)
    folders.sort(key=lambda e: len(e[0]), reverse=True)  # children before parents
    removed: list[str] = []
    for parts, info in [*files, *folders]:
        if used_bytes <= quota_bytes and used_inodes <= max_inodes:
            break
        try:
            parent = descend(top, parts[:-1])
        except WorkspaceError:
            continue  # its folder went (or became a link): not followed
        try:
            if stat.S_ISDIR(info.st_mode):
                os.rmdir(parts[-1], dir_fd=parent)
            else:
                os.unlink(parts[-1], dir_fd=parent)
        except OSError:
            continue  # a folder still holding older files, or gone already
        finally:
            os.close(parent)
        used_bytes -= _charge(info)
        used_inodes -= 1
        removed.append(show(parts))
    if used_bytes > quota_bytes or used_inodes > max_inodes:
        log.warning("a run's workspace is still over its quota after its own files went")
    return removed
