"""``run_code`` and ``run_file``: model-written code, run in the session's workspace.

The code runs under bubblewrap (``bwrap``) with fresh user, PID, network, IPC
and UTS namespaces: no network at all, ``/usr`` read-only, a small private
``/tmp``, and the session's workspace bind-mounted read-write at
``/workspace`` as the only writable place on disk. Inside, ``prlimit`` caps
CPU time, address space, processes, file size (the workspace quota's free
bytes) and open files. From the worker's side the run has a wall-clock limit
(the whole process group is killed; the PID namespace dies with its first
process, taking any daemon with it), an output cap (kept head and tail), and a
watchdog on the workspace's size (bytes and inodes): it kills a run that passes
the quota, and what the run wrote last is then removed until the workspace is
within it again (``Workspace.trim``).

Linux exempts a real root user from ``RLIMIT_NPROC``, even mapped in a user
namespace; a worker running as root therefore caps processes with a pids
cgroup of its own per run, and without one writable the tools are left out.

Every call is I/O on an asyncio subprocess: the worker's event loop never waits
on the code. ``REACTQ_SANDBOX=none`` runs the same command without bubblewrap,
and every result says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from reactq.bundles.workspace import (
    Workspace,
    WorkspaceError,
    Workspaces,
    settings_for,
    split_path,
)
from reactq.shared.errors import ConfigError, ToolError
from reactq.shared.settings import Settings
from reactq.worker.agent.tools import Tool, ToolContext

__all__ = [
    "CodeRun",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "sandbox_problem",
    "sandbox_tools",
]

log = logging.getLogger("reactq.bundles")

MOUNT = "/workspace"
"""Where the session's workspace appears inside the sandbox."""
_PATH = "/usr/local/bin:/usr/bin:/bin"
_CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))
_INTERPRETERS = {".py": ["python3"], ".sh": ["bash"], ".bash": ["bash"]}
_WATCH_SECONDS = 0.2
# After every mount: bwrap's own root and /dev are tmpfs, writable unless sealed.
_SEAL = ["--remount-ro", "/dev", "--remount-ro", "/"]


class SandboxError(ToolError):
    """run_code / run_file could not start the code; the message says why, for the model."""

    code = "sandbox_error"


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use; a run past a limit is stopped and its result says which."""

    wall_seconds: float = 60.0
    """Real time, from the worker's side: past it every process of the run is killed."""
    cpu_seconds: int = 30
    """CPU time of each process (``RLIMIT_CPU``)."""
    memory_bytes: int = 1 << 30
    """Address space of each process (``RLIMIT_AS``)."""
    max_processes: int = 64
    """Processes and threads of the run at once."""
    output_bytes: int = 30_000
    """Output kept for the model: its first and last halves (a traceback stays visible)."""
    max_output_bytes: int = 16 << 20
    """Output read in all; past it the run is killed."""
    tmp_bytes: int = 64 << 20
    """Size of the sandbox's private ``/tmp`` (memory-backed)."""

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            if getattr(self, name) <= 0:
                raise ConfigError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.max_output_bytes < self.output_bytes:
            raise ConfigError(
                "SandboxLimits.max_output_bytes must be >= output_bytes "
                f"({self.max_output_bytes} < {self.output_bytes})"
            )


Limit = Literal["wall_time", "cpu_time", "memory", "processes", "disk", "output"]


