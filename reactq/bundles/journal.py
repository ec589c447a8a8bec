"""What a turn knows of its workspace's files, and what it changed: the stale-file guard,
the undo records and the ``file_change`` events.

The revisions a turn saw (a file's SHA-256 when ``read_file`` read it, or when the
turn itself wrote it) are kept with the turn in the state store, as ``read``
``FileAction`` rows beside its changes, so the guard holds when the turn goes on
on another worker (a resumed attempt, a turn parked for approval): every worker
reads the same rows. A write is refused (``StaleFileError``, "re-read it") when
the file's content differs from the revision the turn last saw. A file the turn
never saw may be created, and changed by an edit anchored on its content
(``edit_file``, an ``apply_patch`` update: the text to replace must be there), but
not overwritten or deleted blind (``write_file``, ``*** Delete File``): the model
must read it first.

Without a store in the tool's context (the tools called directly, in tests) the
revisions are kept in this process, per turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from contextlib import suppress

from reactq.shared.events import FileChangeEvent
from reactq.shared.file_undo import describe_changes, revision
from reactq.shared.state.base import FileAction
from reactq.shared.workspace import FileChange, StagedFile, WorkspaceError
from reactq.worker.agent.tools import ToolContext

__all__ = ["Journal", "StaleFileError"]

log = logging.getLogger("reactq.bundles")

_LOCAL_TURNS = 1000  # turns remembered in-process when there is no store


class StaleFileError(WorkspaceError):
    """A write to a file that changed since the turn read it (or that it never read)."""

    code = "stale_file"


def _kind(change: FileChange) -> str:
    if change.before is None:
        return "created"
    return "deleted" if change.after is None else "modified"


def _revision_of(after: bytes | StagedFile | None) -> str | None:
    if after is None:
        return None
    return after.digest if isinstance(after, StagedFile) else revision(after)


class Journal:
    """The file tools' record keeper, one per ``file_tools()`` call."""

    def __init__(self) -> None:
        self._local: OrderedDict[str, dict[str, str | None]] = OrderedDict()

    async def known(self, ctx: ToolContext) -> dict[str, str | None]:
        """Path -> the revision the turn last saw (None: it saw the file deleted)."""
        if ctx.store is None or not ctx.turn_id:
            return dict(self._local.get(ctx.turn_id, {}))
        return {a.path: a.after_hash for a in await ctx.store.file_actions(ctx.turn_id)}

    async def saw(self, ctx: ToolContext, path: str, digest: str, known: str | None) -> None:
        """The turn read ``path`` at revision ``digest`` (``known``: what it knew before)."""
        if digest == known:
            return
        if ctx.store is None or not ctx.turn_id:
            self._remember(ctx.turn_id, {path: digest})
            return
        await ctx.store.record_file_actions([self._action(ctx, path, "read", None, digest)])

    @staticmethod
    def check(
        changes: Sequence[FileChange], known: dict[str, str | None], blind: Collection[str] = ()
    ) -> None:
        """Refuse the changes when one meets a file the turn's revision of is stale.

        ``blind``: paths whose change does not rest on their content (an overwrite, a
        delete): an existing one must have been seen this turn.
        """
        for change in changes:
            Journal.check_one(change.path, change.before, known, change.path in blind)

    @staticmethod
    def check_one(
        path: str, before: bytes | None, known: dict[str, str | None], blind: bool = False
    ) -> None:
        """``check`` for one file whose content now is ``before`` (None: absent)."""
        if before is None:
            if known.get(path) is not None:
                raise StaleFileError(
                    f"{path} was deleted since this turn read it: list the folder again "
                    "(list_files) before writing it"
                )
            return
        if path not in known:
            if blind:
                raise StaleFileError(
                    f"{path} exists and was not read in this turn: read it (read_file) "
                    "before replacing or deleting it"
                )
            return
        if known[path] != revision(before):
            raise StaleFileError(
                f"{path} changed since this turn last read it: re-read it (read_file) "
                "and make the change again"
            )

    async def committed(self, ctx: ToolContext, changes: Sequence[FileChange]) -> None:
        """Record the changes (for undo) and publish a ``file_change`` event for each."""
        if not changes:
            return
        actions = [
            self._action(ctx, c.path, _kind(c), c.before, _revision_of(c.after)) for c in changes
        ]
        if ctx.store is None or not ctx.turn_id:
            self._remember(ctx.turn_id, {a.path: a.after_hash for a in actions})
        else:
            await ctx.store.record_file_actions(actions)
        if ctx.emitter is not None:
            for fields in describe_changes(changes):
                await ctx.emitter.emit(FileChangeEvent, **fields)

    async def apply(
        self, ctx: ToolContext, change: Callable[[], tuple[str, list[FileChange]]]
    ) -> str:
        """Run ``change`` (blocking: it commits to the workspace) in a thread, then record
        what it changed. A cancel (the turn's, a tool timeout) waits for both, so a change
        that reached the disk is always recorded: a cancelled turn's revert finds it."""

        async def run() -> str:
            text, changes = await asyncio.to_thread(change)
            await self.committed(ctx, changes)
            return text

        task = asyncio.ensure_future(run())
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            with suppress(Exception):
                await task
            raise

    def _remember(self, turn_id: str, seen: dict[str, str | None]) -> None:
        self._local.setdefault(turn_id, {}).update(seen)
        self._local.move_to_end(turn_id)
        while len(self._local) > _LOCAL_TURNS:
            self._local.popitem(last=False)

    @staticmethod
    def _action(
        ctx: ToolContext, path: str, kind: str, before: bytes | None, after_hash: str | None
    ) -> FileAction:
        return FileAction(
            session_id=ctx.session_id,
            turn_id=ctx.turn_id,
            attempt=ctx.attempt,
            subagent=None,
            path=path,
            kind=kind,
            before=before,
            after_hash=after_hash,
        )
