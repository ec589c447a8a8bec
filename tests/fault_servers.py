"""Servers a test owns and may break: a private redis-server with an append-only file
(stopped and started again on its port, or paused with SIGSTOP) and a private
PostgreSQL cluster (``initdb`` into a tmp dir, ``pg_ctl`` start, ``-m fast`` stop and
start again on the same port and data directory).

PostgreSQL refuses to run as root, so under root every ``initdb`` / ``pg_ctl`` runs as
the ``postgres`` OS user, in a tmp dir it owns. The fixtures that hand these out are
in ``tests/conftest.py`` (``private_postgres``, ``private_redis``); they skip, or fail
under ``REACTQ_REQUIRE_SERVICES=1``, with a reason that says how to get the server.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import redis as redis_sync

__all__ = [
    "PrivatePostgres",
    "PrivateRedis",
    "ServerUnavailable",
    "postgres_bin_dir",
]

PG_HINT = (
    "install PostgreSQL's server binaries (Debian: apt-get install postgresql; "
    "they land in /usr/lib/postgresql/<version>/bin)"
)


class ServerUnavailable(Exception):
    """A private server cannot be had here; the message says why and how to fix it."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def postgres_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/*/bin`` holding ``initdb`` and ``pg_ctl``, else
    the directory of an ``initdb`` on the PATH; None when neither exists."""

    def version(path: Path) -> tuple[int, ...]:
        try:
            return tuple(int(p) for p in path.parent.name.split("."))
        except ValueError:
            return (0,)

    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    return None


class PrivateRedis:
    """A redis-server on a free port of 127.0.0.1 with its AOF in ``workdir``: data a
    restart keeps. ``stop`` is a SIGTERM (Redis flushes its AOF on the way out)."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServerUnavailable("redis-server is not installed: apt-get install redis-server")
        self.binary = binary
        self.workdir = workdir
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10) -> None:
        """Start the server (again, on the same port and AOF) and wait until it answers
        with its data loaded."""
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.workdir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.proc.poll() is not None:
                raise ServerUnavailable(f"redis-server exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"redis-server did not answer within {timeout} s")
            time.sleep(0.05)

    def answers(self) -> bool:
        """True when the server answers PING (a server still loading its AOF does not)."""
        try:
            client = redis_sync.Redis.from_url(self.url, socket_connect_timeout=0.5)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except redis_sync.RedisError:
            return False

    def stop(self) -> None:
        """SIGTERM, and wait for the server to exit."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused server cannot exit
            self.proc.terminate()
            self.proc.wait(30)

    def ensure_running(self) -> None:
        """Resume the server if paused, start it if stopped (after a test that failed
        mid-fault)."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        else:
            self.resume()

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing answers, and keys' TTLs run on."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after ``pause``."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


class PrivatePostgres:
    """A PostgreSQL cluster in a tmp dir of its own, listening on a free port of
    127.0.0.1 (trust authentication, user ``postgres``) with its unix socket in the same
    tmp dir; ``fsync`` off, since its data lives no longer than the test session."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.run_as = _postgres_user() if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix="reactq-pg-"))
        if self.run_as is not None:
            os.chown(self.root, self.run_as.pw_uid, self.run_as.pw_gid)
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()

    @property
    def admin_url(self) -> str:
        """A plain (asyncpg / libpq) URL of the ``postgres`` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        """The SQLAlchemy URL reactq takes for ``database`` on this server."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    async def create_database(self, name: str) -> str:
        """Create database ``name`` (fresh: a test's own) and return its reactq URL."""
        import asyncpg  # the postgres extra, optional like everywhere else

        conn = await asyncpg.connect(self.admin_url, timeout=10)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return self.url(name)

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env: Mapping[str, str] = {**os.environ, "LC_ALL": "C", "HOME": str(self.root)}
        done = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            env=dict(env),
            check=False,
            **self._as_user(),
        )
        if done.returncode != 0:
            raise ServerUnavailable(
                f"{Path(args[0]).name} failed ({done.returncode}): {done.stdout}{done.stderr}"
                f"{self._log_tail()}"
            )
        return done

    def _as_user(self) -> dict[str, Any]:
        """subprocess arguments that run a command as the ``postgres`` user under root."""
        if self.run_as is None:
            return {}
        return {"user": self.run_as.pw_uid, "group": self.run_as.pw_gid, "extra_groups": []}

    def _log_tail(self) -> str:
        try:
            return "\n" + self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def init(self) -> None:
        """``initdb`` the data directory (trust authentication, UTF-8)."""
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )

    def start(self) -> None:
        """``pg_ctl start`` on the cluster's port, waiting until it accepts connections."""
        options = (
            f"-p {self.port} -k {self.root} -F -c fsync=off -c listen_addresses=127.0.0.1 "
            "-c max_connections=200"
        )
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl -m MODE stop``: ``fast`` ends every session at once (their
        transactions rolled back), as an operator's restart does."""
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def ensure_running(self) -> None:
        """Start the server unless it runs (after a test that failed while it was down)."""
        status = subprocess.run(
            [str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "status"],
            capture_output=True,
            check=False,
            **self._as_user(),
        )
        if status.returncode != 0:
            self.start()

    def close(self) -> None:
        """Stop the server if it runs, and remove its tmp dir."""
        try:
            self.stop("immediate")
        except ServerUnavailable:
            pass  # never started, or already stopped
        shutil.rmtree(self.root, ignore_errors=True)


def _postgres_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise ServerUnavailable(
            "running as root and there is no 'postgres' OS user to run PostgreSQL as "
            "(PostgreSQL refuses root): useradd --system postgres, or run as another user"
        ) from None
