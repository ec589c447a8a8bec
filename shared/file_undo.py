"""A turn's file changes: how they are described, recorded and undone.

The file tools (``reactq.bundles``) change a session's workspace through
``Workspace.commit`` and record every change in the state store as a
``FileAction`` (path, kind, the content it replaced, a hash of what it left),
tagged with the session, turn, attempt and subagent. Undo reads them back from
whichever process mounts the workspace root: ``Producer.undo`` (and the CLI, the
gateway) for a finished turn, the worker that ends a turn cancelled or rolled
back, so that nothing of such a turn is kept, in files either.

Undo is all or nothing: each file the turn touched must still hold what the
turn left (its hash), else nothing is reverted and ``UndoConflictError`` names
the file; the reverts go to disk in one ``Workspace.commit``. A file that holds
what undo would put back already counts as reverted: an undo killed mid-commit
is rolled forward by the next use of the workspace (``workspace_intent``), so
its retry finds its files back and completes. A turn is undone once
(``AlreadyUndoneError`` the second time).
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import logging
import os
import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from reactq.shared.errors import ReactqError
from reactq.shared.state.base import FileAction, StateStore
from reactq.shared.workspace import FileChange, StagedFile, WorkspaceError, Workspaces

__all__ = [
    "DIFF_CHARS",
    "AlreadyUndoneError",
    "NothingToUndoError",
    "UndoConflictError",
    "UndoError",
    "UndoReport",
    "UndoneFile",
    "describe_changes",
    "discard_turn_files",
    "plan_revert",
    "revert_turn",
    "revision",
]

log = logging.getLogger("reactq.files")

_UNLIMITED = 1 << 62

DIFF_CHARS = 2000
"""A ``file_change`` event's diff is cut at this many characters."""

ChangeKind = Literal["created", "modified", "deleted"]


class UndoError(ReactqError):
    """A turn's file changes could not be undone; nothing was reverted."""

    code = "undo_error"


class UndoConflictError(UndoError):
    """A file the turn changed has changed again since (the message names it)."""

    code = "undo_conflict"


class AlreadyUndoneError(UndoError):
    """The turn's file changes were undone already."""

    code = "already_undone"


class NothingToUndoError(UndoError):
    """The turn changed no file of its workspace (or there is no such turn)."""

    code = "nothing_to_undo"


class UndoneFile(BaseModel):
    """One file an undo put back."""

    model_config = ConfigDict(frozen=True)

    path: str
    """The file, relative to the session's workspace."""
    did: ChangeKind
    """What the turn had done to it, as a whole (created, modified, deleted)."""
    now: Literal["removed", "restored"]
    """What undo did: removed a file the turn created, or restored its old content."""


class UndoReport(BaseModel):
    """What ``Producer.undo`` reverted, newest change first."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    """The session whose workspace was changed."""
    turn_id: str
    """The turn undone."""
    files: list[UndoneFile]
    """The files put back, the one the turn changed last first."""


def revision(data: bytes) -> str:
    """A content's revision: its SHA-256, hex."""
    return hashlib.sha256(data).hexdigest()


def _kind(before: bytes | None, after: object) -> ChangeKind:
    if before is None:
        return "created"
    return "deleted" if after is None else "modified"


def _diff(path: str, before: bytes | None, after: bytes | None) -> str:
    try:
        old = (before or b"").decode("utf-8")
        new = (after or b"").decode("utf-8")
    except UnicodeDecodeError:
        return ""
    if "\0" in old or "\0" in new:
        return ""
    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), f"a/{path}", f"b/{path}", lineterm="", n=2
    )
    diff = "\n".join(lines)
    if len(diff) > DIFF_CHARS:
        diff = diff[:DIFF_CHARS] + "\n[... diff cut]"
    return diff


def describe_changes(changes: Sequence[FileChange]) -> list[dict[str, Any]]:
    """The fields of one ``file_change`` event per change (a move: one, ``moved``)."""
    moved_from = {c.source: c for c in changes if c.source is not None}
    out: list[dict[str, Any]] = []
    for change in changes:
        if change.after is None and change.path in moved_from:
            continue  # told by the move's own event
        after = change.after if isinstance(change.after, bytes) else None
        fields: dict[str, Any] = {
            "path": change.path,
            "kind": _kind(change.before, change.after),
            "size": change.after_size,
        }
        before = change.before
        if change.source is not None:
            source = next((c for c in changes if c.path == change.source and c.after is None), None)
            fields.update(kind="moved", from_path=change.source)
            before = source.before if source is not None else None
        if not isinstance(change.after, StagedFile):  # a download: no diff of its bytes
            fields["diff"] = _diff(change.path, before, after)
        out.append(fields)
    return out


