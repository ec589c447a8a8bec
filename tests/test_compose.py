"""docker-compose.yml and the Dockerfile, proven without Docker.

The static tests check that every service runs a real ``reactq`` command, that
every variable it sets is a known setting, and that ports, URLs, healthchecks
and dependencies line up. The end-to-end one runs ``make compose-local``'s
script: the same commands and environments as local processes, and a turn.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis as redis_sync

from reactq.cli import build_parser
from reactq.shared.settings import Settings
from scripts.compose_local import COMPOSE as COMPOSE_FILE
from scripts.compose_local import environment_of, is_reactq, load_compose
from scripts.compose_local import main as compose_local
from tests.helpers import ROOT

REQUIRED = {"redis", "postgres", "migrate", "worker", "gateway", "flower"}
KNOWN_ENV = set(Settings.env_names().values())
# What the images of the infrastructure services read.
IMAGE_ENV = {"postgres": {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}, "redis": set()}
DEFAULT_PORTS = {"redis": 6379, "postgres": 5432}


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return dict(load_compose(environ={})["services"])


def _subcommand(command: list[str]) -> list[str]:
    words = []
    for word in command[1:]:
        if word.startswith("-"):
            break
        words.append(word)
    return words


def test_every_service_is_there_and_runs_a_real_reactq_command(services: dict[str, Any]) -> None:
    assert REQUIRED <= set(services)
    parser = build_parser()
    for name, service in services.items():
        if "image" in service and "build" not in service:
            continue  # redis, postgres: their images' own commands
        assert is_reactq(service), f"{name} does not run reactq: {service.get('command')}"
        command = [str(c) for c in service["command"]]
        assert command[0] == "reactq"
        parser.parse_args(command[1:])  # the exact arguments parse (SystemExit otherwise)
        helped = subprocess.run(
            [sys.executable, "-m", "reactq.cli", *_subcommand(command), "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert helped.returncode == 0, f"{name}: {helped.stderr}"


def test_every_variable_is_a_known_setting(services: dict[str, Any]) -> None:
    for name, service in services.items():
        env = set(environment_of(service))
        allowed = KNOWN_ENV if is_reactq(service) else IMAGE_ENV.get(name, set())
        assert env <= allowed, f"{name} sets unknown variables {sorted(env - allowed)}"
        if is_reactq(service):
            # The settings validate as they would in the container.
            Settings.from_env(environment_of(service))


def test_urls_ports_healthchecks_and_dependencies_line_up(services: dict[str, Any]) -> None:
    for name, service in services.items():
        env = environment_of(service)
        for key in ("REACTQ_REDIS_URL", "REACTQ_BROKER_URL", "REACTQ_DATABASE_URL"):
            if not env.get(key):
                continue
            url = urlsplit(env[key].replace("+asyncpg", ""))
            assert url.hostname in services, f"{name}: {key} names no service"
            assert url.port == DEFAULT_PORTS[url.hostname], f"{name}: {key} port"
            assert url.hostname in service.get("depends_on", {}) or any(
                url.hostname in services[d].get("depends_on", {})
                for d in service.get("depends_on", {})
            ), f"{name} uses {url.hostname} without depending on it"
            if url.hostname == "postgres":
                pg = environment_of(services["postgres"])
                assert url.username == pg["POSTGRES_USER"]
                assert url.password == pg["POSTGRES_PASSWORD"]
                assert url.path.lstrip("/") == pg["POSTGRES_DB"]
        for dep, cond in (service.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            condition = cond["condition"]
            if condition == "service_healthy":
                assert "test" in services[dep].get("healthcheck", {}), f"{dep} has no healthcheck"
            if condition == "service_completed_successfully":
                assert services[dep].get("restart") == "no", f"{dep} is not one-shot"
        health = service.get("healthcheck") or {}
        if service.get("restart") == "no":
            continue  # one-shot: the services that need it wait for it to complete
        assert "test" in health, f"{name} has no healthcheck"
        command = [str(c) for c in service.get("command") or []]
        probe = " ".join(map(str, health["test"]))
        if "--port" in command:
            port = command[command.index("--port") + 1]
            published = [str(p) for p in service.get("ports", [])]
            assert published and all(p.startswith("127.0.0.1:") for p in published), name
            assert all(p.rsplit(":", 1)[1] == port for p in published), f"{name}: port mismatch"
            assert f"127.0.0.1:{port}/" in probe, f"{name}: healthcheck probes another port"
        if env.get("REACTQ_METRICS_PORT"):
            assert f":{env['REACTQ_METRICS_PORT']}/metrics" in probe
            assert env["REACTQ_METRICS_PORT"] in [str(p) for p in service.get("expose", [])]


def test_workers_scale_and_get_their_grace_period(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert "ports" not in worker and "container_name" not in worker, "--scale would collide"
    grace = float(environment_of(worker)["REACTQ_SHUTDOWN_GRACE_SECONDS"])
    assert float(worker["stop_grace_period"].rstrip("s")) > grace
    assert environment_of(worker)["REACTQ_AGENTS"] == "reactq.demo.weather:agent"


def test_the_dockerfile_is_multi_stage_slim_and_unprivileged() -> None:
    text = (ROOT / "Dockerfile").read_text()
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert len(froms) >= 2 and all("slim" in f for f in froms)
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")
    for line in re.findall(r"^(?:ENV|ARG) .*", text, re.M):
        assert not re.search(r"(?i)(KEY|SECRET|PASSWORD|TOKEN)\w*=", line), line
    for extra in ("postgres", "gateway", "flower", "metrics"):
        assert extra in text.split("AS runtime")[1], f"the image lacks the {extra} extra"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


@pytest.mark.e2e
def test_compose_local_runs_a_turn_through_the_composed_services(
    redis_url: str, namespace: str, postgres_url: str, tmp_path: Path
) -> None:
    code = compose_local(
        [
            "--scale-worker",
            "2",
            "--env",
            f"REACTQ_REDIS_URL={redis_url}",
            "--env",
            f"REACTQ_NAMESPACE={namespace}-compose",
            "--env",
            f"REACTQ_DATABASE_URL={postgres_url}",
            "--pg-admin-url",
            "",
            "--log-dir",
            str(tmp_path),
        ]
    )
    assert code == 0, "\n".join(p.read_text()[-2000:] for p in tmp_path.glob("*.log"))
    # Everything stopped, and the namespace's keys are gone (issue 21, item 11).
    assert _keys(redis_url, f"{namespace}-compose") == []


def _keys(redis_url: str, namespace: str) -> list[str]:
    client = redis_sync.Redis.from_url(redis_url, decode_responses=True)
    try:
        return [str(k) for k in client.scan_iter(match=f"{namespace}*", count=1000)]
    finally:
        client.close()


def _pg_names(admin_url: str, name: str) -> tuple[bool, bool]:
    """(the role exists, the database exists)."""
    import asyncpg

    async def query() -> tuple[bool, bool]:
        conn = await asyncpg.connect(admin_url, timeout=5)
        try:
            role = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", name)
            db = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
            return bool(role), bool(db)
        finally:
            await conn.close()

    return asyncio.run(query())


@pytest.mark.e2e
def test_compose_local_keeps_its_services_and_stop_removes_what_it_created(
    redis_url: str, namespace: str, postgres_url: str, tmp_path: Path
) -> None:
    # The compose file with a role and database of this test's own, for the script to
    # create (through the admin URL) and, at --stop, to drop.
    name = f"rq_compose_{uuid.uuid4().hex[:8]}"
    text = COMPOSE_FILE.read_text()
    text = text.replace("POSTGRES_USER: reactq", f"POSTGRES_USER: {name}")
    text = text.replace("POSTGRES_DB: reactq", f"POSTGRES_DB: {name}")
    text = text.replace("://reactq:", f"://{name}:").replace(":5432/reactq", f":5432/{name}")
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(text)
    admin = postgres_url.replace("+asyncpg", "").rpartition("/")[0] + "/postgres"
    ns = f"{namespace}-keep"
    logs = tmp_path / "logs"
    args = ["--file", str(compose), "--scale-worker", "1", "--pg-admin-url", admin,
            "--env", f"REACTQ_REDIS_URL={redis_url}", "--env", f"REACTQ_NAMESPACE={ns}",
            "--log-dir", str(logs)]  # fmt: skip
    assert _pg_names(admin, name) == (False, False)
    try:
        code = compose_local([*args, "--keep"])
        assert code == 0, "\n".join(p.read_text()[-2000:] for p in logs.glob("*.log"))
        record = json.loads((logs / "compose-local.json").read_text())
        pids = list(record["pids"].values())
        assert len(pids) == 4, record  # worker, gateway, Flower, beat (migrate is done)
        for pid in pids:
            os.kill(pid, 0)  # still running after the script returned
        assert _pg_names(admin, name) == (True, True)
        assert _keys(redis_url, ns), "the kept pool has no keys in its namespace"
    finally:
        stopped = compose_local(["--stop", "--log-dir", str(logs), "--pg-admin-url", admin])
    assert stopped == 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert _pg_names(admin, name) == (False, False)
    assert _keys(redis_url, ns) == []
    assert not (logs / "compose-local.json").exists()
