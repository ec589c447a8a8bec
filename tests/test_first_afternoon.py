"""A new user's first afternoon, without a traceback (issue 37).

Each case is what a user met from a fresh clone: a Redis URL without a Redis scheme or
naming a database the server lacks, a bug inside an agent module, the model and key
reactq picks when none is given, a ``.env`` beside the project, a model that refuses
the key, the approval hint, the gateway's 202 for an agent no worker runs, and the
demo, which must show the pool at work. The command-line cases run the real
``reactq`` console script and check what a user reads: one line on stderr, its code,
the exit status. (The missing extras are in ``test_packaging.py``, in a venv that
really lacks them.)
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from reactq import Producer, ServiceUnavailableError, SyncProducer
from reactq.producer.render import render
from reactq.shared.errors import LLMAuthError, LLMServerError
from reactq.shared.events import ApprovalRequestedEvent
from reactq.shared.keys import Keys
from reactq.shared.protocol.workers import WorkerRegistry
from reactq.shared.settings import Settings
from reactq.worker.agent.config import (
    DEFAULT_ERROR_FALLBACK_MESSAGE,
    DEFAULT_ERROR_PERMANENT_MESSAGE,
    LoopConfig,
)
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from tests.conftest import free_port
from tests.gateway_support import start_gateway
from tests.helpers import clean_env, command_env, last_user_text, run_cli


def one_line(out: subprocess.CompletedProcess[str], code: str, *needles: str) -> str:
    """The one stderr line of a refused command: ``reactq: error: ... [code]``, exit 2."""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    line = lines[0]
    assert line.startswith("reactq: error: ") and line.endswith(f"[{code}]"), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    assert out.returncode == 2, (out.returncode, line)
    return line


@pytest.fixture
def env(tmp_path: Path, redis_url: str, namespace: str) -> dict[str, str]:
    return command_env(tmp_path, redis_url, f"{namespace}-first")


WORKER = ("worker", "--agents", "reactq.demo.weather:agent")
SEND = ("send", "s-first", "hi", "--agent", "weather")
SERVE = ("serve", "--port", "0")


def test_a_redis_url_without_a_redis_scheme(env: dict[str, str], tmp_path: Path) -> None:
    for url, command in (
        ("localhost:6379", SEND),
        ("http://localhost:6379/0", WORKER),
        ("localhost:6379/0", SERVE),
    ):
        env["REACTQ_REDIS_URL"] = url
        out = run_cli(env, *command, cwd=tmp_path)
        one_line(out, "config_error", "REACTQ_REDIS_URL", "not a Redis URL", "redis://")
    env["REACTQ_BROKER_URL"] = "guest:secret@localhost:5672"
    env["REACTQ_REDIS_URL"] = "redis://localhost:6379/0"
    line = one_line(run_cli(env, *SEND, cwd=tmp_path), "config_error", "REACTQ_BROKER_URL")
    assert "secret" not in line  # only the scheme is named: a URL may hold a password


def test_a_redis_database_the_server_lacks(
    env: dict[str, str], redis_url: str, tmp_path: Path
) -> None:
    base = redis_url.rsplit("/", 1)[0]
    env["REACTQ_REDIS_URL"] = f"{base}/9999"
    for command in (SEND, WORKER, SERVE):
        out = run_cli(env, *command, cwd=tmp_path)
        line = one_line(out, "config_error", "no database 9999", "REACTQ_REDIS_URL")
        assert "start it" not in line  # Redis answered: not an outage
    # The broker's Redis, named apart.
    env["REACTQ_REDIS_URL"] = redis_url
    env["REACTQ_BROKER_URL"] = f"{base}/9998"
    out = run_cli(env, *WORKER, cwd=tmp_path)
    one_line(out, "config_error", "broker", "no database 9998", "REACTQ_BROKER_URL")


def test_the_python_producer_raises_service_unavailable(tmp_path: Path) -> None:
    port = free_port()
    settings = Settings.from_env(
        {},
        redis_url=f"redis://127.0.0.1:{port}/0",
        database_url=f"postgresql+asyncpg://reactq@127.0.0.1:{free_port()}/reactq",
    )

    async def calls() -> None:
        async with Producer(settings) as producer:
            with pytest.raises(ServiceUnavailableError) as redis_down:
                await producer.submit("s-down", "hi", agent="weather")
            with pytest.raises(ServiceUnavailableError) as db_down:
                await producer.history("s-down")
        assert redis_down.value.details["service"] == "redis"
        assert f"127.0.0.1:{port}" in redis_down.value.message
        assert "REACTQ_REDIS_URL" in redis_down.value.message
        assert db_down.value.details["service"] == "database"

    asyncio.run(calls())
    # The sync producer raises the same, from its own thread's loop.
    with SyncProducer(settings) as sync, pytest.raises(ServiceUnavailableError):
        sync.submit("s-down", "hi", agent="weather")


BUGGY = """from reactq import Agent


