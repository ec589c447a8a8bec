"""How ``Workspace.commit`` places its staged files, so that a commit killed half-way
is finished by the next process that uses the workspace.

Before the first rename a commit writes its intent, a journal in the workspace's
private folder (``.reactq/journal.json``, fsynced): every staged file and the
path it goes to, every path it deletes, with a hash of the content each update
or deletion expects to find. The journal is removed once the last change is in
place (or once a failure that Python saw has put the placed ones back). A
journal still there was left by a process that died placing (a SIGKILL, an
out-of-memory kill, a lost machine): the next use of the workspace rolls it
forward, placing each staged file that is still staged and deleting each path
that still holds what the commit deleted, so the commit ends whole. A retried
undo then finds its files already put back.

Commits, roll-forwards and the quota's clean-up of a run hold the workspace's
lock (``flock`` on ``.reactq/lock``): the kernel lets go of it when its holder
dies, so a journal whose lock is free is one whose writer is gone. Code run by
``run_code`` sees the private folder; a journal it plants is judged like any
untrusted input (paths through ``split_path``, staged names by their pattern)
and can only move files within the workspace, which such code can do anyway.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from reactq.shared.workspace_fs import (
    NEW_FLAGS,
    RESERVED,
    STAGING,
    WorkspaceError,
    current_content,
    descend,
    show,
    split_path,
)

__all__ = [
    "LOCK_SECONDS",
    "Step",
    "journal_pending",
    "locked",
    "place_all",
    "recover",
    "write_journal",
]

log = logging.getLogger("reactq.bundles")

LOCK_SECONDS = 30.0
"""How long a change waits for the workspace's lock before it is refused as busy."""

_JOURNAL = "journal.json"
_JOURNAL_TMP = "journal.tmp"
_LOCK = "lock"
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_VERSION = 1
_STAGED_NAME = re.compile(r"tmp-[0-9a-f]{16}")
_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Step:
    """One change of a commit, as its journal records it."""

    parts: tuple[str, ...]
    """The path changed."""
    staged: str | None
    """The staged file (in ``.reactq/staging``) that goes there; None: delete the path."""
    create: bool
    """The path must not exist before (never replace a file that appeared)."""
    before: str | None
    """SHA-256 (hex) of the content an update or deletion expects to find."""

    def to_json(self) -> dict[str, Any]:
        """The journal's record of it."""
        return {
            "path": list(self.parts),
            "staged": self.staged,
            "create": self.create,
            "before": self.before,
        }

    @classmethod
    def from_json(cls, raw: Any) -> Step:
        """A journal record, judged as untrusted input; ValueError when it is not one."""
        if not isinstance(raw, dict):
            raise ValueError("a step is not an object")
        path, staged, create, before = (raw.get(k) for k in ("path", "staged", "create", "before"))
        if not isinstance(path, list) or not all(isinstance(p, str) for p in path):
            raise ValueError("a step's path is not a list of names")
        try:
            parts = split_path("/".join(path))
        except WorkspaceError as exc:
            raise ValueError(exc.message) from None
        if not parts or list(parts) != path:
            raise ValueError(f"a step's path is not a normal path: {path!r}")
        if staged is not None and not (isinstance(staged, str) and _STAGED_NAME.fullmatch(staged)):
            raise ValueError(f"a step's staged file is not a staged name: {staged!r}")
        if before is not None and not (isinstance(before, str) and _HASH.fullmatch(before)):
            raise ValueError("a step's hash is not a SHA-256")
        if not isinstance(create, bool) or (staged is None and before is None):
            raise ValueError("a step is neither a placement nor a deletion of known content")
        return cls(parts, staged, create, before)


def digest(data: bytes) -> str:
    """SHA-256, hex."""
    return hashlib.sha256(data).hexdigest()


# --- the lock -----------------------------------------------------------------------------


