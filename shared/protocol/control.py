"""The control channel: how a producer asks the worker running a turn to stop it.

A cancel is two signals. The cancel flag (a key per turn, set by the queue's
submit and cancel scripts, read with ``SessionQueue.cancel_mode``) is the
durable one; the notice published here on ``keys.control`` reaches every worker
process at once, so the one running the turn stops it without waiting for its
next poll of the flag.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum

from redis.asyncio import Redis

from reactq.shared.keys import Keys


class CancelMode(StrEnum):
    """How a running turn is asked to stop."""

    CANCEL = "cancel"
    """Stop and commit nothing (``Producer.cancel``)."""
    INTERRUPT = "interrupt"
    """Stop and commit what was done, marked interrupted (a newer message came in)."""
    ROLLBACK = "rollback"
    """Stop and commit nothing (a newer message replaces this one)."""

    @classmethod
    def read(cls, value: str) -> CancelMode:
        """The mode a flag or notice holds; anything unknown stops the turn as a cancel."""
        try:
            return cls(value)
        except ValueError:
            return cls.CANCEL


@dataclass(frozen=True)
class CancelNotice:
    """``{"op": "cancel", "turn_id": ..., "mode": ...}`` on the control channel."""

    turn_id: str
    mode: CancelMode = CancelMode.CANCEL

    def encode(self) -> str:
        """The notice as the JSON the channel carries."""
        return json.dumps({"op": "cancel", "turn_id": self.turn_id, "mode": str(self.mode)})

    @classmethod
    def decode(cls, data: object) -> CancelNotice | None:
        """The cancel notice a channel message carries; None for anything else
        that is a JSON object. Raises ValueError for one that is not."""
        notice = json.loads(data if isinstance(data, str | bytes) else "")
        if not isinstance(notice, dict):
            raise ValueError("a control notice is a JSON object")
        if notice.get("op") != "cancel" or not isinstance(notice.get("turn_id"), str):
            return None
        return cls(notice["turn_id"], CancelMode.read(notice.get("mode") or "cancel"))


async def notify_cancel(redis: Redis, keys: Keys, turn_id: str, mode: CancelMode) -> None:
    """Tell every worker process (one control channel) to stop a running turn."""
    await redis.publish(keys.control, CancelNotice(turn_id, mode).encode())
