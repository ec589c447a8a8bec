"""Issue 28, item 4: text that cannot be stored (a lone surrogate, NUL) is repaired or
refused where it enters, in the kernel: the model's answer (content, reasoning, tool
calls, streamed or not), a tool's output and errors, a storage error's text, a file
name; and a history an older version stored with such text still reaches the model.
The scripted OpenAI-compatible server and the real SDK; no worker (tests/
test_text_edges_pool.py runs them)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from sqlalchemy.exc import StatementError

from reactq.shared.errors import InvalidTextError
from reactq.shared.messages import ChatMessage
from reactq.shared.text_checks import REPLACEMENT, repair_json, repair_text, unencodable_at
from reactq.shared.turn_inputs import check_text
from reactq.shared.workspace import WorkspaceError, split_path
from reactq.worker.agent import AgentLoop, LoopConfig, Registry, tool
from reactq.worker.agent.executor import STORAGE_ERROR
from reactq.worker.agent.llm.direct import encode_body
from reactq.worker.agent.llm.parse import from_completion_json
from reactq.worker.agent.llm.scripted_server import Reply
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user

LONE = "\ud800"
FFFD = REPLACEMENT


def completion(message: dict[str, Any]) -> bytes:
    """A completion body as an endpoint that escapes non-ASCII sends it."""
    body = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    return json.dumps(body).encode()


# --- the helpers ---------------------------------------------------------------------------


def test_repair_replaces_lone_surrogates_and_nul_and_joins_a_split_pair() -> None:
    assert repair_text(f"a{LONE}b\x00c") == f"a{FFFD}b{FFFD}c"
    assert repair_text("\ud83d\ude00") == "😀"  # a pair as two code points: one character
    assert repair_text("x\x00", nul=False) == "x\x00"
    assert repair_text("plain é") == "plain é"
    value = {"k\udc80": [1, {"v": f"{LONE}"}], "ok": 2**63}
    assert repair_json(value) == {f"k{FFFD}": [1, {"v": FFFD}], "ok": 2**63}
    clean = {"a": [1, "b"]}
    assert repair_json(clean) is clean


def test_the_walkers_take_json_deeper_than_the_recursion_limit() -> None:
    deep: Any = LONE
    for _ in range(5000):
        deep = [deep]
    assert unencodable_at({"m": deep}) == "m" + "[0]" * 5000
    fixed = repair_json(deep)
    for _ in range(5000):
        fixed = fixed[0]
    assert fixed == FFFD


def test_check_text_names_where_the_text_is() -> None:
    with pytest.raises(InvalidTextError) as caught:
        check_text({"tags": ["ok", f"x{LONE}"]}, "metadata")
    assert caught.value.details["field"] == "metadata.tags[1]"
    check_text({"tags": ["😀", "\x00"]}, "metadata")  # NUL is UTF-8: stores escape it


# --- (a) the model's answer ----------------------------------------------------------------


def test_a_completion_with_lone_surrogates_is_repaired_on_every_field() -> None:
    data = json.loads(
        completion(
            {
                "role": "assistant",
                "content": f"hi {LONE}\x00",
                "reasoning_content": f"think {LONE}",
                "tool_calls": [
                    {
                        "id": f"c{LONE}",
                        "type": "function",
                        "function": {"name": f"f{LONE}", "arguments": f'{{"x": "{LONE}"}}'},
                    }
                ],
                "annotations": [{"note": LONE}],
            }
        )
    )
    response = from_completion_json(data)
    assert response.content == f"hi {FFFD}{FFFD}"
    assert response.reasoning == f"think {FFFD}"
    call = response.tool_calls[0]
    assert (call.id, call.name, call.arguments) == (f"c{FFFD}", f"f{FFFD}", f'{{"x": "{FFFD}"}}')
    assert response.extra == {"annotations": [{"note": FFFD}]}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_lone_surrogate_in_an_answer_is_repaired_and_the_next_call_goes(
    stream: bool,
) -> None:
    # Before: the answer was kept with its lone surrogate, and the next request could not
    # be encoded: every later call of the session ended llm_undecodable ("the endpoint
    # answered an unusable body: UnicodeEncodeError"), blaming the endpoint.
    handler = scripted(Reply.text(f"odd {LONE} answer"), Reply.text("second"))
    async with endpoint(handler) as (_, llm):
        first = await AgentLoop(llm, Registry([]), LoopConfig(model="m", stream=stream)).run(
            [user("x")], emitter_for(ListBus())
        )
        assert first.text == f"odd {FFFD} answer"
        history = [user("x"), *first.messages, user("again")]
        second = await AgentLoop(llm, Registry([]), LoopConfig(model="m", stream=stream)).run(
            history, emitter_for(ListBus(), "t2")
        )
    assert second.status == "completed", second
    assert second.text == "second"


async def test_invalid_utf8_in_a_body_is_read_as_replacement_characters() -> None:
    body = b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "a\xff\xfeb"}}]}'
    async with endpoint(scripted(Reply.raw(200, body))) as (_, llm):
        result = await AgentLoop(llm, Registry([]), LoopConfig(model="m")).run(
            [user("x")], emitter_for(ListBus())
        )
    assert result.status == "completed", result
    assert result.text == f"a{FFFD}{FFFD}b"


@pytest.mark.parametrize("sdk", [False, True])
async def test_a_history_holding_a_lone_surrogate_still_reaches_the_model(sdk: bool) -> None:
    # A message an older version stored (the store keeps it faithfully): the request is
    # ours, so it is repaired on the way out, and the turn completes.
    assert encode_body({"m": LONE}) == f'{{"m":"{FFFD}"}}'.encode()
    old = ChatMessage(role="assistant", content=f"old {LONE}", turn_id="t0")
    async with endpoint(scripted(Reply.text("fine")), sdk=sdk) as (server, llm):
        result = await AgentLoop(llm, Registry([]), LoopConfig(model="m")).run(
            [user("a"), old, user("b")], emitter_for(ListBus())
        )
    assert result.status == "completed", result
    assert server.requests[0]["messages"][-2]["content"] == f"old {FFFD}"


# --- (b) a tool's output, (f) a storage error ------------------------------------------------


@tool
async def odd_error(kind: str) -> str:
    """Fails in odd ways."""
    if kind == "storage":
        raise StatementError(
            "(sqlite3.ProgrammingError) bad", "INSERT INTO file_actions", {"path": "secret"}, None
        )
    if kind == "sqlite":
        raise sqlite3.IntegrityError("UNIQUE constraint failed: secret_table.id")
    raise ValueError(f"bad {LONE} input")


async def test_a_tool_error_with_a_lone_surrogate_is_repaired_before_the_next_call() -> None:
    # Before: the error text kept its lone surrogate, and the model's next request failed
    # to encode (llm_undecodable).
    handler = scripted(Reply.tool_calls([("odd_error", {"kind": "value"})]), Reply.text("done"))
    bus = ListBus()
    async with endpoint(handler) as (server, llm):
        result = await AgentLoop(llm, Registry([odd_error]), LoopConfig(model="m")).run(
            [user("x")], emitter_for(bus)
        )
    assert result.status == "completed", result
    assert (
        server.requests[1]["messages"][-1]["content"]
        == "[tool_error] ValueError: bad \\ud800 input"
    )
    assert bus.of("tool_failed")[0].error == "ValueError: bad \\ud800 input"


@pytest.mark.parametrize("kind", ["storage", "sqlite"])
async def test_a_storage_error_reaches_the_model_as_a_generic_message(kind: str) -> None:
    # Before: "[tool_error] StatementError: (sqlite3.ProgrammingError) INSERT INTO
    # file_actions ... [parameters: ...]": the statement and its parameters, for the model.
    handler = scripted(Reply.tool_calls([("odd_error", {"kind": kind})]), Reply.text("done"))
    bus = ListBus()
    async with endpoint(handler) as (server, llm):
        await AgentLoop(llm, Registry([odd_error]), LoopConfig(model="m")).run(
            [user("x")], emitter_for(bus)
        )
    seen = server.requests[1]["messages"][-1]["content"]
    assert seen == f"[tool_storage_error] {STORAGE_ERROR}"
    assert "secret" not in json.dumps(server.requests[1])
    failed = bus.of("tool_failed")[0]
    assert (failed.code, failed.error) == ("tool_storage_error", STORAGE_ERROR)


async def test_arguments_spelling_a_lone_surrogate_reach_the_tool_repaired() -> None:
    seen: list[str] = []

    @tool
    async def echo(text: str) -> str:
        """Echo."""
        seen.append(text)
        return text

    raw = '{"text": "a\\udc80b"}'  # JSON's spelling of a lone surrogate: ASCII text
    handler = scripted(Reply.tool_calls([("echo", raw)]), Reply.text("done"))
    bus = ListBus()
    async with endpoint(handler) as (_, llm):
        result = await AgentLoop(llm, Registry([echo]), LoopConfig(model="m")).run(
            [user("x")], emitter_for(bus)
        )
    assert result.status == "completed", result
    assert seen == [f"a{FFFD}b"]
    assert bus.of("action")[0].args == {"text": f"a{FFFD}b"}


# --- (e) file names --------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["a\udc80.txt", "dir/\ud800/x", "a\x00.txt"])
def test_a_workspace_path_ut8_cannot_carry_is_refused(path: str) -> None:
    # Before: "a\udc80.txt" was accepted and written as a name of raw bytes
    # (surrogateescape), whose undo record the store then refused.
    with pytest.raises(WorkspaceError) as caught:
        split_path(path)
    assert "surrogate" in caught.value.message or "NUL" in caught.value.message
