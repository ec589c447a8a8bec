"""Delegation's pieces that need no pool: the knobs, the child ids, the tree rendering."""

from __future__ import annotations

import pytest

from reactq import Agent, AgentConfigError, Subagent, SubagentEvent
from reactq.producer.render import render
from reactq.shared.protocol.children import child_ids
from reactq.shared.turns import validate_session_id, validate_turn_id


def test_subagents_give_the_delegate_tools_with_the_names_in_their_schema() -> None:
    agent = Agent("boss", subagents=["researcher", Subagent("coder", max_cost=0.5)])
    registry = agent.registry()
    assert registry.names == ["delegate", "delegate_parallel"]
    delegate = registry.get("delegate")
    assert delegate is not None
    assert delegate.parameters["properties"]["agent"]["enum"] == ["researcher", "coder"]
    assert Agent("plain").registry().names == []


@pytest.mark.parametrize(
    ("knobs", "says"),
    [
        ({"subagents": "researcher"}, "subagents must be a list"),
        ({"subagents": [3]}, "neither an agent name nor a Subagent"),
        ({"subagents": ["a", Subagent("a")]}, "'a' is listed twice"),
        ({"subagents": ["a"], "max_parallel": 0}, "max_parallel must be an int >= 1"),
        ({"max_delegation_depth": True}, "max_delegation_depth must be an int >= 1"),
    ],
)
def test_bad_delegation_knobs_are_refused_at_construction(knobs: dict, says: str) -> None:
    with pytest.raises(AgentConfigError, match=says):
        Agent("boss", **knobs)


def test_a_childs_ids_are_valid_stable_and_distinct() -> None:
    parent = "t_" + "x" * 126
    session, turn = child_ids(parent, "call_1", 0)
    assert validate_session_id(session) == session and validate_turn_id(turn) == turn
    assert child_ids(parent, "call_1", 0) == (session, turn)
    assert len({child_ids(parent, c, i) for c in ("call_1", "call_2") for i in (0, 1)}) == 4


def test_watch_indents_a_childs_events_under_its_parent() -> None:
    event = SubagentEvent(
        session_id="s",
        turn_id="t_parent1",
        child_session_id="t_parent1:abc",
        child_turn_id="t_child",
        agent="researcher",
        event="final",
        text="done",
        status="completed",
        depth=2,
    )
    assert render(event, show_turn=True) == "t_parent     └ researcher final [completed] done"
