"""What one turn changes before it runs: its overrides, its client tools, and its
session's budget.

A turn may override the loop knobs its agent lists in ``overridable`` (checked at
submit time by the producer against the registry's announcement, and here again
against the definition this worker runs); the overrides build a loop for that turn
only. A session over its ``session_max_tokens`` / ``session_max_cost`` (summed over
its committed turns, ``StateStore.session_usage``) refuses the turn before any model
call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from reactq.shared.client_tools import ClientTool
from reactq.shared.errors import InvalidOverrideError, SessionBudgetExceededError
from reactq.shared.state.base import SessionUsage, StateStore
from reactq.shared.turn_inputs import check_overrides
from reactq.worker.agent.loop import AgentLoop

__all__ = ["loop_for_turn", "session_budget_refusal"]


def loop_for_turn(
    loop: AgentLoop,
    overrides: Mapping[str, Any],
    agent: str,
    client_tools: Sequence[ClientTool] = (),
) -> AgentLoop:
    """``loop`` itself without overrides or client tools, else a loop for this turn
    with them applied.

    OverrideNotAllowedError for a knob the agent does not allow; InvalidOverrideError
    for a value the knob refuses (the loop's own checks, such as a price for the
    overridden model under ``max_cost``), or for client tools the agent cannot take
    (a text tool mode, a name one of its own tools has)."""
    if not overrides and not client_tools:
        return loop
    allowed = check_overrides(dict(overrides), loop.config.overridable, agent)
    if client_tools:
        _check_client_tools(loop, client_tools, agent)
        allowed["client_tools"] = tuple(client_tools)
    try:
        return loop.with_config(dataclasses.replace(loop.config, **allowed))
    except ValueError as exc:
        raise InvalidOverrideError(
            f"agent {agent!r}: the overrides {sorted(allowed)} do not fit: {exc}", agent=agent
        ) from None


def _check_client_tools(loop: AgentLoop, tools: Sequence[ClientTool], agent: str) -> None:
    if not loop.mode.native:
        raise InvalidOverrideError(
            f"agent {agent!r} runs the {loop.mode.mode.value} tool mode: client tools need "
            "the native one (tool_mode=ToolMode.NATIVE)",
            agent=agent,
        )
    names = [t.name for t in tools]
    taken = sorted({n for n in names if loop.registry.get(n) is not None or names.count(n) > 1})
    if taken:
        raise InvalidOverrideError(
            f"agent {agent!r}: client tools {taken} have the name of one of its own tools, "
            "or of another client tool",
            agent=agent,
        )


async def session_budget_refusal(
    store: StateStore, session_id: str, loop: AgentLoop
) -> SessionBudgetExceededError | None:
    """Why the session may not run another turn, or None (also when it has no budget)."""
    config = loop.config
    if config.session_max_tokens is None and config.session_max_cost is None:
        return None
    usage = await store.session_usage(session_id)
    which = _spent(usage, config.session_max_tokens, config.session_max_cost)
    if which is None:
        return None
    limit = config.session_max_tokens if which == "session_max_tokens" else config.session_max_cost
    spent = usage.total_tokens if which == "session_max_tokens" else round(usage.cost, 6)
    return SessionBudgetExceededError(
        f"session {session_id!r} is over its budget: {spent} spent of {which}={limit} "
        f"over {usage.turns} turns; start a new session or raise the agent's {which}",
        budget=which,
        spent=spent,
        limit=limit,
    )


def _spent(usage: SessionUsage, max_tokens: int | None, max_cost: float | None) -> str | None:
    if max_tokens is not None and usage.total_tokens >= max_tokens:
        return "session_max_tokens"
    if max_cost is not None and usage.cost >= max_cost:
        return "session_max_cost"
    return None