@dataclass(frozen=True)
class CodeRun:
    """One run's outcome, as the model reads it through ``render``."""

    exit_code: int | None
    """The code's exit status (128 + N when signal N ended it); None when it was killed."""
    limit: Limit | None
    """The limit that stopped or broke the run, if one did."""
    output: str
    """Standard output and error, interleaved; the middle cut out when long."""
    output_total: int
    """Bytes of output the run wrote in all."""
    sandboxed: bool
    """False under ``REACTQ_SANDBOX=none``."""
    seconds: float
    """Wall time of the run."""
    removed: tuple[str, ...] = ()
    """What the run wrote past the workspace quota, removed after it (newest first)."""

    def render(self, limits: SandboxLimits) -> str:
        """The tool result: a status line, then the output."""
        lines = []
        if not self.sandboxed:
            lines.append(
                "[UNSANDBOXED: REACTQ_SANDBOX=none, this code ran with the worker's own rights]"
            )
        status = "killed" if self.exit_code is None else f"exit code {self.exit_code}"
        lines.append(f"[{status}; {self.seconds:.1f} s]")
        if self.limit is not None:
            lines.append(f"[limit struck: {_LIMIT_TEXT[self.limit](limits)}]")
        cut = self.output_total - len(self.output.encode("utf-8", "replace"))
        if self.output_total == 0:
            lines.append("(no output)")
        else:
            lines.append(self.output)
            if cut > 0:
                lines.append(f"[{self.output_total} bytes of output; the middle was cut]")
        if self.removed:
            shown = ", ".join(self.removed[:20]) + (", ..." if len(self.removed) > 20 else "")
            lines.append(f"[removed, to bring the workspace within its quota: {shown}]")
        return "\n".join(lines)


_LIMIT_TEXT = {
    "wall_time": lambda lim: f"wall time ({lim.wall_seconds:g} s): every process was killed",
    "cpu_time": lambda lim: f"CPU time ({lim.cpu_seconds} s per process)",
    "memory": lambda lim: f"memory ({lim.memory_bytes} bytes of address space per process)",
    "processes": lambda lim: f"processes ({lim.max_processes} at once)",
    "disk": lambda lim: "disk: the workspace quota (what the run wrote past it is removed)",
    "output": lambda lim: f"output ({lim.max_output_bytes} bytes): the run was killed",
}


# --- probing ----------------------------------------------------------------------------