def helper():
    return {}["missing"]


TABLE = helper()
agent = Agent(name="buggy")
"""


def test_a_bug_in_an_agent_module_names_its_file_and_line(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "buggy.py").write_text(BUGGY)
    out = run_cli(env, "run", "hi", "--agents", "buggy", cwd=tmp_path)
    one_line(out, "config_error", f"{tmp_path / 'buggy.py'}:5", "KeyError: 'missing'")
    (tmp_path / "broken.py").write_text("from reactq import Agent\nagent = Agent(name='b'\n")
    out = run_cli(env, "run", "hi", "--agents", "broken", cwd=tmp_path)
    one_line(out, "config_error", f"{tmp_path / 'broken.py'}:2", "SyntaxError")
    # --loglevel DEBUG: the traceback first, then the same line.
    out = run_cli(env, "worker", "--agents", "buggy", "--loglevel", "DEBUG", cwd=tmp_path)
    assert out.returncode == 2
    assert "Traceback" in out.stderr and 'buggy.py", line 5, in helper' in out.stderr
    assert out.stderr.strip().splitlines()[-1].endswith("[config_error]")


@pytest.fixture
def model() -> Iterator[ScriptedServer]:
    server = ScriptedServer(lambda r: Reply.text(f"echo: {last_user_text(r)}")).start_in_thread()
    try:
        yield server
    finally:
        server.stop()


def test_the_defaults_are_said_and_a_dotenv_is_read(tmp_path: Path, model: ScriptedServer) -> None:
    (tmp_path / "plain.py").write_text("from reactq import Agent\nagent = Agent(name='plain')\n")
    (tmp_path / ".env").write_text(
        f"# the project's settings\nOPENAI_BASE_URL={model.base_url}\n"
        f"REACTQ_DATABASE_URL=sqlite+aiosqlite:///{tmp_path / 'dot.db'}\n"
    )
    env = clean_env()
    out = run_cli(env, "run", "hi", "--agents", "plain", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    said = out.stderr.splitlines()
    assert f"reactq: read {tmp_path / '.env'} (OPENAI_BASE_URL, REACTQ_DATABASE_URL)" in said[0]
    assert "REACTQ_DOTENV=0" in said[0]
    assert any("names no model" in s and "'gpt-4o-mini'" in s for s in said), said
    assert any("sk-no-key-required" in s and model.base_url in s for s in said), said
    # What was said is what went out.
    assert model.requests[-1]["model"] == "gpt-4o-mini"
    assert model.request_headers[-1]["authorization"] == "Bearer sk-no-key-required"
    assert "echo: hi" in out.stdout and (tmp_path / "dot.db").exists()

    # The environment wins over the file; REACTQ_DOTENV=0 ignores it.
    sent = len(model.requests)
    out = run_cli(
        {**env, "REACTQ_MODEL": "named-model", "OPENAI_API_KEY": "sk-mine"},
        "run",
        "hi",
        "--agents",
        "plain",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "names no model" not in out.stderr and "placeholder" not in out.stderr
    assert model.requests[-1]["model"] == "named-model"
    out = run_cli({**env, "REACTQ_DOTENV": "0"}, "run", "hi", "--agents", "plain", cwd=tmp_path)
    assert "read " not in out.stderr and "offline demo model" in out.stderr
    assert len(model.requests) == sent + 1  # the file's endpoint was not used


def test_a_refused_key_does_not_invite_a_retry(tmp_path: Path) -> None:
    server = ScriptedServer(lambda r: Reply.error(401, "Incorrect API key provided"))
    server.start_in_thread()
    env = clean_env(
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY="sk-wrong",
        REACTQ_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
    )
    try:
        out = run_cli(
            env, "run", "hi", "--agents", "reactq.demo.weather:agent", "--json", cwd=tmp_path
        )
    finally:
        server.stop()
    assert out.returncode == 1
    final = json.loads(out.stdout.strip().splitlines()[-1])
    assert (final["type"], final["status"], final["code"]) == ("final", "error", "llm_auth")
    assert final["text"] == DEFAULT_ERROR_PERMANENT_MESSAGE
    assert "try again in a moment" not in final["text"]
    # A failure a retry may mend still says so; an agent's own text is its own.
    config = LoopConfig(model="m")
    assert config.error_text(LLMServerError("503")) == DEFAULT_ERROR_FALLBACK_MESSAGE
    assert config.error_text(LLMAuthError("401")) == DEFAULT_ERROR_PERMANENT_MESSAGE
    own = LoopConfig(model="m", error_fallback_message="Oops.")
    assert own.error_text(LLMAuthError("401")) == "Oops."


def test_the_approval_hint_names_each_call() -> None:
    calls: list[dict[str, Any]] = [
        {"call_id": "call_a", "tool": "pay", "arguments": {"amount": 5}},
        {"call_id": "call_b", "tool": "mail", "arguments": {"to": "x"}},
    ]
    event = ApprovalRequestedEvent(session_id="s", turn_id="t_1", seq=1, calls=calls)
    line = render(event) or ""
    assert "reactq approve|deny t_1 call_a" in line
    assert "reactq approve|deny t_1 call_b" in line
    assert not re.search(r"\bCALL\b", line)


async def _announce(redis_url: str, namespace: str, agent: str, seen_ago: float) -> None:
    client = Redis.from_url(redis_url)
    try:
        registry = WorkerRegistry(client, Keys(namespace))
        await registry.register_agents([agent], f"{agent}-worker")
        if seen_ago:
            raw = await client.hget(Keys(namespace).workers, f"{agent}-worker")
            stamp = json.loads(raw or "{}")
            stamp["ts"] -= seen_ago
            await client.hset(Keys(namespace).workers, f"{agent}-worker", json.dumps(stamp))
    finally:
        await client.aclose()


def test_the_gateway_202_says_when_no_worker_is_live(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    ns = f"{namespace}-hint"
    asyncio.run(_announce(redis_url, ns, "gone", seen_ago=3600))
    asyncio.run(_announce(redis_url, ns, "here", seen_ago=0))
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": ns,
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
    }
    with start_gateway(env, tmp_path, None) as gateway, gateway.client() as client:
        gone = client.post("/v1/sessions/s-gone/turns", json={"message": "hi", "agent": "gone"})
        here = client.post("/v1/sessions/s-here/turns", json={"message": "hi", "agent": "here"})
    assert gone.status_code == here.status_code == 202
    hint = gone.json()["hint"]
    assert "no worker hosting agent 'gone'" in hint and "reactq worker" in hint
    assert here.json()["hint"] is None


def test_the_demo_shows_the_pool(
    redis_url: str, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = clean_env(
        REACTQ_REDIS_URL=redis_url, REACTQ_NAMESPACE=f"{namespace}-demo", TMPDIR=str(scratch)
    )
    out = run_cli(env, "demo", cwd=tmp_path, timeout=180)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    lines = out.stdout.splitlines()
    summary = next(line for line in lines if line.startswith("summary: "))
    assert "6/6 turns completed over 4 sessions (2 double-texted)" in summary
    assert "order kept per session: yes" in summary
    (per_worker,) = [line for line in lines if line.startswith("turns started per worker: ")]
    counts = [int(n) for n in re.findall(r"worker-\d (\d+)", per_worker)]
    assert len(counts) == 2 and all(n > 0 for n in counts), per_worker
    (killed,) = [line for line in lines if "was SIGKILLed mid-turn" in line]
    assert re.search(r"finished by worker-\d; turn t_\w+ resumed .*\(attempt 2\)", killed)
    # Each double-texted session's two turns, in order: its second question answered last.
    finals = [line for line in lines if "] final " in line]
    assert len(finals) == 6 and all("[completed]" in f for f in finals)
    # It leaves nothing behind: no folder beside the user's files, no logs in the temp dir.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]
    assert list(scratch.iterdir()) == []