@contextmanager
def locked(top: int) -> Iterator[None]:
    """Hold the workspace's lock (waits up to ``LOCK_SECONDS``, then WorkspaceError)."""
    private = descend(top, (RESERVED,), create=True)
    try:
        fd = os.open(
            _LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=private
        )
    finally:
        os.close(private)
    try:
        deadline = time.monotonic() + LOCK_SECONDS
        pause = 0.005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() > deadline:
                raise WorkspaceError(
                    f"the workspace is busy: another change held it for over {LOCK_SECONDS:g} s; "
                    "try again"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
        yield
    finally:
        os.close(fd)  # releases the lock


# --- the journal --------------------------------------------------------------------------


def journal_pending(top: int) -> bool:
    """Whether a journal is there (cheap: one stat; the caller locks, then recovers)."""
    try:
        os.stat(f"{RESERVED}/{_JOURNAL}", dir_fd=top, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def write_journal(top: int, staging: int, steps: Sequence[Step]) -> None:
    """Record the intent, durably, before anything is placed (the lock held)."""
    os.fsync(staging)  # the staged names themselves survive a crash
    private = descend(top, (RESERVED,), create=True)
    try:
        data = json.dumps({"version": _VERSION, "steps": [s.to_json() for s in steps]})
        with suppress(FileNotFoundError):
            os.unlink(_JOURNAL_TMP, dir_fd=private)
        fd = os.open(_JOURNAL_TMP, NEW_FLAGS, 0o600, dir_fd=private)
        try:
            view = memoryview(data.encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(_JOURNAL_TMP, _JOURNAL, src_dir_fd=private, dst_dir_fd=private)
        os.fsync(private)
    finally:
        os.close(private)


def drop_journal(top: int) -> None:
    """The commit is whole: forget its intent, durably (a journal back from the dead
    after a power cut would redo deletions a later commit may have undone)."""
    private = descend(top, (RESERVED,))
    try:
        with suppress(FileNotFoundError):
            os.unlink(_JOURNAL, dir_fd=private)
        os.fsync(private)
    finally:
        os.close(private)


def _read_journal(top: int) -> list[Step] | None:
    private = descend(top, (RESERVED,))
    try:
        fd = os.open(_JOURNAL, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=private)
    except FileNotFoundError:
        return None
    finally:
        os.close(private)
    try:
        raw = b""
        while chunk := os.read(fd, 1 << 20):
            raw += chunk
            if len(raw) > 64 << 20:
                raise ValueError("the journal is too large")
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("version") != _VERSION:
            raise ValueError("the journal's version is not known")
        steps = data.get("steps")
        if not isinstance(steps, list):
            raise ValueError("the journal has no list of steps")
        return [Step.from_json(s) for s in steps]
    finally:
        os.close(fd)


def recover(top: int) -> None:
    """Roll forward a commit a dead process left half-placed (the lock held)."""
    try:
        steps = _read_journal(top)
    except (ValueError, UnicodeDecodeError, OSError) as exc:
        log.warning("a workspace journal that cannot be used was dropped: %s", exc)
        drop_journal(top)
        return
    if steps is None:
        return
    staging = descend(top, STAGING, create=True)
    try:
        for step in steps:
            try:
                _forward(top, staging, step)
            except (OSError, WorkspaceError) as exc:
                log.warning(
                    "%s: a change left by a dead commit was not completed: %s",
                    show(step.parts),
                    exc,
                )
    finally:
        os.close(staging)
    drop_journal(top)
    log.info("a commit interrupted mid-way was completed (%d change(s))", len(steps))


def _forward(top: int, staging: int, step: Step) -> None:
    """Complete one step, if it is not done yet; leave the path alone if it changed."""
    leaf = step.parts[-1]
    if step.staged is None:
        now, _ = current_content(top, step.parts)
        if now is not None and digest(now) == step.before:
            parent = descend(top, step.parts[:-1])
            try:
                os.unlink(leaf, dir_fd=parent)
            finally:
                os.close(parent)
        return
    try:
        staged_info = os.stat(step.staged, dir_fd=staging, follow_symlinks=False)
    except FileNotFoundError:
        return  # placed already
    parent = descend(top, step.parts[:-1], create=True)
    try:
        try:
            target = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            target = None
        if target is not None and (target.st_dev, target.st_ino) == (
            staged_info.st_dev,
            staged_info.st_ino,
        ):
            pass  # created by a link already: only the staged name is left
        elif target is None and step.create:
            os.rename(step.staged, leaf, src_dir_fd=staging, dst_dir_fd=parent)
            return
        elif target is not None and not step.create and stat.S_ISREG(target.st_mode):
            now, _ = current_content(top, step.parts)
            if now is not None and digest(now) == step.before:
                os.rename(step.staged, leaf, src_dir_fd=staging, dst_dir_fd=parent)
                return
            log.warning("%s changed since a dead commit began: left as it is", show(step.parts))
        else:
            log.warning("%s is not what a dead commit expected: left as it is", show(step.parts))
        os.unlink(step.staged, dir_fd=staging)
    finally:
        os.close(parent)


# --- placing ------------------------------------------------------------------------------


def place_all(
    top: int, staging: int, steps: Sequence[Step], befores: Sequence[bytes | None]
) -> None:
    """Place every step in order; put back the placed ones when one fails."""
    placed: list[int] = []
    made: list[tuple[str, ...]] = []
    try:
        for index, step in enumerate(steps):
            _place(top, staging, step, made)
            placed.append(index)
    except BaseException:
        _restore(top, [(steps[i].parts, befores[i]) for i in placed], made)
        raise


def _place(top: int, staging: int, step: Step, made: list[tuple[str, ...]]) -> None:
    parts = step.parts
    leaf = parts[-1]
    if step.staged is None:
        parent = descend(top, parts[:-1])
        try:
            os.unlink(leaf, dir_fd=parent)
        finally:
            os.close(parent)
        return
    parent = descend(top, parts[:-1], create=True, made=made)
    try:
        if not step.create:
            os.rename(step.staged, leaf, src_dir_fd=staging, dst_dir_fd=parent)
            return
        # Create without replacing: a link fails if the name exists, atomically.
        try:
            os.link(step.staged, leaf, src_dir_fd=staging, dst_dir_fd=parent, follow_symlinks=False)
        except FileExistsError:
            raise WorkspaceError(f"{show(parts)} already exists") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
                raise
            # A filesystem without hard links: check, then rename (a narrow race).
            with suppress(FileNotFoundError):
                os.stat(leaf, dir_fd=parent, follow_symlinks=False)
                raise WorkspaceError(f"{show(parts)} already exists") from None
            os.rename(step.staged, leaf, src_dir_fd=staging, dst_dir_fd=parent)
            return
        os.unlink(step.staged, dir_fd=staging)
    finally:
        os.close(parent)


def _restore(
    top: int,
    placed: Sequence[tuple[tuple[str, ...], bytes | None]],
    made: Sequence[tuple[str, ...]],
) -> None:
    """Best effort: put back what ``placed`` changed, remove the folders made for it."""
    for parts, before in reversed(placed):
        try:
            parent = descend(top, parts[:-1], create=before is not None)
            try:
                if before is None:
                    os.unlink(parts[-1], dir_fd=parent)
                else:
                    name = f"tmp-{secrets.token_hex(8)}"
                    fd = os.open(name, NEW_FLAGS, 0o644, dir_fd=parent)
                    try:
                        os.write(fd, before)
                    finally:
                        os.close(fd)
                    os.rename(name, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            finally:
                os.close(parent)
        except Exception:
            log.warning("could not restore %s after a failed change", show(parts), exc_info=True)
    for parts in reversed(made):
        with suppress(Exception):
            parent = descend(top, parts[:-1])
            try:
                os.rmdir(parts[-1], dir_fd=parent)
            finally:
                os.close(parent)