def _base_args(tmp_bytes: int) -> list[str]:
    args = ["--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib64", "lib32"):
        if Path(f"/{name}").is_symlink():
            args += ["--symlink", os.readlink(f"/{name}"), f"/{name}"]
        elif Path(f"/{name}").is_dir():
            args += ["--ro-bind", f"/{name}", f"/{name}"]
    for path in ("/etc/alternatives", "/etc/ld.so.cache", "/etc/ssl", "/etc/localtime"):
        args += ["--ro-bind-try", path, path]
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    args += ["--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    args += ["--uid", "1000", "--gid", "1000", "--hostname", "sandbox", "--clearenv"]
    return args


def _pids_root() -> Path | None:
    """A pids cgroup directory this process may make children in, or None."""
    for root in _CGROUP_ROOTS:
        if not (root / "cgroup.procs").exists():
            continue
        probe = root / f"reactq-probe-{secrets.token_hex(4)}"
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            (probe / "pids.max").write_text("1")
            return root
        except OSError:
            continue
        finally:
            with contextlib.suppress(OSError):
                probe.rmdir()
    return None


def sandbox_problem(bwrap: str = "bwrap") -> str | None:
    """Why bubblewrap cannot sandbox code on this machine, or None when it can.

    Blocking (it runs bwrap once): call it at start-up, not on the event loop.
    """
    path = shutil.which(bwrap)
    if path is None:
        return f"bubblewrap is not installed ({bwrap!r} is not on PATH): apt-get install bubblewrap"
    try:
        done = subprocess.run(
            [
                path,
                *_base_args(1 << 20),
                *_SEAL,
                "--",
                "/usr/bin/prlimit",
                "--nproc=8",
                "/bin/true",
            ],
            capture_output=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not be run: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip() or f"exit code {done.returncode}"
        return f"bubblewrap cannot create its namespaces here (user, pid, net): {said}"
    if os.geteuid() == 0 and _pids_root() is None:
        return (
            "the worker runs as root, which Linux exempts from the process limit, and no pids "
            "cgroup is writable: run the worker as an unprivileged user"
        )
    return None


# --- running ----------------------------------------------------------------------------


class _Output:
    """Reads a pipe to its end, keeping the first and last ``keep // 2`` bytes."""

    def __init__(self, keep: int) -> None:
        self.half = keep // 2
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0

    async def drain(self, stream: asyncio.StreamReader, ceiling: int, over: asyncio.Event) -> None:
        while chunk := await stream.read(1 << 16):
            self.total += len(chunk)
            room = self.half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail.append(chunk)
                self.tail_size += len(chunk)
                while self.tail_size - len(self.tail[0]) >= self.half:
                    self.tail_size -= len(self.tail.popleft())
            if self.total > ceiling:
                over.set()
                return

    def text(self) -> str:
        tail = b"".join(self.tail)
        kept = len(self.head) + len(tail)
        if kept < self.total or len(tail) > self.half:
            tail = tail[-self.half :] if self.half else b""
            middle = f"\n[... {self.total - len(self.head) - len(tail)} bytes cut ...]\n"
            return self.head.decode("utf-8", "replace") + middle + tail.decode("utf-8", "replace")
        return (bytes(self.head) + tail).decode("utf-8", "replace")


class _Cgroup:
    """A pids cgroup for one run (root workers only)."""

    def __init__(self, root: Path, max_processes: int) -> None:
        self.path = root / f"reactq-sandbox-{secrets.token_hex(6)}"
        self.path.mkdir()
        (self.path / "pids.max").write_text(str(max_processes))

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def struck(self) -> bool:
        with contextlib.suppress(OSError):
            for line in (self.path / "pids.events").read_text().splitlines():
                name, _, count = line.partition(" ")
                if name == "max" and int(count) > 0:
                    return True
        return False

    def kill_all(self) -> None:
        with contextlib.suppress(OSError):
            for pid in self.procs.read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)

    async def remove(self) -> None:
        for _ in range(100):
            self.kill_all()
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                await asyncio.sleep(0.05)
        log.warning("could not remove the sandbox cgroup %s", self.path)


def _text_limit(output: str) -> Limit | None:
    """A limit the code met and reported itself (a process limit is only an error there)."""
    if "MemoryError" in output or "Cannot allocate memory" in output:
        return "memory"
    if "File too large" in output:
        return "disk"
    if "Resource temporarily unavailable" in output or "fork: retry" in output:
        return "processes"
    return None


class Sandbox:
    """Runs commands in a session's workspace, under bubblewrap unless ``mode`` is none."""

    def __init__(
        self,
        workspaces: Workspaces,
        limits: SandboxLimits | None = None,
        *,
        mode: Literal["bwrap", "none"] = "bwrap",
        bwrap: str = "bwrap",
    ) -> None:
        self.workspaces = workspaces
        self.limits = limits or SandboxLimits()
        self.mode = mode
        self.bwrap = shutil.which(bwrap) or bwrap
        self._cgroups = _pids_root() if mode == "bwrap" and os.geteuid() == 0 else None

    def _argv(self, ws: Workspace, command: list[str], fsize: int, procs: Path | None) -> list[str]:
        lim = self.limits
        limited = [
            "/usr/bin/prlimit",
            f"--cpu={lim.cpu_seconds}:{lim.cpu_seconds + 1}",
            f"--as={lim.memory_bytes}",
            f"--nproc={lim.max_processes}",
            f"--fsize={fsize}",
            "--core=0",
            "--nofile=256",
            "--",
            *command,
        ]
        if self.mode == "none":
            return limited
        argv = [self.bwrap, *_base_args(lim.tmp_bytes), "--bind", str(ws.path), MOUNT, *_SEAL]
        for name, value in (("PATH", _PATH), ("HOME", "/tmp"), ("LANG", "C.UTF-8")):
            argv += ["--setenv", name, value]
        argv += ["--chdir", MOUNT, "--", *limited]
        if procs is not None:
            # Into the run's cgroup before bwrap forks anything, so every process counts.
            argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs), *argv]
        return argv

    async def run(
        self, ws: Workspace, command: list[str], *, stdin: bytes = b"", wall: float | None = None
    ) -> CodeRun:
        """Run ``command`` in ``ws`` (its files at ``/workspace``, the current directory)."""
        # A full workspace still runs code (to delete files), but nothing may grow a file.
        free = await asyncio.to_thread(ws.free_bytes)  # also creates the directory
        since = await asyncio.to_thread(ws.clock)
        cgroup = _Cgroup(self._cgroups, self.limits.max_processes) if self._cgroups else None
        started = time.monotonic()
        wall = min(wall or self.limits.wall_seconds, self.limits.wall_seconds)
        env = {"PATH": _PATH, "HOME": str(ws.path), "LANG": "C.UTF-8"}
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(ws, command, free, cgroup.procs if cgroup else None),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=ws.path,
                env=env if self.mode == "none" else {"PATH": _PATH},
                start_new_session=True,  # its own process group, killed as one
            )
        except OSError as exc:
            if cgroup:
                await cgroup.remove()
            raise SandboxError(f"the code could not be started: {exc}") from None
        try:
            limit = await self._supervise(
                proc, ws, stdin, wall, output := _Output(self.limits.output_bytes)
            )
        finally:
            self._kill(proc)
            if proc.returncode is None:
                await proc.wait()
            if cgroup:
                if cgroup.struck():
                    limit = limit or "processes"
                await cgroup.remove()
        # The watchdog strikes a moment late (or another limit first): what the run wrote
        # past the quota goes, whatever stopped it.
        removed = await asyncio.to_thread(ws.trim, since)
        if removed:
            limit = limit or "disk"
        text = output.text()
        exit_code = proc.returncode
        if limit in ("wall_time", "output") or (limit == "disk" and exit_code == -signal.SIGKILL):
            exit_code = None
        elif exit_code is not None and exit_code < 0:
            exit_code = 128 - exit_code
        if limit is None and exit_code is not None and exit_code > 128:
            if exit_code - 128 in (signal.SIGXCPU, signal.SIGKILL):
                limit = "cpu_time"
            elif exit_code - 128 == signal.SIGXFSZ:
                limit = "disk"
        if limit is None and exit_code:
            limit = _text_limit(text[-4000:])
        return CodeRun(
            exit_code=exit_code,
            limit=limit,
            output=text,
            output_total=output.total,
            sandboxed=self.mode == "bwrap",
            seconds=time.monotonic() - started,
            removed=tuple(removed),
        )

    async def _supervise(
        self,
        proc: asyncio.subprocess.Process,
        ws: Workspace,
        stdin: bytes,
        wall: float,
        output: _Output,
    ) -> Limit | None:
        assert proc.stdin is not None and proc.stdout is not None
        over = asyncio.Event()
        full = asyncio.Event()
        reader = asyncio.create_task(output.drain(proc.stdout, self.limits.max_output_bytes, over))
        watcher = asyncio.create_task(self._watch_quota(ws, full))
        feeder = asyncio.create_task(self._feed(proc.stdin, stdin))
        waiter = asyncio.create_task(proc.wait())
        stops: dict[asyncio.Task[Any], Limit] = {
            asyncio.create_task(over.wait()): "output",
            asyncio.create_task(full.wait()): "disk",
        }
        limit: Limit | None = None
        try:
            done, _ = await asyncio.wait(
                {waiter, *stops}, timeout=wall, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                limit = "wall_time"
            for task, name in stops.items():
                if task in done:
                    limit = name
            self._kill(proc)
            await waiter
            # The pipe closes when its last holder dies; unsandboxed, a daemon may keep it.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), 2.0)
            if not full.is_set() and await asyncio.to_thread(ws.over_quota):
                limit = limit or "disk"
        finally:
            for task in (reader, watcher, feeder, waiter, *stops):
                task.cancel()
            await asyncio.gather(reader, watcher, feeder, waiter, *stops, return_exceptions=True)
        return limit

    @staticmethod
    async def _feed(pipe: asyncio.StreamWriter, data: bytes) -> None:
        with contextlib.suppress(ConnectionError, BrokenPipeError):
            pipe.write(data)
            await pipe.drain()
            pipe.close()

    @staticmethod
    async def _watch_quota(ws: Workspace, full: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(_WATCH_SECONDS)
            if await asyncio.to_thread(ws.over_quota):
                full.set()
                return

    @staticmethod
    def _kill(proc: asyncio.subprocess.Process) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


# --- the tools --------------------------------------------------------------------------


def _command(language: str, code: str) -> tuple[list[str], bytes]:
    if language == "python":
        return ["python3", "-"], code.encode("utf-8")
    return ["bash", "-s"], code.encode("utf-8")


def _file_command(ws: Workspace, path: str, args: list[str]) -> list[str]:
    parts = split_path(path)
    if not parts:
        raise WorkspaceError("run_file needs a file, not the workspace itself")
    if ws.kind(path) != "file":
        raise WorkspaceError(f"{'/'.join(parts)} is not a file of the workspace")
    relative = "./" + "/".join(parts)
    interpreter = _INTERPRETERS.get(Path(parts[-1]).suffix, [])
    return [*interpreter, relative, *args]


def sandbox_tools(
    settings_or_root: Settings | str | os.PathLike[str] | None = None,
    *,
    limits: SandboxLimits | None = None,
    bwrap: str = "bwrap",
) -> list[Tool]:
    """``run_code`` and ``run_file``, for ``Agent(tools=[...])``; [] when code cannot be sandboxed.

    ``settings_or_root`` as for ``file_tools``. Under ``REACTQ_SANDBOX=bwrap``
    (the default) bubblewrap is probed once, here: when it is missing or cannot
    make its namespaces, the tools are left out and the log says why.
    """
    settings = settings_for(settings_or_root)
    if settings.sandbox == "bwrap":
        problem = sandbox_problem(bwrap)
        if problem is not None:
            log.warning("run_code and run_file are not available: %s", problem)
            return []
    else:
        log.warning("REACTQ_SANDBOX=none: run_code and run_file run code UNSANDBOXED")
    workspaces = Workspaces(
        settings.workspace_root,
        quota_bytes=settings.workspace_quota_bytes,
        max_inodes=settings.workspace_max_inodes,
    )
    sandbox = Sandbox(workspaces, limits, mode=settings.sandbox, bwrap=bwrap)
    lim = sandbox.limits
    where = MOUNT if settings.sandbox == "bwrap" else "the workspace"

    async def run_code(
        ctx: ToolContext,
        code: str,
        language: Literal["python", "bash"] = "python",
        timeout_seconds: Annotated[float, Field(gt=0)] | None = None,
    ) -> str:
        """Run a Python or bash program in the workspace (the current directory) and return
        its exit code and output. No network; only the workspace's files are kept.

        Args:
            code: The program's source.
            language: "python" (python3) or "bash".
            timeout_seconds: Stop it sooner than the sandbox's own wall-time limit.
        """
        command, stdin = _command(language, code)
        ws = workspaces.for_session(ctx.session_id)
        run = await sandbox.run(ws, command, stdin=stdin, wall=timeout_seconds)
        return run.render(lim)

    async def run_file(
        ctx: ToolContext,
        path: str,
        args: list[str] | None = None,
        timeout_seconds: Annotated[float, Field(gt=0)] | None = None,
    ) -> str:
        """Run a file of the workspace (.py with python3, .sh with bash, else as a program)
        with the workspace as the current directory; return its exit code and output.

        Args:
            path: The file, relative to the workspace.
            args: Its command-line arguments.
            timeout_seconds: Stop it sooner than the sandbox's own wall-time limit.
        """
        ws = workspaces.for_session(ctx.session_id)
        command = await asyncio.to_thread(_file_command, ws, path, list(args or []))
        run = await sandbox.run(ws, command, wall=timeout_seconds)
        return f"$ {shlex.join(command)}  (in {where})\n" + run.render(lim)

    timeout = lim.wall_seconds + 30  # the sandbox's own limit strikes first, with a result
    return [
        Tool(run_code, name="run_code", writes=True, timeout=timeout),
        Tool(run_file, name="run_file", writes=True, timeout=timeout),
    ]
