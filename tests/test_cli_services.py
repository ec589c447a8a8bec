"""A service that cannot be reached is one line, not a traceback (issue 21, item 1).

Each case runs the real ``reactq`` command against a real Redis, PostgreSQL or
RabbitMQ on 127.0.0.1 that is down (a port nothing listens on), refuses the
credentials, or lacks the database, and expects what every other CLI error
gives: ``reactq: error: <what failed, the URL with its password redacted, the
setting to change> [service_unavailable]`` and a non-zero exit.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync
from redis.asyncio import Redis

from reactq.shared.keys import Keys
from reactq.shared.protocol.workers import WorkerRegistry
from tests.conftest import free_port, unavailable
from tests.helpers import command_env, run_cli

SECRET = "hunter2-Secret-77"


def one_line_error(out: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The single stderr line of a failed command, checked for ``needles``."""
    assert out.returncode != 0, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    line = lines[0]
    assert line.startswith("reactq: error: ") and line.endswith("[service_unavailable]"), line
    assert "Traceback" not in out.stderr
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    assert SECRET not in out.stderr + out.stdout
    return line


@pytest.fixture
def env(tmp_path: Path, redis_url: str, namespace: str) -> dict[str, str]:
    """A reachable Redis and a private SQLite file: each test breaks one service."""
    return command_env(tmp_path, redis_url, f"{namespace}-svc")


@pytest.fixture(scope="module")
def hosted(redis_url: str, namespace: str) -> str:
    """An agent the registry knows, so that ``send`` gets as far as the broker."""

    async def register() -> None:
        client = Redis.from_url(redis_url)
        try:
            await WorkerRegistry(client, Keys(f"{namespace}-svc")).register_agents(
                ["svc"], "svc-test-worker"
            )
        finally:
            await client.aclose()

    asyncio.run(register())
    return "svc"


@pytest.fixture(scope="module")
def password_redis() -> Iterator[str]:
    """A private redis-server that requires a password; yields its URL without one."""
    binary = shutil.which("redis-server")
    if binary is None:
        unavailable("redis-server is not installed")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="reactq-redis-auth-")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir,
         "--requirepass", SECRET],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis_sync.Redis(port=port, password=SECRET)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis_sync.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                unavailable("a password-protected redis-server did not start")
            time.sleep(0.05)
    client.close()
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


# --- Redis ------------------------------------------------------------------------------


def test_send_with_redis_down(env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    env["REACTQ_REDIS_URL"] = f"redis://:{SECRET}@127.0.0.1:{port}/0"
    out = run_cli(env, "send", "s", "hi", "--agent", "weather", cwd=tmp_path)
    line = one_line_error(
        out, "Redis", f"redis://:[REDACTED]@127.0.0.1:{port}/0", "REACTQ_REDIS_URL"
    )
    assert "cannot reach" in line
    assert out.returncode == 3


def test_worker_with_redis_down(env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    env["REACTQ_REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
    out = run_cli(env, "worker", "--agents", "reactq.demo.weather:agent", cwd=tmp_path)
    one_line_error(out, "Redis", f"redis://127.0.0.1:{port}/0", "REACTQ_REDIS_URL")


def test_redis_that_wants_a_password(
    env: dict[str, str], password_redis: str, tmp_path: Path
) -> None:
    env["REACTQ_REDIS_URL"] = password_redis
    out = run_cli(env, "send", "s", "hi", "--agent", "weather", cwd=tmp_path)
    one_line_error(out, "Redis", password_redis, "refused", "REACTQ_REDIS_URL")

    wrong = password_redis.replace("redis://", f"redis://:{SECRET}x@")
    env["REACTQ_REDIS_URL"] = wrong
    out = run_cli(env, "worker", "--agents", "reactq.demo.weather:agent", cwd=tmp_path)
    one_line_error(out, "Redis", "refused", "REACTQ_REDIS_URL")


# --- the state database -----------------------------------------------------------------


def test_history_with_postgres_down(env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    url = f"postgresql+asyncpg://reactq:{SECRET}@127.0.0.1:{port}/reactq"
    env["REACTQ_DATABASE_URL"] = url
    out = run_cli(env, "history", "s", cwd=tmp_path)
    one_line_error(
        out,
        "state database",
        f"postgresql+asyncpg://reactq:[REDACTED]@127.0.0.1:{port}/reactq",
        "REACTQ_DATABASE_URL",
    )


def test_postgres_without_the_database(
    env: dict[str, str], postgres_url: str, tmp_path: Path
) -> None:
    missing = postgres_url.rpartition("/")[0] + "/reactq_no_such_db"
    env["REACTQ_DATABASE_URL"] = missing
    out = run_cli(env, "history", "s", cwd=tmp_path)
    one_line_error(out, "state database", "reactq_no_such_db", "REACTQ_DATABASE_URL")
    out = run_cli(env, "worker", "--agents", "reactq.demo.weather:agent", cwd=tmp_path)
    one_line_error(out, "state database", "reactq_no_such_db", "REACTQ_DATABASE_URL")


def test_sqlite_file_that_cannot_be_created(env: dict[str, str], tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be")
    env["REACTQ_DATABASE_URL"] = f"sqlite+aiosqlite:///{blocker}/state.db"
    out = run_cli(env, "db", "upgrade", cwd=tmp_path)
    one_line_error(out, "state database", str(blocker), "REACTQ_DATABASE_URL")


# --- the broker -------------------------------------------------------------------------


def test_send_with_the_broker_down(env: dict[str, str], hosted: str, tmp_path: Path) -> None:
    port = free_port()
    env["REACTQ_BROKER_URL"] = f"amqp://guest:{SECRET}@127.0.0.1:{port}//"
    out = run_cli(env, "send", "s-broker", "hi", "--agent", hosted, cwd=tmp_path)
    one_line_error(
        out, "broker", f"amqp://guest:[REDACTED]@127.0.0.1:{port}//", "REACTQ_BROKER_URL"
    )


def test_broker_that_refuses_the_credentials(
    env: dict[str, str], hosted: str, amqp_url: str, tmp_path: Path
) -> None:
    user = amqp_url.split("://", 1)[1].split(":", 1)[0]
    wrong = amqp_url.replace(amqp_url.split("@", 1)[0], f"amqp://{user}:{SECRET}")
    env["REACTQ_BROKER_URL"] = wrong
    out = run_cli(env, "send", "s-broker-auth", "hi", "--agent", hosted, cwd=tmp_path)
    one_line_error(out, "broker", "refused", "REACTQ_BROKER_URL")


def test_worker_with_the_broker_down(env: dict[str, str], tmp_path: Path) -> None:
    # Redis answers, the broker does not: the worker says so instead of retrying forever.
    port = free_port()
    env["REACTQ_BROKER_URL"] = f"redis://127.0.0.1:{port}/0"
    out = run_cli(env, "worker", "--agents", "reactq.demo.weather:agent", cwd=tmp_path, timeout=60)
    one_line_error(out, "broker", f"redis://127.0.0.1:{port}/0", "REACTQ_BROKER_URL")


# --- the gateway (send/watch --gateway) ------------------------------------------------


def test_send_through_a_gateway_that_is_down(env: dict[str, str], tmp_path: Path) -> None:
    # (`watch --gateway` says the same, after the client's reconnection attempts.)
    url = f"http://127.0.0.1:{free_port()}"
    out = run_cli(env, "send", "s", "hi", "--agent", "weather", "--gateway", url, cwd=tmp_path)
    one_line_error(out, "cannot reach the gateway", url, "--gateway")
