"""``make compose-local``: docker-compose.yml's services as local processes, then a turn.

Docker does not run everywhere we do, so this proves the compose file instead:
it reads the file, interpolates ``${VAR:-default}`` from the environment like
compose does, points every service hostname at 127.0.0.1, and runs each reactq
service's own command with its own environment: ``migrate`` to completion, then
the workers (``--scale worker=N``), the gateway and Flower, each until its own
healthcheck passes. Redis and PostgreSQL must already listen on 127.0.0.1 (the
role and database the postgres service would create are created here through
``--pg-admin-url``). Finally one turn goes through the gateway with
``reactq send --gateway`` and everything is stopped.

Published ports are moved to free local ones (``--keep-ports`` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*)|:?\?[^}]*)?\}")


def interpolate(value: Any, environ: Mapping[str, str]) -> Any:
    """Compose's ``${VAR}`` / ``${VAR:-default}`` interpolation, recursively."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: environ.get(m.group(1)) or (m.group(2) or ""), value)
    if isinstance(value, list):
        return [interpolate(v, environ) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, environ) for k, v in value.items()}
    return value


def load_compose(path: Path = COMPOSE, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The compose file, anchors merged and variables interpolated."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return dict(interpolate(data, os.environ if environ is None else environ))


def environment_of(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's environment as a dict (compose allows a list of KEY=VALUE too)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def is_reactq(service: Mapping[str, Any]) -> bool:
    """True for the services that run the reactq image."""
    command = service.get("command") or []
    return bool(command) and command[0] in ("reactq", "celery")


def to_local(value: str, hosts: set[str]) -> str:
    """Service hostnames in URLs (``//redis:6379``, ``@postgres:5432``) -> 127.0.0.1."""
    for host in hosts:
        value = re.sub(rf"(?<=[/@]){re.escape(host)}(?=[:/]|$)", "127.0.0.1", value)
    return value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _command_port(command: list[str]) -> str | None:
    if "--port" in command:
        return command[command.index("--port") + 1]
    return None


def _replace_port(items: list[str], old: str, new: int) -> list[str]:
    return [re.sub(rf"(?<![0-9]){old}(?![0-9])", str(new), x) for x in items]


class LocalCompose:
    """The services of the compose file as local processes."""

    def __init__(
        self,
        compose: dict[str, Any],
        overrides: dict[str, str],
        workers: int,
        keep_ports: bool,
        log_dir: Path,
    ) -> None:
        self.services: dict[str, Any] = compose["services"]
        self.overrides = overrides
        self.workers = workers
        self.keep_ports = keep_ports
        self.log_dir = log_dir
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.hosts = set(self.services)

    def plan(self, name: str, replica: int = 0) -> tuple[list[str], dict[str, str], list[str]]:
        """(command, environment, healthcheck command) of one replica, made local."""
        service = self.services[name]
        # Bind where the container would bind "everywhere", but on this machine: loopback.
        command = [
            "127.0.0.1" if c == "0.0.0.0" else to_local(str(c), self.hosts)
            for c in service["command"]
        ]
        env = {k: to_local(v, self.hosts) for k, v in environment_of(service).items()}
        env.update(self.overrides)
        health = (service.get("healthcheck") or {}).get("test") or []
        health = [str(x) for x in health[1:]] if health[:1] == ["CMD"] else []
        if not self.keep_ports:
            port = _command_port(command)
            if port is not None:
                new = free_port()
                command, health = (
                    _replace_port(command, port, new),
                    _replace_port(health, port, new),
                )
            if env.get("REACTQ_METRICS_PORT", "0") not in ("", "0"):
                new = free_port()
                health = _replace_port(health, env["REACTQ_METRICS_PORT"], new)
                env["REACTQ_METRICS_PORT"] = str(new)
                env.setdefault("REACTQ_METRICS_ADDRESS", "127.0.0.1")
        if health[:1] == ["python"]:
            health[0] = sys.executable
        return command, env, health

    def _spawn(
        self, label: str, command: list[str], env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "reactq.cli", *command[1:]]
        if command[0] == "celery":
            argv = [sys.executable, "-m", "celery", *command[1:]]
        with open(self.log_dir / f"{label}.log", "wb") as log:
            proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs.append((label, proc))
        print(f"compose-local: {label}: {shlex.join(command)}", flush=True)
        return proc

    def run_once(self, name: str, timeout: float = 120) -> None:
        """A one-shot service (``migrate``): run it and require exit 0."""
        command, env, _ = self.plan(name)
        proc = self._spawn(name, command, env)
        if proc.wait(timeout) != 0:
            raise SystemExit(f"{name} failed:\n{self.log(name)}")

    def start(self, name: str, replica: int = 0, timeout: float = 90) -> dict[str, str]:
        """Start a long-running service and wait for its own healthcheck."""
        command, env, health = self.plan(name, replica)
        label = f"{name}-{replica}"
        proc = self._spawn(label, command, env)
        deadline = time.monotonic() + timeout
        while health:
            if proc.poll() is not None:
                raise SystemExit(f"{label} exited with {proc.returncode}:\n{self.log(label)}")
            if subprocess.run(health, capture_output=True, timeout=30).returncode == 0:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{label} never became healthy:\n{self.log(label)}")
            time.sleep(0.3)
        port = _command_port(command)
        return {**env, "_port": port or ""}

    def log(self, label: str) -> str:
        path = self.log_dir / f"{label}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in self.procs:
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


async def _ensure_database(admin_url: str, postgres: Mapping[str, Any]) -> None:
    """What the postgres image does at first start: its POSTGRES_* role and database."""
    import asyncpg

    env = environment_of(postgres)
    user, password = env.get("POSTGRES_USER", "postgres"), env.get("POSTGRES_PASSWORD", "")
    db = env.get("POSTGRES_DB", user)
    conn = await asyncpg.connect(admin_url, timeout=5)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", user):
            await conn.execute(f'CREATE ROLE "{user}" LOGIN PASSWORD $pw${password}$pw$')
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", db):
            await conn.execute(f'CREATE DATABASE "{db}" OWNER "{user}"')
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compose_local", description=__doc__.split("\n")[0])
    parser.add_argument("--file", type=Path, default=COMPOSE)
    parser.add_argument("--scale-worker", type=int, default=2, metavar="N")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a variable in every reactq service (repeatable)",
    )
    parser.add_argument(
        "--pg-admin-url",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="creates the postgres service's role and database ('' to skip)",
    )
    parser.add_argument("--keep-ports", action="store_true")
    parser.add_argument("--log-dir", type=Path, default=ROOT / ".reactq" / "compose-local")
    parser.add_argument("--message", default="What's the weather in Paris?")
    args = parser.parse_args(argv)

    compose = load_compose(args.file)
    overrides = dict(item.split("=", 1) for item in args.env)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    if args.pg_admin_url and "postgres" in compose["services"]:
        asyncio.run(_ensure_database(args.pg_admin_url, compose["services"]["postgres"]))
    local = LocalCompose(compose, overrides, args.scale_worker, args.keep_ports, args.log_dir)
    try:
        local.run_once("migrate")
        for replica in range(args.scale_worker):
            local.start("worker", replica)
        gateway = local.start("gateway")
        local.start("flower")
        from reactq.worker.definitions import load_agents

        agent = next(iter(load_agents(gateway["REACTQ_AGENTS"].split(","))))
        keys = [k for k in gateway.get("REACTQ_API_KEYS", "").split(",") if k]
        env = {**os.environ, **gateway, "REACTQ_API_KEY": keys[0] if keys else ""}
        session = f"compose-local-{uuid.uuid4().hex[:8]}"
        url = f"http://127.0.0.1:{gateway['_port']}"
        print(f"compose-local: sending a turn to {agent!r} through {url}", flush=True)
        sent = subprocess.run(
            [
                sys.executable,
                "-m",
                "reactq.cli",
                "send",
                session,
                args.message,
                "--agent",
                agent,
                "--gateway",
                url,
            ],
            cwd=ROOT,
            env=env,
            timeout=120,
        )
        if sent.returncode != 0:
            print("compose-local: the turn did not complete", file=sys.stderr)
            return 1
        print(
            "compose-local: ok: every service started from docker-compose.yml and "
            "the turn completed",
            flush=True,
        )
        return 0
    finally:
        local.stop()


if __name__ == "__main__":
    sys.exit(main())
