"""Delegation, the kernel's side: ``Agent(subagents=[...])`` and its two tools.

An agent with subagents gets ``delegate(agent, task)`` and ``delegate_parallel(tasks)``.
The tools are declared here (their schemas are what the model sees), but a call does not
run in the tool itself: in the worker pool, the run hands the step's delegation calls to
the turn's ``Delegator`` (``CURRENT``, set by the drain for the turn), which starts each
task as a child turn on the pool (``reactq.worker.child_turns``) and, once the children
ended, gives the call its outcome through a ``DelegatedContext``; until then the run
parks (``AwaitingChildren``). Outside the pool (the embedded mode) a call is a tool
error: children need workers to run on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, Field

from reactq.shared.errors import ToolError
from reactq.shared.messages import ToolCall
from reactq.worker.agent.tools import Tool, ToolContext, tool

__all__ = [
    "CURRENT",
    "DEFAULT_MAX_DELEGATION_DEPTH",
    "DELEGATE",
    "DELEGATE_PARALLEL",
    "DelegatedContext",
    "DelegationOutcome",
    "DelegationRefusedError",
    "Delegator",
    "Subagent",
    "SubagentFailedError",
    "Task",
    "as_subagents",
    "delegation_tools",
]

DELEGATE = "delegate"
DELEGATE_PARALLEL = "delegate_parallel"
DEFAULT_MAX_DELEGATION_DEPTH = 3
NEEDS_POOL = (
    "delegation needs the worker pool: a child turn runs on a worker hosting its agent "
    "(start one with `reactq worker --agents ...`)"
)


class DelegationRefusedError(ToolError):
    """``delegate`` refused the task: not a subagent, too deep a chain, a cycle, a batch
    too big or naming an agent twice, an agent no worker hosts."""

    code = "delegation_refused"


class SubagentFailedError(ToolError):
    """A child turn ended failed, cancelled or over its budget (its status is in the
    message)."""

    code = "subagent_failed"


@dataclass(frozen=True)
class Subagent:
    """An agent this agent may delegate to, and the budget each of its child turns runs
    under (None: the child agent's own)."""

    name: str
    """The agent's name (a worker in the pool must host it)."""
    max_cost: float | None = None
    """Cost budget of each child turn (the child agent must allow overriding it)."""
    max_total_tokens: int | None = None
    """Token budget of each child turn (the child agent must allow overriding it)."""

    def overrides(self) -> dict[str, Any]:
        """The child turn's overrides: the budgets set here."""
        found: dict[str, Any] = {}
        if self.max_cost is not None:
            found["max_cost"] = self.max_cost
        if self.max_total_tokens is not None:
            found["max_total_tokens"] = self.max_total_tokens
        return found


def as_subagents(value: object) -> tuple[Subagent, ...]:
    """``subagents`` as Subagents (names become ``Subagent(name)``), or ValueError."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValueError(f"subagents must be a list of agent names or Subagents, got {value!r}")
    found: list[Subagent] = []
    for item in value:
        entry = Subagent(item) if isinstance(item, str) else item
        if not isinstance(entry, Subagent) or not entry.name:
            raise ValueError(f"subagents: {item!r} is neither an agent name nor a Subagent")
        if any(f.name == entry.name for f in found):
            raise ValueError(f"subagents: {entry.name!r} is listed twice")
        found.append(entry)
    return tuple(found)


class Task(BaseModel):
    """One task of ``delegate_parallel``."""

    agent: str = Field(description="The subagent to hand the task to.")
    task: str = Field(description="What it should do, in full: it sees nothing else.")


@dataclass(frozen=True)
class DelegationOutcome:
    """What a delegation call returns to the model: its result, or a tool error."""

    ok: bool
    text: str
    code: str = SubagentFailedError.code


@dataclass(frozen=True)
class DelegatedContext(ToolContext):
    """The context a delegation call runs with once its outcome is known."""

    outcome: DelegationOutcome | None = None
    """What the call returns (None: no delegator ran it)."""


def _answer(ctx: ToolContext) -> str:
    outcome = ctx.outcome if isinstance(ctx, DelegatedContext) else None
    if outcome is None:
        raise DelegationRefusedError(NEEDS_POOL)
    if outcome.ok:
        return outcome.text
    if outcome.code == DelegationRefusedError.code:
        raise DelegationRefusedError(outcome.text)
    raise SubagentFailedError(outcome.text)


def delegation_tools(subagents: Sequence[Subagent], max_parallel: int) -> list[Tool]:
    """The ``delegate`` and ``delegate_parallel`` tools of an agent with ``subagents``."""
    names = ", ".join(s.name for s in subagents)

    # Read-only as the executor sees them: the delegator ran the child turns before
    # the step's calls, and a call only returns the outcome it was handed.
    @tool(
        name=DELEGATE,
        read_only=True,
        description=f"Hand a task to one of your subagents ({names}) and get its answer "
        "back. The subagent sees only the task: say everything it needs.",
    )
    async def delegate(agent: str, task: str, ctx: ToolContext) -> str:
        return _answer(ctx)

    @tool(
        name=DELEGATE_PARALLEL,
        read_only=True,
        description=f"Hand up to {max_parallel} tasks to your subagents ({names}) at once, "
        "each agent at most once; get every answer back, in order, as a JSON list.",
    )
    async def delegate_parallel(tasks: list[Task], ctx: ToolContext) -> str:
        return _answer(ctx)

    # The names a model may pass, in the schema it reads (the delegator checks again).
    choices = [s.name for s in subagents]
    delegate.parameters["properties"]["agent"]["enum"] = choices
    delegate_parallel.parameters["$defs"]["Task"]["properties"]["agent"]["enum"] = choices
    return [delegate, delegate_parallel]


def tasks_of(call: ToolCall) -> list[Task] | None:
    """The tasks a delegation call asks for, or None when its arguments are not valid
    (the executor then reports them as it does for any tool)."""
    try:
        args = json.loads(call.arguments) if call.arguments.strip() else {}
        if call.name == DELEGATE:
            return [Task.model_validate(args)]
        raw = args.get("tasks") if isinstance(args, dict) else None
        if not isinstance(raw, list):
            return None
        return [Task.model_validate(t) for t in raw]
    except (ValueError, TypeError):
        return None


class Delegator(Protocol):
    """Starts a turn's delegation calls as child turns and reads their outcomes."""

    async def resolve(
        self, calls: list[ToolCall], context: ToolContext
    ) -> tuple[dict[str, DelegatedContext], list[ToolCall]]:
        """For ``calls`` (the step's ``delegate`` / ``delegate_parallel`` calls): the
        context each call whose outcome is known runs with, and the calls that wait for
        children still running (the run parks for them)."""
        ...


CURRENT: ContextVar[Delegator | None] = ContextVar("reactq_delegator", default=None)
"""The running turn's delegator (the drain sets it; None: this run cannot delegate)."""
