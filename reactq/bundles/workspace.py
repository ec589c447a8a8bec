"""The session workspace, re-exported: it lives in ``reactq.shared.workspace`` so that
undo (a producer's, or the worker ending a cancelled turn) uses the same confined
file access as the tools."""

from __future__ import annotations

import os

from reactq.shared.settings import Settings
from reactq.shared.workspace import (
    RESERVED,
    Entry,
    FileChange,
    StagedFile,
    Workspace,
    WorkspaceError,
    Workspaces,
    session_dir_name,
    show,
    split_path,
)

__all__ = [
    "RESERVED",
    "Entry",
    "FileChange",
    "StagedFile",
    "Workspace",
    "WorkspaceError",
    "Workspaces",
    "session_dir_name",
    "settings_for",
    "show",
    "split_path",
]


def settings_for(settings_or_root: Settings | str | os.PathLike[str] | None) -> Settings:
    """What a bundle's ``settings_or_root`` stands for: a ``Settings`` as it is, a
    directory as the workspace root (the other settings their defaults), None as
    ``Settings.from_env()``."""
    if isinstance(settings_or_root, Settings):
        return settings_or_root
    if settings_or_root is None:
        return Settings.from_env()
    return Settings.from_env({}, workspace_root=os.fspath(settings_or_root))
