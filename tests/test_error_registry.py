"""Issue 22, item 5: an honest error registry. Every code says whether it is worth a
retry and what it means; ``reactq errors`` prints it; docs/errors.md is generated from
it; a provider's 401/403 is ``llm_auth``."""

from __future__ import annotations

import json

import pytest

from reactq import LLMAuthError, LLMBadRequestError, LLMRateLimitError, ReactqError
from reactq.shared.error_codes import ERROR_CODES, error_code
from reactq.shared.errors_doc import DOC_PATH, main, render
from reactq.worker.agent import AgentLoop, LoopConfig
from reactq.worker.agent.llm.scripted_server import Reply
from tests.helpers import clean_env, run_cli
from tests.kernel_support import ListBus, emitter_for, endpoint, user


def test_every_code_carries_retryable_and_a_one_line_meaning() -> None:
    codes = [entry.code for entry in ERROR_CODES]
    assert len(codes) == len(set(codes)), "a code is registered twice"
    for entry in ERROR_CODES:
        assert isinstance(entry.retryable, bool)
        assert entry.meaning and "\n" not in entry.meaning and entry.meaning.endswith(".")
    assert error_code("llm_rate_limited").retryable and not error_code("llm_auth").retryable
    assert LLMRateLimitError("x").retryable is True
    assert ReactqError("x").retryable is False
    with pytest.raises(KeyError, match="no_such_code"):
        error_code("no_such_code")


def test_the_errors_reference_is_up_to_date() -> None:
    assert DOC_PATH.exists(), "docs/errors.md is missing: run `make docs`"
    assert DOC_PATH.read_text(encoding="utf-8") == render(), (
        "docs/errors.md is out of date: run `make docs`"
    )
    assert main(["--check"]) == 0
    for entry in ERROR_CODES:
        assert f"| `{entry.code}` |" in render()


def test_reactq_errors_prints_the_registry() -> None:
    out = run_cli(clean_env(), "errors")
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith("llm_auth "))
    assert "no" in line.split() and "key" in line
    as_json = run_cli(clean_env(), "errors", "--json")
    assert as_json.returncode == 0, as_json.stderr
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r["code"] for r in rows] == [e.code for e in ERROR_CODES]
    assert {"code": "tool_timeout", "retryable": True}.items() <= next(
        r for r in rows if r["code"] == "tool_timeout"
    ).items()


@pytest.mark.parametrize("status", [401, 403])
async def test_a_provider_refusing_the_key_is_llm_auth(status: int) -> None:
    reply = Reply.error(status, "Incorrect API key provided")
    async with endpoint(lambda _request: reply, max_retries=2) as (server, llm):
        with pytest.raises(LLMAuthError) as info:
            await llm.complete([{"role": "user", "content": "hi"}], model="m", tools=None)
        assert info.value.code == "llm_auth" and info.value.details["status"] == status
        assert isinstance(info.value, LLMBadRequestError)  # still a refused request
        assert server.request_count == 1  # not worth a retry
        bus = ListBus()
        result = await AgentLoop(llm, config=LoopConfig(model="m")).run(
            [user("x")], emitter_for(bus)
        )
    assert result.error is not None and result.error.code == "llm_auth"
    assert [e.code for e in bus.of("error")] == ["llm_auth"]
