"""The `reactq` command as a user runs it: real subprocesses, a real worker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from reactq import Producer, Settings
from reactq.shared.keys import Keys
from reactq.shared.protocol.workers import WorkerRegistry
from tests.helpers import ROOT, running_pool, sleepy_lookup

pytestmark = pytest.mark.e2e
REACTQ = str(Path(sys.executable).parent / "reactq")
# Short, so that a test can outwait it: workers beat three times per interval.
HEARTBEAT = "0.6"


@pytest.fixture(scope="module")
def cli_pool(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, str], Path]]:
    """The environment of one real worker (and the folder of its log)."""
    tmp = tmp_path_factory.mktemp("cli")
    with running_pool(
        redis_url, f"{namespace}-cli", tmp, sleepy_lookup, REACTQ_HEARTBEAT_SECONDS=HEARTBEAT
    ) as env:
        yield {**os.environ, **env}, tmp


@pytest.fixture(scope="module")
def cli_env(cli_pool: tuple[dict[str, str], Path]) -> dict[str, str]:
    return cli_pool[0]


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


# --- issue 21: what a newcomer meets when something goes wrong ---------------------------


def test_watch_history_and_branches_of_an_unknown_session_fail(cli_env: dict[str, str]) -> None:
    ghost = f"ghost-{uuid.uuid4().hex[:8]}"
    for command in (["watch", ghost], ["history", ghost], ["branches", ghost]):
        out = reactq(cli_env, *command, timeout=30)
        assert out.returncode == 2, (command, out)
        assert f"no session '{ghost}'" in out.stderr and "[session_not_found]" in out.stderr
    # A session that exists only as a stream (its first turn not yet stored) is watchable.
    sid = f"cli-{uuid.uuid4().hex[:8]}"
    sent = reactq(cli_env, "send", sid, "sleep=1 hello", "--agent", "e2e", "--no-follow")
    assert sent.returncode == 0, sent.stderr
    with subprocess.Popen(
        [REACTQ, "watch", sid, "--from", "0"], env=cli_env, cwd=ROOT, stdout=subprocess.PIPE,
        text=True,
    ) as watch:  # fmt: skip
        try:
            assert watch.stdout is not None
            first = watch.stdout.readline()
        finally:
            watch.terminate()  # it follows forever
    assert "queued" in first


def _register_gone_worker(env: dict[str, str], agent: str) -> None:
    """What a stopped worker leaves behind: its agent known, no live worker for it."""

    async def go() -> None:
        client = Redis.from_url(env["REACTQ_REDIS_URL"])
        try:
            registry = WorkerRegistry(client, Keys(env["REACTQ_NAMESPACE"]))
            await registry.register_agents([agent], "gone-worker")
            await registry.forget_worker("gone-worker")
        finally:
            await client.aclose()

    asyncio.run(go())


def test_send_says_when_no_live_worker_hosts_the_agent(cli_env: dict[str, str]) -> None:
    _register_gone_worker(cli_env, "lonely")
    sid = f"cli-{uuid.uuid4().hex[:8]}"
    out = reactq(cli_env, "send", sid, "anyone?", "--agent", "lonely", "--no-follow")
    assert out.returncode == 0, out.stderr
    assert "no worker hosting agent 'lonely' has been seen in the last 0.6 s" in out.stderr
    assert "waits in the queue" in out.stderr
    assert reactq(cli_env, "cancel", out.stdout.strip()).returncode == 0

    # The live worker beats: long after it started, a turn for its agent gets no notice.
    time.sleep(float(HEARTBEAT) * 2)
    out = reactq(cli_env, "send", sid + "-live", "hello", "--agent", "e2e")
    assert out.returncode == 0, out.stderr
    assert "no worker" not in out.stderr


def test_watch_tags_interleaved_turns_and_says_cancelled_once(cli_env: dict[str, str]) -> None:
    sid = f"cli-{uuid.uuid4().hex[:8]}"
    lines: list[str] = []
    first = reactq(cli_env, "send", sid, "sleep=2 first", "--agent", "e2e", "--no-follow")
    assert first.returncode == 0, first.stderr
    ids = [first.stdout.strip()]

    async def queue_two_and_cancel_one() -> None:
        # Behind the running first turn (two model calls of 2 s), within milliseconds.
        async with Producer(Settings.from_env(cli_env)) as producer:
            for message in ("second", "third"):
                ids.append((await producer.submit(sid, message, agent="e2e")).turn_id)
            assert (await producer.cancel(ids[1])).outcome == "cancelled"

    with subprocess.Popen(
        [REACTQ, "watch", sid, "--from", "0"], env=cli_env, cwd=ROOT, stdout=subprocess.PIPE,
        text=True,
    ) as watch:  # fmt: skip
        try:
            asyncio.run(queue_two_and_cancel_one())
            assert watch.stdout is not None
            for line in watch.stdout:
                lines.append(line.rstrip("\n"))
                if sum(" final " in seen for seen in lines) == len(ids):
                    break  # every turn ended (tagged or not: a regression fails, not hangs)
        finally:
            watch.terminate()  # it follows forever
    # Every line starts with its turn's tag, and the turns did interleave.
    tags = [line.split(" ", 1)[0] for line in lines]
    assert set(tags) == {i[:8] for i in ids}, lines
    assert tags != sorted(tags, key=[i[:8] for i in ids].index), lines
    cancelled = [line for line in lines if line.startswith(ids[1][:8]) and " final " in line]
    assert len(cancelled) == 1, lines
    assert cancelled[0].count("cancelled before it started") == 1
    assert "cancelled: cancelled" not in cancelled[0]


def test_the_worker_log_is_quiet_by_default(cli_pool: tuple[dict[str, str], Path]) -> None:
    env, folder = cli_pool
    out = reactq(env, "send", f"cli-{uuid.uuid4().hex[:8]}", "log me", "--agent", "e2e")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    time.sleep(0.5)  # the worker's last lines of that turn
    log = (folder / "worker-0.log").read_text()
    assert "ready: agents e2e on queues" in log and "state database" in log
    assert "turn" in log and "finished" in log  # reactq's own lines stay
    assert "alembic" not in log, log
    assert "HTTP Request" not in log, log  # no line per model request
    assert "[data=" not in log and "received" not in log, log  # no line per drain task
    assert ":**@" not in log, log  # no mask where the URL has no password
