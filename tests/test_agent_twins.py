"""Issue 29: two different definitions of one agent name live in one namespace.

Real worker processes: the second worker to announce the name logs a WARNING naming
both config versions and both workers (and the first hears of it at its next beat);
``reactq agents`` and ``GET /v1/agents`` list both definitions while both are live,
and once one worker is gone (killed, so its announcement has to expire: a short
``REACTQ_HEARTBEAT_SECONDS``) the other alone. The registry's own rules (several
workers of one version, an entry left unrefreshed, a worker from before versions
were announced) against a real Redis, without workers.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
from redis.asyncio import Redis

from reactq.shared.keys import Keys
from reactq.shared.protocol.workers import AgentProfile, WorkerRegistry
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from tests.gateway_support import Gateway, start_gateway
from tests.helpers import WorkerPool, run_cli, scripted_pool
from tests.twin_agents import first, second

HEARTBEAT = "1.5"


def _wait_for(check: Any, timeout: float, what: str) -> Any:
    """Call ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def _listed(env: dict[str, str]) -> list[dict[str, Any]]:
    shown = run_cli(env, "agents", "--json")
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines()]


def _listed_once(env: dict[str, str]) -> list[dict[str, Any]] | None:
    found = _listed(env)
    return found if len(found) == 1 else None


@contextmanager
def _stopped(gateway: Gateway) -> Iterator[Gateway]:
    try:
        yield gateway
    finally:
        gateway.stop()


def _log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_two_definitions_of_one_name_are_both_listed_and_warned_of(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    ns = f"{namespace}-twins"
    server = ScriptedServer(lambda _request: Reply.text("ok"))
    assert first.config_version != second.config_version
    heartbeat = {"REACTQ_HEARTBEAT_SECONDS": HEARTBEAT}
    # Started first, alone: a gateway starting beside workers on a busy machine is slow.
    database = f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"
    gateway_env = {"REACTQ_REDIS_URL": redis_url, "REACTQ_NAMESPACE": ns, **heartbeat}
    gateway = start_gateway({**gateway_env, "REACTQ_DATABASE_URL": database}, tmp_path, None)
    with (
        _stopped(gateway),
        scripted_pool(
            redis_url, ns, tmp_path, server, agents="tests.twin_agents:first", **heartbeat
        ) as (env, pool),
    ):
        (one,) = _listed(env)
        assert (one["name"], one["config_version"], one["live"]) == (
            "support",
            first.config_version,
            True,
        )
        (first_worker,) = one["workers"]
        second_dir = tmp_path / "second"
        second_dir.mkdir()
        twin = WorkerPool(env, second_dir, agents="tests.twin_agents:second")
        twin.start(1)
        try:
            twin.wait_ready(redis_url, ns, 2)
            by_version = {a["config_version"]: a for a in _listed(env)}
            assert set(by_version) == {first.config_version, second.config_version}
            assert all(a["name"] == "support" and a["live"] for a in by_version.values())
            assert by_version[first.config_version]["workers"] == [first_worker]
            (second_worker,) = by_version[second.config_version]["workers"]
            assert by_version[first.config_version]["tools"] == 1
            assert by_version[second.config_version]["tools"] == 2

            # The newcomer warns at once; the first worker at its next beat.
            warning = _wait_for(
                lambda: [
                    line
                    for line in _log(second_dir / "worker-0.log").splitlines()
                    if "WARNING" in line and "another definition" in line
                ],
                30,
                "the second worker's warning",
            )[0]
            assert f"this worker ({second_worker}) hosts version {second.config_version}" in warning
            assert f"version {first.config_version} on {first_worker}" in warning
            assert f"namespace {ns!r}" in warning
            _wait_for(
                lambda: (
                    f"version {second.config_version} on {second_worker}"
                    in _log(tmp_path / "worker-0.log")
                ),
                30,
                "the first worker's warning",
            )

            shown = run_cli(env, "agents")
            assert shown.returncode == 0, shown.stderr
            lines = shown.stdout.splitlines()
            assert len(lines) == 2 and all(line.startswith("support  live") for line in lines)
            assert "is live with 2 definitions" in shown.stderr

            answer = httpx2.get(f"{gateway.url}/v1/agents", timeout=20)
            assert answer.status_code == 200, answer.text
            listed = answer.json()["agents"]
            assert sorted(a["config_version"] for a in listed) == sorted(by_version)

            # Killed, the first worker leaves its entry behind: it expires unrefreshed.
            (proc,) = pool.procs
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            alone = _wait_for(
                lambda: _listed_once(env),
                30,
                "one definition listed once the first worker's announcement expired",
            )
            assert [(a["config_version"], a["workers"], a["live"]) for a in alone] == [
                (second.config_version, [second_worker], True)
            ]
            _wait_for(
                lambda: "is its only live definition" in _log(second_dir / "worker-0.log"),
                30,
                "the second worker's note that its definition is alone again",
            )
        finally:
            twin.stop()
        # Every worker gone: the name stays known, listed once, not live.
        (gone,) = _listed(env)
        assert (gone["name"], gone["live"], gone["workers"]) == ("support", False, [])


async def test_the_registry_keeps_each_live_definition_and_names_the_rivals(
    redis_url: str, namespace: str
) -> None:
    keys = Keys(f"{namespace}-defs")
    client = Redis.from_url(redis_url)
    registry = WorkerRegistry(client, keys)
    try:
        for worker, version in [("w1", "v1"), ("w2", "v2"), ("w3", "v2")]:
            profile = AgentProfile(config_version=version)
            await registry.register_agents(["support"], worker, {"support": profile})
        listed = await registry.agents(live_within=60)
        assert [(a.config_version, a.workers, a.live) for a in listed] == [
            ("v1", ["w1"], True),
            ("v2", ["w2", "w3"], True),
        ]
        rivals = await registry.rivals({"support": "v2", "other": "v9"}, live_within=60)
        assert [(a.config_version, a.workers) for a in rivals["support"]] == [("v1", ["w1"])]
        assert set(rivals) == {"support"}

        # w1's entry left unrefreshed (a killed worker), and one from a worker that
        # predates versions: the first is gone, the second counts as the name's last
        # announced version when listed, and is no rival (its version is unknown).
        stale = {"worker": "w1", "ts": 1.0, "agents": ["support"], "definitions": {}}
        await client.hset(keys.workers, "w1", json.dumps(stale))
        old = {"worker": "w0", "ts": time.time(), "agents": ["support"]}
        await client.hset(keys.workers, "w0", json.dumps(old))
        listed = await registry.agents(live_within=60)
        assert [(a.config_version, a.workers) for a in listed] == [("v2", ["w0", "w2", "w3"])]
        rivals = await registry.rivals({"support": "v1"}, live_within=60)
        assert [(a.config_version, a.workers) for a in rivals["support"]] == [("v2", ["w2", "w3"])]
        for worker in ("w0", "w2", "w3"):
            await registry.forget_worker(worker)
        (gone,) = await registry.agents(live_within=60)
        assert (gone.config_version, gone.live, gone.workers) == ("v2", False, [])
    finally:
        await client.delete(keys.agents, keys.workers, keys.agent_tools)
        await client.aclose()
