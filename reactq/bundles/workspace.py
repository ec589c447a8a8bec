"""The session workspace, re-exported: it lives in ``reactq.shared.workspace`` so that
undo (a producer's, or the worker ending a cancelled turn) uses the same confined
file access as the tools."""

from __future__ import annotations

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
    "show",
    "split_path",
]
