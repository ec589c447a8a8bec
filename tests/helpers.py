"""Shared test helpers: a stateless scripted model, real worker processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis as redis_sync

from reactq.shared.redis_urls import is_cluster_url, node_url
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer

ROOT = Path(__file__).resolve().parent.parent
REACTQ = str(Path(sys.executable).parent / "reactq")


def run_cli(
    env: Mapping[str, str], *args: str, cwd: Path = ROOT, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``reactq ARGS`` as a user runs it: the console script, in ``cwd``."""
    return subprocess.run(
        [REACTQ, *args], env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any reactq or OpenAI setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "REACTQ_"))}
    return {**env, **extra}


NO_MODEL = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "unused"}
"""A configured endpoint nothing reaches: the offline model would print a line of its
own, which a test reading a command's stderr does not want."""


def command_env(tmp_path: Path, redis_url: str, namespace: str) -> dict[str, str]:
    """``clean_env`` with a reachable Redis in ``namespace``, a private SQLite file and
    ``NO_MODEL``: what a command-line test starts from (and breaks one setting of)."""
    return clean_env(
        REACTQ_REDIS_URL=redis_url,
        REACTQ_NAMESPACE=namespace,
        REACTQ_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        **NO_MODEL,
    )


def last_user_text(request: Mapping[str, Any]) -> str:
    """The text of the newest user message of a chat request."""
    for message in reversed(request["messages"]):
        if message["role"] == "user":
            return str(message["content"])
    return ""


def lookup_then_answer(request: Mapping[str, Any]) -> Reply:
    """Stateless: call ``lookup`` on the user's text, then answer from its result."""
    if request["messages"][-1]["role"] == "user":
        return Reply.tool_calls([("lookup", {"key": last_user_text(request)})])
    return Reply.text(f"answer to: {last_user_text(request)}")


async def audited_events(producer: Any, turn_id: str, timeout: float = 10) -> list[Any]:
    """A finished turn's audit log once it holds the turn's final: a worker writes a
    turn's rows in the background, with its final (``AUDIT_LINGER_SECONDS``)."""
    found: list[Any] = []

    async def whole() -> bool:
        found[:] = await producer.turn_events(turn_id)
        return any(e.type == "final" for e in found)

    await wait_until(whole, timeout, f"the audit log of {turn_id} with its final")
    return found


async def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    """Poll an (async or sync) predicate until it is truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


def sync_client(url: str) -> redis_sync.Redis:
    """A blocking client on ``url``, a Redis Cluster's included."""
    if is_cluster_url(url):
        return redis_sync.RedisCluster.from_url(node_url(url))  # type: ignore[return-value]
    return redis_sync.Redis.from_url(url)


class WorkerPool:
    """Real ``reactq worker`` processes sharing one environment."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_dir: Path,
        agents: str = "tests.pool_agents:agent",
        concurrency: int = 16,
        loglevel: str = "INFO",
    ) -> None:
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.loglevel = loglevel
        self.log_dir = log_dir
        self.agents = agents
        self.concurrency = concurrency
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, count: int = 1) -> list[subprocess.Popen[bytes]]:
        started = []
        for _ in range(count):
            index = len(self.procs)
            log = open(self.log_dir / f"worker-{index}.log", "wb")
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "reactq.cli",
                    "worker",
                    "--agents",
                    self.agents,
                    "--concurrency",
                    str(self.concurrency),
                    "--loglevel",
                    self.loglevel,
                ],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            log.close()
            self.procs.append(proc)
            started.append(proc)
        return started

    def wait_ready(self, redis_url: str, namespace: str, count: int, timeout: float = 60) -> None:
        """Wait until ``count`` workers have registered (or fail with their logs)."""
        client = sync_client(redis_url)
        deadline = time.monotonic() + timeout
        try:
            while client.hlen(f"{namespace}:workers") < count:
                dead = [p for p in self.procs if p.poll() is not None]
                if dead or time.monotonic() > deadline:
                    raise AssertionError(f"workers did not start:\n{self.logs()}")
                time.sleep(0.1)
        finally:
            client.close()

    @contextmanager
    def running(self, count: int) -> Iterator[WorkerPool]:
        """``count`` workers started and registered (on the environment's Redis and
        namespace); every worker stopped on the way out."""
        try:
            self.start(count)
            self.wait_ready(self.env["REACTQ_REDIS_URL"], self.env["REACTQ_NAMESPACE"], count)
            yield self
        finally:
            self.stop()

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted(self.log_dir.glob("worker-*.log"))
        )

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def sleepy_lookup(request: Mapping[str, Any]) -> Reply:
    """Like ``lookup_then_answer``; a user message ``sleep=S ...`` makes each model call
    of that turn take S seconds, so tests can act while a turn is in flight."""
    text = last_user_text(request)
    delay = 0.0
    for word in text.split():
        if word.startswith("sleep="):
            delay = float(word.removeprefix("sleep="))
    return lookup_then_answer(request).but(delay=delay)


def worker_pid(worker_name: str) -> int:
    """The pid in a worker name (``reactq-<pid>@host``)."""
    return int(worker_name.removeprefix("reactq-").partition("@")[0])


@contextmanager
def scripted_pool(
    redis_url: str,
    namespace: str,
    tmp: Path,
    server: ScriptedServer,
    workers: int = 1,
    agents: str = "tests.pool_agents:agent",
    concurrency: int = 16,
    **extra_env: str,
) -> Iterator[tuple[dict[str, str], WorkerPool]]:
    """``server`` (not started) and ``workers`` real workers hosting ``agents`` on
    SQLite in ``tmp``, ready; yields the environment a producer (or the CLI) needs to
    reach them (``extra_env`` added, for both sides) and the pool, whose ``procs`` a
    test may stop. Both stop on the way out."""
    server.start_in_thread()
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": namespace,
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        **extra_env,
    }
    try:
        with WorkerPool(env, tmp, agents=agents, concurrency=concurrency).running(workers) as pool:
            yield env, pool
    finally:
        server.stop()


@contextmanager
def running_pool(
    redis_url: str,
    namespace: str,
    tmp: Path,
    handler: Callable[[Mapping[str, Any]], Reply],
    workers: int = 1,
    agents: str = "tests.pool_agents:agent",
    server: ScriptedServer | None = None,
    **extra_env: str,
) -> Iterator[dict[str, str]]:
    """A scripted model and ``workers`` real workers hosting ``agents`` on SQLite in
    ``tmp``; yields the environment a producer (or the CLI) needs to reach them
    (``extra_env`` added, for both sides). ``server``: a scripted server (not started)
    to run instead of one on ``handler``, for a test that reads or configures it."""
    server = server if server is not None else ScriptedServer(handler)
    with scripted_pool(
        redis_url,
        namespace,
        tmp,
        server,
        workers=workers,
        agents=agents,
        concurrency=16,  # named, so no extra_env entry can take its place
        **extra_env,
    ) as (env, _):
        yield env
