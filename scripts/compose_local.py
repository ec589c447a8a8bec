"""``make compose-local``: docker-compose.yml's services as local processes, then a turn.

Docker does not run everywhere we do, so this proves the compose file instead:
it reads the file, interpolates ``${VAR:-default}`` from the environment like
compose does, points every service hostname at 127.0.0.1, and runs each reactq
service's own command with its own environment: ``migrate`` to completion, then
the workers (``--scale worker=N``), the gateway and Flower, each until its own
healthcheck passes. Redis and PostgreSQL must already listen on 127.0.0.1 (the
role and database the postgres service would create are created here through
``--pg-admin-url``). Finally one turn goes through the gateway with
``reactq send --gateway``, everything is stopped, and what the run created is
removed: the role and database (only if it created them) and the Redis keys of
its namespace (a fresh one unless ``--env REACTQ_NAMESPACE=...``).

``--keep`` leaves the services running, and all that with them, and records
their pids in the log folder; ``--stop`` (with the same ``--log-dir``) stops
them and removes what that run created. Published ports are moved to free local
ones (``--keep-ports`` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from reactq.shared.redis_client import forget_namespace

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
        detach: bool = False,
    ) -> None:
        self.services: dict[str, Any] = compose["services"]
        self.overrides = overrides
        self.workers = workers
        self.keep_ports = keep_ports
        self.log_dir = log_dir
        # Services that outlive this script (--keep) get a session of their own: a
        # terminal's hang-up or Ctrl-C meant for the script does not reach them.
        self.detach = detach
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
                start_new_session=self.detach,
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


async def _ensure_database(admin_url: str, postgres: Mapping[str, Any]) -> dict[str, str]:
    """What the postgres image does at first start: its POSTGRES_* role and database.

    Returns what this call created (``role``, ``database``), for ``_drop_created``:
    a role or database that was already there is left alone, then and afterwards.
    """
    import asyncpg

    env = environment_of(postgres)
    user, password = env.get("POSTGRES_USER", "postgres"), env.get("POSTGRES_PASSWORD", "")
    db = env.get("POSTGRES_DB", user)
    created: dict[str, str] = {}
    conn = await asyncpg.connect(admin_url, timeout=5)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", user):
            await conn.execute(f'CREATE ROLE "{user}" LOGIN PASSWORD $pw${password}$pw$')
            created["role"] = user
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", db):
            await conn.execute(f'CREATE DATABASE "{db}" OWNER "{user}"')
            created["database"] = db
    finally:
        await conn.close()
    return created


async def _drop_created(admin_url: str, created: Mapping[str, str]) -> None:
    """Drop the database and role ``_ensure_database`` created (the database first: it
    is the role's)."""
    import asyncpg

    conn = await asyncpg.connect(admin_url, timeout=5)
    try:
        if "database" in created:
            await conn.execute(f'DROP DATABASE IF EXISTS "{created["database"]}" WITH (FORCE)')
        if "role" in created:
            await conn.execute(f'DROP ROLE IF EXISTS "{created["role"]}"')
    finally:
        await conn.close()


STATE_FILE = "compose-local.json"
"""In the log folder: what a ``--keep`` run left, for ``--stop`` (pids and names, no secret)."""

# The services a --keep run of this process left running. Referenced for the process's
# life (a dropped Popen of a running child is a ResourceWarning), and the way --stop
# in the same process (a test) reaps them.
_KEPT: dict[int, subprocess.Popen[bytes]] = {}


def _alive(pid: int) -> bool:
    if pid in _KEPT:
        return _KEPT[pid].poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _is_ours(pid: int) -> bool:
    """The pid still runs one of our services (not a process that reused the number)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():  # no /proc (macOS): trust the record
        return _alive(pid)
    return b"reactq.cli" in cmdline.read_bytes() and _alive(pid)


def _stop_pids(pids: list[int], grace: float = 40) -> None:
    for pid in pids:
        if _is_ours(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in [p for p in pids if _alive(p)]:
        os.kill(pid, signal.SIGKILL)


def _remove_created(record: Mapping[str, Any], admin_url: str) -> None:
    """Remove what a run created: its database and role, its namespace's Redis keys."""
    created = record.get("postgres") or {}
    if created and admin_url:
        asyncio.run(_drop_created(admin_url, created))
    forget_namespace(record["redis_url"], record["namespace"])
    removed = ", ".join(f"{k} {v!r}" for k, v in created.items())
    print(
        f"compose-local: removed {removed + ', ' if removed else ''}"
        f"the Redis keys of namespace {record['namespace']!r}",
        flush=True,
    )


def stop_kept(log_dir: Path, admin_url: str) -> int:
    """``--stop``: stop what a ``--keep`` run left running and remove what it created."""
    path = log_dir / STATE_FILE
    if not path.exists():
        print(f"compose-local: nothing to stop: no {path}", file=sys.stderr)
        return 1
    record = json.loads(path.read_text())
    _stop_pids([int(p) for p in record["pids"].values()])
    _remove_created(record, admin_url)
    path.unlink()
    print("compose-local: stopped", ", ".join(record["pids"]), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compose_local", description=__doc__.split("\n")[0])
    parser.add_argument("--file", type=Path, default=COMPOSE, help="the compose file")
    parser.add_argument(
        "--scale-worker", type=int, default=2, metavar="N", help="worker replicas (default 2)"
    )
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
        help="creates the postgres service's role and database, and drops them at the end "
        "when this run created them ('' to skip both)",
    )
    parser.add_argument(
        "--keep-ports", action="store_true", help="publish on the compose file's own ports"
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=ROOT / ".reactq" / "compose-local",
        help="the services' logs (and a --keep run's record)",
    )
    parser.add_argument(
        "--message", default="What's the weather in Paris?", help="the turn to send"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the services running, with what this run created; --stop ends them",
    )
    parser.add_argument(
        "--stop",
        action="store_true",
        help="stop the services a --keep run left (same --log-dir) and remove what it created",
    )
    args = parser.parse_args(argv)
    if args.stop:
        return stop_kept(args.log_dir, args.pg_admin_url)

    compose = load_compose(args.file)
    overrides = dict(item.split("=", 1) for item in args.env)
    # A namespace of its own, unless told: its Redis keys are removed at the end.
    overrides.setdefault("REACTQ_NAMESPACE", f"compose-local-{uuid.uuid4().hex[:8]}")
    args.log_dir.mkdir(parents=True, exist_ok=True)
    created: dict[str, str] = {}
    if args.pg_admin_url and "postgres" in compose["services"]:
        created = asyncio.run(_ensure_database(args.pg_admin_url, compose["services"]["postgres"]))
    local = LocalCompose(
        compose, overrides, args.scale_worker, args.keep_ports, args.log_dir, detach=args.keep
    )
    worker_env = local.plan("worker")[1]
    record: dict[str, Any] = {
        "namespace": worker_env["REACTQ_NAMESPACE"],
        "redis_url": worker_env["REACTQ_REDIS_URL"],
        "postgres": created,
        "pids": {},
    }
    try:
        local.run_once("migrate")
        for replica in range(args.scale_worker):
            local.start("worker", replica)
        gateway = local.start("gateway")
        flower = local.start("flower")
        local.start("beat")
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
        if args.keep:
            print(
                f"compose-local: left running: the gateway on {url}, Flower on "
                f"http://127.0.0.1:{flower['_port']}, namespace {record['namespace']!r}",
                flush=True,
            )
        return 0
    finally:
        if args.keep:
            running = [(label, proc) for label, proc in local.procs if proc.poll() is None]
            _KEPT.update((proc.pid, proc) for _, proc in running)
            record["pids"] = {label: proc.pid for label, proc in running}
            (args.log_dir / STATE_FILE).write_text(json.dumps(record, indent=2))
            print(
                f"compose-local: --keep: {len(record['pids'])} services still run; stop them "
                f"and remove what this run created with: python scripts/compose_local.py "
                f"--stop --log-dir {args.log_dir}",
                flush=True,
            )
        else:
            local.stop()
            _remove_created(record, args.pg_admin_url)


if __name__ == "__main__":
    sys.exit(main())
