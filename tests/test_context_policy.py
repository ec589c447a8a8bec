"""Windows per model, the self-calibrating token count, and the policy's knobs."""

from __future__ import annotations

import pytest

from reactq.shared.errors import ContextLengthExceededError
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.worker.agent.config import LoopConfig
from reactq.worker.agent.context_policy import ContextPolicy, fit_request, leave_out
from reactq.worker.agent.windows import DEFAULT_CONTEXT_WINDOW, TokenCounter, context_window_for


def test_windows_come_from_the_agent_else_the_table_else_a_default() -> None:
    assert context_window_for("gpt-4o-mini-2024-07-18") == 128_000
    assert context_window_for("openai/gpt-4.1-mini") == 1_047_576
    assert context_window_for("gpt-4") == 8_192
    assert context_window_for("my-local-model") == DEFAULT_CONTEXT_WINDOW
    assert context_window_for("gpt-4", 32_000) == 32_000


def test_the_count_calibrates_from_the_providers_prompt_tokens() -> None:
    counter = TokenCounter()
    wire = [{"role": "user", "content": "x" * 4000}]
    assert 1000 < counter.count("m", wire) < 1020
    counter.calibrate("m", counter.chars(wire), 2000)  # this tokenizer packs 2 chars a token
    assert 1990 < counter.count("m", wire) < 2030
    assert counter.count("other", wire) < 1100  # per model


def test_old_tool_results_are_shrunk_and_a_huge_message_is_named() -> None:
    counter, policy = TokenCounter(), ContextPolicy()
    wire = [
        {"role": "system", "content": "s"},
        {"role": "tool", "tool_call_id": "a", "content": "r" * 8000},
        {"role": "user", "content": "now"},
    ]
    out, tokens = fit_request(
        wire, counter=counter, model="m", window=1000, policy=policy, protect_from=2
    )
    assert tokens <= 1000 and "characters omitted" in out[1]["content"]
    assert wire[1]["content"] == "r" * 8000  # a copy: the stored history keeps it whole
    with pytest.raises(ContextLengthExceededError, match="message 3 \\(user, this turn's"):
        fit_request(
            [*wire[:2], {"role": "user", "content": "u" * 9000}],
            counter=counter,
            model="m",
            window=1000,
            policy=policy,
            protect_from=2,
        )


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"shrink_at": 0}, "shrink_at"),
        ({"compact_at": 1.5}, "compact_at"),
        ({"keep_recent": 0.8}, "keep_recent"),
        ({"tool_result_chars": 10}, "tool_result_chars"),
        ({"summary_prompt": " "}, "summary_prompt"),
    ],
)
def test_bad_policy_knobs_are_refused_by_name(kwargs: dict[str, object], names: str) -> None:
    with pytest.raises(ValueError, match=names):
        ContextPolicy(**kwargs)  # type: ignore[arg-type]


def test_the_loop_config_checks_the_window_and_the_policy() -> None:
    assert LoopConfig().context_policy == ContextPolicy()  # on by default
    assert LoopConfig(context_policy=None).context_policy is None
    with pytest.raises(ValueError, match="context_window"):
        LoopConfig(context_window=10)
    with pytest.raises(ValueError, match="context_policy"):
        LoopConfig(context_policy={"compact_at": 0.5})  # type: ignore[arg-type]


def _turn(first: int, turn_id: str, *, tool: bool = False) -> list[ChatMessage]:
    """A stored turn from sequence ``first``: its message, a tool step if asked, the answer."""
    messages = [ChatMessage(role="user", content=f"q {turn_id}", turn_id=turn_id)]
    if tool:
        call = ToolCall(id=f"c{first}", name="lookup", arguments="{}")
        messages += [
            ChatMessage(role="assistant", tool_calls=[call], turn_id=turn_id),
            ChatMessage(role="tool", content="r", tool_call_id=call.id, turn_id=turn_id),
        ]
    messages.append(ChatMessage(role="assistant", content="a", turn_id=turn_id))
    return [m.model_copy(update={"sequence": first + i}) for i, m in enumerate(messages)]


def test_leaving_out_takes_whole_turns_from_the_oldest_and_keeps_a_summary() -> None:
    summary = ChatMessage(role="user", content="[Summary]", summary_of=4, sequence=5)
    history = [summary, *_turn(6, "t1", tool=True), *_turn(10, "t2"), *_turn(12, "t3")]
    sizes = [10] * len(history)
    cut = leave_out(history, sizes, 15)  # more than t1's first message: all of t1
    assert cut is not None and cut.turn_ids == ["t1"]
    assert [m.sequence for m in cut.left_out] == [6, 7, 8, 9]  # the call with its result
    assert cut.kept == [summary, *history[5:]]
    cut = leave_out(history, sizes, 45)
    assert cut is not None and cut.turn_ids == ["t1", "t2"]
    everything = leave_out(history, sizes, 10_000)  # not enough: every earlier turn
    assert everything is not None and everything.kept == [summary]
    assert leave_out(history, sizes, 0) is None
    assert leave_out([summary], [10], 50) is None  # a summary alone is never left out
