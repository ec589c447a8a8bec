"""Where a session's workspace lives under ``REACTQ_WORKSPACE_ROOT``, and which file
names a workspace refuses.

The file tools (``reactq.bundles``) create it; deleting a session
(``Producer.delete_session``) removes it. Both sides name it here.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["path_text_refusal", "workspace_dir_name"]

_PLAIN_SESSION = re.compile(r"[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def path_text_refusal(path: str) -> str | None:
    """Why a workspace path cannot name a file, for the model, or None (NUL and control
    characters: ``split_path``).

    A lone surrogate (which JSON arguments may spell) would become a name of raw bytes
    on disk (``surrogateescape``) that no undo record, event or listing can store.
    """
    if _SURROGATE.search(path):
        return "the path holds a lone surrogate, which UTF-8 cannot carry: name it in valid text"
    return None


def workspace_dir_name(session_id: str) -> str:
    """The directory name of a (non-empty) session id's workspace.

    A protocol-valid id is its own name, unless it could mean something else to
    the filesystem (``.``, ``..``, a hidden name): those, and anything else, get
    ``~`` and a hash, which no valid id can spell.
    """
    if _PLAIN_SESSION.fullmatch(session_id):
        return session_id
    return "~" + hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
