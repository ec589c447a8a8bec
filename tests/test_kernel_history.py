"""A stored history with a cut tool call is mended before it reaches the model."""

from __future__ import annotations

from reactq.shared.messages import ChatMessage, ToolCall
from reactq.worker.agent.history import repair


def call(cid: str) -> ToolCall:
    return ToolCall(id=cid, name="get_weather", arguments='{"city": "Paris"}')


def test_a_whole_history_comes_back_unchanged() -> None:
    history = [
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="assistant", tool_calls=[call("a")]),
        ChatMessage(role="tool", content="{}", tool_call_id="a", name="get_weather"),
        ChatMessage(role="assistant", content="done"),
    ]
    assert repair(history) == history


def test_a_fork_between_a_call_and_its_result_drops_only_the_call() -> None:
    history = [
        ChatMessage(role="user", content="weather?"),
        ChatMessage(role="assistant", tool_calls=[call("a")]),  # the fork cut here
        ChatMessage(role="user", content="what about Lyon?"),
        ChatMessage(role="assistant", content="thinking", tool_calls=[call("b"), call("c")]),
        ChatMessage(role="tool", content="{}", tool_call_id="b", name="get_weather"),
        ChatMessage(role="tool", content="{}", tool_call_id="zzz", name="get_weather"),
        ChatMessage(role="assistant", content="It is 21 degrees."),
    ]
    mended = repair(history)
    assert [m.role for m in mended] == ["user", "user", "assistant", "tool", "assistant"]
    assert mended[2].content == "thinking"
    assert [c.id for c in mended[2].tool_calls or []] == ["b"]
    assert mended[3].tool_call_id == "b"
