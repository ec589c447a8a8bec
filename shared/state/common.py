"""What every state backend shares beyond the protocol: branch ids and fork points
checked, a branch's view of its ancestors, a checkpoint's steps as text, and the
errors of a stale fence and of a turn committed twice."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence

from reactq.shared.errors import BranchError, StaleLeaseError, TurnCommittedError
from reactq.shared.messages import ChatMessage
from reactq.shared.state.base import TurnRecord

_BRANCH_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def new_branch_id() -> str:
    """A fresh branch id."""
    return f"b-{uuid.uuid4().hex[:12]}"


def check_branch_id(branch_id: str) -> str:
    """``branch_id`` if well-formed (1-128 of ``[A-Za-z0-9._:-]``), else BranchError."""
    # fullmatch: ``$`` alone also matches before a final newline.
    if not isinstance(branch_id, str) or not _BRANCH_ID.fullmatch(branch_id):
        raise BranchError(
            f"invalid branch id {branch_id!r}: use 1-128 characters of [A-Za-z0-9._:-]",
            branch_id=str(branch_id),
        )
    return branch_id


def check_fork_point(session_id: str, branch_id: str, from_sequence: int, length: int) -> None:
    """BranchError unless 0 <= from_sequence <= length."""
    if isinstance(from_sequence, bool) or not isinstance(from_sequence, int):
        raise BranchError(f"fork point must be an integer, got {from_sequence!r}")
    if not 0 <= from_sequence <= length:
        raise BranchError(
            f"cannot fork branch {branch_id!r} of session {session_id!r} at message "
            f"{from_sequence}: it has messages 1..{length}",
            session_id=session_id,
            branch_id=branch_id,
            from_sequence=from_sequence,
            length=length,
        )


def view_ranges(chain: Sequence[tuple[str, int]]) -> list[tuple[str, int, int | None]]:
    """Which stored messages make up a branch's history.

    ``chain`` is ``(branch_id, fork_sequence)`` from the branch up to the trunk.
    Returns ``(branch_id, after, upto)`` root first: the branch's own messages with
    ``after < sequence <= upto`` (``upto`` None: no bound). A fork inside an
    inherited prefix caps every ancestor above it, hence the running minimum.
    """
    ranges: list[tuple[str, int, int | None]] = []
    cap: int | None = None
    for branch_id, fork in chain:
        if cap is None or cap > fork:
            ranges.append((branch_id, fork, cap))
        cap = fork if cap is None else min(cap, fork)
    ranges.reverse()
    return ranges


def stale(session_id: str, stored: int, fence: int) -> StaleLeaseError:
    """The error of a fenced write with an older token than the stored one."""
    return StaleLeaseError(
        f"session {session_id!r} has fencing token {stored}; a write with {fence} is stale",
        session_id=session_id,
        fence=fence,
        newest=stored,
    )


def committed_twice(session_id: str, turn_id: str) -> TurnCommittedError:
    """The error of a commit of a turn that already has a committed record."""
    return TurnCommittedError(
        f"turn {turn_id} of session {session_id!r} is already committed; nothing was written",
        session_id=session_id,
        turn_id=turn_id,
    )


def dump_steps(messages: Sequence[ChatMessage]) -> str:
    """A checkpoint's messages as JSON text (ASCII: lone surrogates and NUL escaped)."""
    # turn_id is excluded from a message's dump (it is not sent to the model): kept here.
    return json.dumps(
        [{**m.model_dump(exclude_none=True), "turn_id": m.turn_id} for m in messages],
        ensure_ascii=True,
    )


def load_steps(raw: str | bytes) -> list[ChatMessage]:
    """``dump_steps`` read back."""
    return [ChatMessage.model_validate(m) for m in json.loads(raw)]


def check_record(session_id: str, record: TurnRecord) -> None:
    """Refuse a turn record that belongs to another session than the one committed to."""
    if record.session_id != session_id:
        raise ValueError(
            f"turn {record.turn_id} belongs to session {record.session_id!r}, not {session_id!r}"
        )
