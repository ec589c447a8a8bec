"""Ready-made tool bundles for agents; ``import reactq`` does not load them.

``file_tools`` gives an agent a workspace per session that every worker of the
pool sees (``REACTQ_WORKSPACE_ROOT``, mounted by all of them), and the tools to
work in it::

    from reactq import Agent
    from reactq.bundles import file_tools

    agent = Agent(name="coder", tools=file_tools())

``read_file``, ``list_files``, ``search_files`` and ``glob_files`` only read
(the loop runs them side by side); ``write_file``, ``edit_file``,
``apply_patch`` and, when asked for, ``download_file`` change the workspace
and run one at a time. Every path is confined to the session's directory.

``memory_tools(namespace=...)`` gives an agent ``remember``, ``recall`` and
``forget`` over the long-term store, in a namespace chosen from each turn (a user's
facts, found again in their other sessions).

``todo_tools()`` gives an agent ``update_todos`` and ``list_todos``: a plan kept per
session in the state store, shown in the system prompt of every model call.
"""

from __future__ import annotations

import os

from reactq.bundles.download import AllowList, DownloadError, DownloadPolicy, download_tools
from reactq.bundles.files import file_tools as _file_tools
from reactq.bundles.images import image_tools
from reactq.bundles.journal import Journal, StaleFileError
from reactq.bundles.memory import MemoryToolError, memory_tools
from reactq.bundles.patch import PatchError, patch_tools
from reactq.bundles.sandbox import SandboxLimits, sandbox_tools
from reactq.bundles.search import SearchLimits
from reactq.bundles.todos import todo_tools
from reactq.bundles.workspace import (
    FileChange,
    Workspace,
    WorkspaceError,
    Workspaces,
    settings_for,
)
from reactq.shared.settings import Settings
from reactq.worker.agent.tools import Tool

__all__ = [
    "DownloadError",
    "FileChange",
    "MemoryToolError",
    "PatchError",
    "SandboxLimits",
    "SearchLimits",
    "StaleFileError",
    "Workspace",
    "WorkspaceError",
    "Workspaces",
    "file_tools",
    "image_tools",
    "memory_tools",
    "sandbox_tools",
    "todo_tools",
]


def file_tools(
    settings_or_root: Settings | str | os.PathLike[str] | None = None,
    *,
    read_only: bool = False,
    download: bool = False,
    search_limits: SearchLimits | None = None,
    download_timeout: float | None = 300.0,
) -> list[Tool]:
    """The file tools, for ``Agent(tools=[...])``.

    ``settings_or_root``: a ``Settings`` (its workspace root, quota and download
    limits), a directory to use as the root (with the default limits), or None
    for ``Settings.from_env()``. ``read_only`` leaves out every tool that
    changes the workspace; ``download`` adds ``download_file`` (network access:
    off unless asked for). ``download_timeout`` is that tool's time limit.
    """
    settings = settings_for(settings_or_root)
    workspaces = Workspaces(
        settings.workspace_root,
        quota_bytes=settings.workspace_quota_bytes,
        max_inodes=settings.workspace_max_inodes,
    )
    journal = Journal()
    tools = _file_tools(
        workspaces, read_only=read_only, search_limits=search_limits, journal=journal
    )
    if read_only:
        return tools
    tools += patch_tools(workspaces, journal)
    if download:
        policy = DownloadPolicy(
            max_bytes=settings.download_max_bytes,
            allow=AllowList(settings.download_allow_hosts),
            deadline=settings.download_deadline_seconds,
        )
        tools += download_tools(workspaces, policy, timeout=download_timeout, journal=journal)
    return tools