def plan_revert(
    actions: Sequence[FileAction], current: dict[str, bytes | None], turn_id: str
) -> tuple[list[FileChange], list[UndoneFile]]:
    """The changes that put back what ``actions`` changed, newest first; UndoConflictError
    when a file's ``current`` content is not what the turn left."""
    first: dict[str, FileAction] = {}
    last: dict[str, tuple[int, FileAction]] = {}
    for index, action in enumerate(actions):
        first.setdefault(action.path, action)
        last[action.path] = (index, action)
    changes: list[FileChange] = []
    files: list[UndoneFile] = []
    for path, (_, action) in sorted(last.items(), key=lambda item: -item[1][0]):
        now = current[path]
        left = None if now is None else revision(now)
        original = first[path].before
        if left != action.after_hash:
            if now != original:
                raise UndoConflictError(
                    f"{path} has changed since turn {turn_id} changed it: nothing was undone",
                    path=path,
                    turn_id=turn_id,
                )
            # Put back already: an undo killed mid-commit, rolled forward since.
        elif original == now:
            continue  # the turn left it as it found it
        else:
            changes.append(FileChange(path, now, original))
        did: ChangeKind = _kind(original, None if action.after_hash is None else action)
        files.append(
            UndoneFile(path=path, did=did, now="removed" if original is None else "restored")
        )
    return changes, files


async def revert_turn(
    store: StateStore, root: str | os.PathLike[str], turn_id: str
) -> tuple[UndoReport, list[FileChange]]:
    """Undo a turn's file changes (all or nothing) and mark them undone; the report and
    the changes made (for ``file_change`` events). ``root``: the workspace root, as this
    process mounts it. Raises NothingToUndoError, AlreadyUndoneError or
    UndoConflictError, and UndoError when the workspace refused."""
    actions = [a for a in await store.file_actions(turn_id) if a.kind != "read"]
    if not actions:
        raise NothingToUndoError(f"turn {turn_id} changed no file", turn_id=turn_id)
    if actions[0].undone_at is not None:
        raise AlreadyUndoneError(
            f"turn {turn_id}'s file changes were undone already", turn_id=turn_id
        )
    session_id = actions[0].session_id
    # No quota here: undo puts back what was there, whatever the turns since have added.
    workspace = Workspaces(root, quota_bytes=_UNLIMITED, max_inodes=_UNLIMITED).for_session(
        session_id
    )

    def apply() -> tuple[list[FileChange], list[UndoneFile]]:
        try:
            current = {a.path: workspace.current(a.path) for a in actions}
            changes, files = plan_revert(actions, current, turn_id)
            workspace.commit(changes)
        except WorkspaceError as exc:
            raise UndoError(
                f"turn {turn_id}: nothing was undone: {exc.message}", turn_id=turn_id
            ) from None
        return changes, files

    changes, files = await asyncio.to_thread(apply)
    if not await store.mark_file_actions_undone(turn_id, time.time()):
        # Only an undo racing this one gets here, and its commit or ours was refused.
        raise AlreadyUndoneError(
            f"turn {turn_id}'s file changes were undone already", turn_id=turn_id
        )
    return UndoReport(session_id=session_id, turn_id=turn_id, files=files), changes


async def discard_turn_files(
    store: StateStore, root: str | os.PathLike[str], turn_id: str
) -> list[FileChange]:
    """Revert the file changes of a turn that ended keeping nothing (cancelled, rolled
    back): its changes made, or none when it made none or they were undone already. A
    conflict (a file changed by someone else since) is logged, never raised: the turn
    must still end."""
    try:
        return (await revert_turn(store, root, turn_id))[1]
    except (NothingToUndoError, AlreadyUndoneError):
        return []
    except UndoError as exc:
        log.warning("turn %s ended without its file changes undone: %s", turn_id, exc.message)
        return []
