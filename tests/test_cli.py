"""The `reactq` command as a user runs it: real subprocesses, a real worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT, lookup_then_answer, running_pool

pytestmark = pytest.mark.e2e
REACTQ = str(Path(sys.executable).parent / "reactq")


@pytest.fixture(scope="module")
def cli_env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("cli")
    with running_pool(redis_url, f"{namespace}-cli", tmp, lookup_then_answer) as env:
        yield {**os.environ, **env}


def reactq(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [REACTQ, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_send_streams_the_run_and_exits_zero(cli_env: dict[str, str]) -> None:
    sid = f"cli-{uuid.uuid4().hex[:8]}"
    out = reactq(cli_env, "send", sid, "What is up?", "--agent", "e2e")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("queued")
    assert any(line.startswith('action     lookup(key="What is up?")') for line in lines)
    assert any(line.startswith("result     lookup -> ") for line in lines)
    assert lines[-1] == "final      [completed] answer to: What is up?"


def test_send_json_watch_and_history(cli_env: dict[str, str]) -> None:
    sid = f"cli-{uuid.uuid4().hex[:8]}"
    out = reactq(cli_env, "send", sid, "first", "--agent", "e2e", "--json")
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    types = [e["type"] for e in events if e["type"] != "usage"]
    assert types == ["queued", "started", "action", "observation", "final"]
    assert events[-1]["status"] == "completed"
    assert len({e["turn_id"] for e in events}) == 1

    queued = reactq(cli_env, "send", sid, "second", "--agent", "e2e", "--no-follow")
    assert queued.returncode == 0, queued.stderr
    turn_id = queued.stdout.strip()
    assert turn_id.startswith("t_")

    # watch follows forever: read until the second turn's final, then stop it.
    seen = []
    with subprocess.Popen(
        [REACTQ, "watch", sid, "--from", "0", "--json"],
        env=cli_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    ) as watch:
        assert watch.stdout is not None
        for line in watch.stdout:
            event = json.loads(line)
            seen.append(event)
            if event["type"] == "final" and event["turn_id"] == turn_id:
                break
        watch.terminate()
    assert [e["id"] for e in seen][: len(events)] == [e["id"] for e in events]
    assert seen[-1]["text"] == "answer to: second"

    history = reactq(cli_env, "history", sid)
    assert history.returncode == 0, history.stderr
    assert "user: first" in history.stdout and "assistant: answer to: second" in history.stdout
    as_json = [json.loads(x) for x in reactq(cli_env, "history", sid, "--json").stdout.splitlines()]
    assert [m["role"] for m in as_json] == ["user", "assistant", "tool", "assistant"] * 2


def test_send_refuses_bad_input_with_a_clear_error(cli_env: dict[str, str]) -> None:
    out = reactq(cli_env, "send", "bad id", "hello", "--agent", "e2e")
    assert out.returncode == 2
    assert "invalid session id" in out.stderr and "[invalid_session_id]" in out.stderr
    out = reactq(cli_env, "send", "ok-id", "", "--agent", "e2e")
    assert out.returncode == 2 and "empty" in out.stderr
    out = reactq(cli_env, "send", "ok-id", "hi", "--agent", "ghost")
    assert out.returncode == 2 and "no worker hosts agent 'ghost'" in out.stderr


def test_run_in_process(cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {**cli_env, "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'local.db'}"}
    out = reactq(env, "run", "hello there", "--agents", "tests.pool_agents:agent")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "final      [completed] answer to: hello there"


def test_run_without_an_endpoint_uses_the_labelled_demo_model(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "REACTQ_"))}
    env["REACTQ_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'local.db'}"
    out = reactq(env, "run", "What's the weather in Paris?", "--agents", "examples.weather:agent")
    assert out.returncode == 0, out.stderr
    assert "offline demo model" in out.stderr
    assert 'action     get_weather(city="Paris")' in out.stdout
    assert "[offline demo model]" in out.stdout.splitlines()[-1]
