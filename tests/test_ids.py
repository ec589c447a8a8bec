"""Ids are checked whole: a trailing newline does not slip past ``$``, and only ASCII
digits count as digits (``re``'s ``\\d`` takes any Unicode digit)."""

from __future__ import annotations

import pytest

from reactq import Agent, tool
from reactq.shared.errors import BranchError, InvalidSessionIdError
from reactq.shared.state.common import check_branch_id
from reactq.shared.turns import SESSION_ID_RE, validate_session_id
from reactq.worker.agent.llm.base import RequestOptions

GOOD_SESSIONS = ["a", "A-z_0:9.", "...", ".a", "a.", "..a", "a..b", "x" * 128, "." + "x" * 127]


@pytest.mark.parametrize("session_id", GOOD_SESSIONS)
def test_good_session_ids(session_id: str) -> None:
    assert validate_session_id(session_id) == session_id


@pytest.mark.parametrize(
    "session_id",
    ["abc\n", "\n", ".", "..", "", "x" * 129, "a b", "a/b", "é", "\u0661", "..\n", None, 7],
)
def test_bad_session_ids(session_id: object) -> None:
    # Before: "abc\n" passed (``$`` matches before a final newline), and "." and ".."
    # made events_urls that clients normalise into 404s.
    with pytest.raises(InvalidSessionIdError):
        validate_session_id(session_id)


def test_the_session_pattern_is_anchored_for_other_engines_too() -> None:
    # The gateway hands the pattern to pydantic (Rust's regex crate) and to the OpenAPI
    # document (ECMA-262): no look-around, and anchored at both ends.
    pattern = SESSION_ID_RE.pattern
    assert pattern.startswith("^") and pattern.endswith("$")
    assert "(?=" not in pattern and "(?!" not in pattern


@pytest.mark.parametrize("branch_id", ["b-1\n", "trunk\n", "\u0661"])
def test_bad_branch_ids(branch_id: str) -> None:
    with pytest.raises(BranchError, match="invalid branch id"):
        check_branch_id(branch_id)


def test_agent_and_tool_names_are_checked_whole() -> None:
    # ``^...$`` with ``match`` let a trailing newline through into queue names and
    # tool schemas.
    with pytest.raises(ValueError, match="agent name"):
        Agent(name="weather\n")
    with pytest.raises(ValueError):
        tool(name="lookup\n")(lambda: None)
    with pytest.raises(ValueError, match="reasoning_effort"):
        RequestOptions(reasoning_effort="low\n")
