"""How a run leaves the loop without ending its turn: it waits for something outside it.

``Suspended`` is what the loop and the runner let through untouched (no final; the
step is checkpointed before it is raised). The drain parks the turn by its kind:
``AwaitingApproval`` for people, ``AwaitingChildren`` for child turns.
"""

from __future__ import annotations

from reactq.shared.messages import ToolCall

__all__ = ["AwaitingApproval", "AwaitingChildren", "Suspended"]


class Suspended(Exception):
    """Internal control flow: the run stopped at tool calls whose outcomes come from
    outside the turn (``calls``); its step is checkpointed, and no final follows."""

    def __init__(self, calls: list[ToolCall]) -> None:
        super().__init__(", ".join(c.id for c in calls))
        self.calls = calls


class AwaitingApproval(Suspended):
    """The run stopped at tool calls that wait for a person; the drain parks the turn.

    Raised only by a run given ``decisions`` (a mapping, possibly empty): one that
    cannot wait denies such calls instead.
    """


class AwaitingChildren(Suspended):
    """The run stopped at delegation calls whose child turns still run; the drain
    parks the turn for its children."""
