"""``run_code`` and ``run_file``: model-written code, run in the session's workspace.

The code runs under bubblewrap (``bwrap``) with fresh user, PID, network, IPC
and UTS namespaces: no network at all, ``/usr`` read-only, a small private
``/tmp``, and the session's workspace bind-mounted read-write at
``/workspace`` as the only writable place on disk; of ``/etc`` only what programs
need (certificates, not keys). Each run has a cgroup of its own
(``sandbox_cgroup.py``): memory with swap off, processes and CPU are bounded for
the run as a whole; where no cgroup can be made the start-up log says so, and
the limits hold per process only. Inside, ``prlimit`` caps CPU time, address
space and (without a pids cgroup) processes per process, file size (the
workspace quota's free bytes) and open files. From the worker's side the run
has a wall-clock limit (the whole process group is killed; the PID namespace
dies with its first process, taking any daemon with it), an output cap (kept
head and tail), and watchdogs on the run's CPU time and the workspace's size
(bytes and inodes): a run that passes the quota is killed, and what it wrote
last is then removed until the workspace is within it again (``Workspace.trim``).

Under a worker running as root, bubblewrap itself runs as an unprivileged host
user (``REACTQ_SANDBOX_UID``, 65534 by default) that owns the session's
workspace: uid 0 mapped into a user namespace is still root to every file it
can reach, and Linux exempts it from ``RLIMIT_NPROC``.

Every call is I/O on an asyncio subprocess: the worker's event loop never waits
on the code. ``REACTQ_SANDBOX=none`` runs the same command without bubblewrap,
and every result says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from reactq.bundles.sandbox_cgroup import JOIN, CgroupParent, RunCgroup, probe
from reactq.bundles.sandbox_host import (
    SEAL,
    as_user,
    base_args,
    code_uid,
    hand_over,
    sandbox_problem,
    unreachable,
)
from reactq.bundles.sandbox_result import (
    CodeRun,
    Limit,
    OutputTail,
    SandboxLimits,
    limit_in_text,
)
from reactq.bundles.workspace import (
    Workspace,
    WorkspaceError,
    Workspaces,
    settings_for,
    split_path,
)
from reactq.shared.errors import ToolError
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
_INTERPRETERS = {".py": ["python3"], ".sh": ["bash"], ".bash": ["bash"]}
_WATCH_SECONDS = 0.2


class SandboxError(ToolError):
    """run_code / run_file could not start the code; the message says why, for the model."""

    code = "sandbox_error"


# --- running ----------------------------------------------------------------------------


class Sandbox:
    """Runs commands in a session's workspace, under bubblewrap unless ``mode`` is none.

    ``cgroup`` is ``REACTQ_SANDBOX_CGROUP`` (where run cgroups go; ``""`` the worker's own,
    ``off`` none); ``uid`` the host user code runs as when the worker is root. Both are
    probed here, once: construct it at start-up.
    """

    def __init__(
        self,
        workspaces: Workspaces,
        limits: SandboxLimits | None = None,
        *,
        mode: Literal["bwrap", "none"] = "bwrap",
        bwrap: str = "bwrap",
        cgroup: str = "",
        uid: int = 65534,
    ) -> None:
        self.workspaces = workspaces
        self.limits = limits or SandboxLimits()
        self.mode = mode
        self.bwrap = shutil.which(bwrap) or bwrap
        self.host_uid = code_uid(uid) if mode == "bwrap" else None
        self.cgroups: CgroupParent | None
        self.cgroups, self.cgroup_note = probe(cgroup) if mode == "bwrap" else (None, "")

    def bounds_note(self) -> str:
        """For the start-up log: what bounds a run, and whether as a whole or per process."""
        who = (
            f"code runs as host uid {self.host_uid}"
            if self.host_uid is not None
            else "code runs as the worker's own uid"
        )
        if self.cgroups is not None:
            return (
                f"each run is bounded as a whole by a cgroup of its own (memory, processes, "
                f"CPU: {self.cgroup_note}); {who}"
            )
        return (
            f"no cgroup for the runs ({self.cgroup_note}): memory, CPU time and processes are "
            "limited PER PROCESS only (RLIMIT_AS, RLIMIT_CPU, RLIMIT_NPROC of the uid), so a "
            "run that forks N processes may use N times as much; give the worker a delegated "
            f"cgroup (REACTQ_SANDBOX_CGROUP); {who}"
        )

    def _argv(
        self,
        ws: Workspace,
        command: list[str],
        fsize: int,
        cgroup: RunCgroup | None,
    ) -> list[str]:
        lim = self.limits
        limited = [
            "/usr/bin/prlimit",
            f"--cpu={lim.cpu_seconds}:{lim.cpu_seconds + 1}",
            f"--as={lim.memory_bytes}",
            # A pids cgroup counts this run alone; RLIMIT_NPROC counts the uid's processes.
            *([] if cgroup else [f"--nproc={lim.max_processes}"]),
            f"--fsize={fsize}",
            "--core=0",
            "--nofile=256",
            "--",
            *command,
        ]
        if self.mode == "none":
            return limited
        argv = [self.bwrap, *base_args(lim.tmp_bytes), "--bind", str(ws.path), MOUNT, *SEAL]
        for name, value in (("PATH", _PATH), ("HOME", "/tmp"), ("LANG", "C.UTF-8")):
            argv += ["--setenv", name, value]
        argv += ["--chdir", MOUNT, "--", *limited]
        argv = [*as_user(self.host_uid), *argv]
        if cgroup is not None:
            # Into the run's cgroup before bwrap forks anything, so every process counts.
            procs = map(str, cgroup.procs)
            argv = ["/bin/sh", "-c", JOIN + '; shift; exec "$@"', "join", *procs, "--", *argv]
        return argv

    async def run(
        self,
        ws: Workspace,
        command: list[str],
        *,
        stdin: bytes = b"",
        wall: float | None = None,
        on_output: Callable[[bytes], Awaitable[None]] | None = None,
    ) -> CodeRun:
        """Run ``command`` in ``ws`` (its files at ``/workspace``, the current directory);
        ``on_output`` sees its output as it comes (the run's progress)."""
        # A full workspace still runs code (to delete files), but nothing may grow a file.
        free = await asyncio.to_thread(ws.free_bytes)  # also creates the directory
        if self.host_uid is not None:
            try:
                await asyncio.to_thread(hand_over, ws.path, self.host_uid)
            except OSError as exc:
                raise SandboxError(
                    f"the workspace could not be given to uid {self.host_uid}: {exc}"
                ) from None
        # After the hand-over: its chown moves every file's ctime, which ``trim`` reads
        # as "written by the run".
        since = await asyncio.to_thread(ws.clock)
        lim = self.limits
        try:
            cgroup = (
                RunCgroup(self.cgroups, lim.memory_bytes, lim.max_processes, lim.cpus)
                if self.cgroups
                else None
            )
        except OSError as exc:
            raise SandboxError(f"the run's cgroup could not be made: {exc}") from None
        started = time.monotonic()
        wall = min(wall or lim.wall_seconds, lim.wall_seconds)
        env = {"PATH": _PATH, "HOME": str(ws.path), "LANG": "C.UTF-8"}
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(ws, command, free, cgroup),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=ws.path if self.mode == "none" else "/",
                env=env if self.mode == "none" else {"PATH": _PATH},
                start_new_session=True,  # its own process group, killed as one
            )
        except OSError as exc:
            if cgroup:
                await cgroup.remove()
            raise SandboxError(f"the code could not be started: {exc}") from None
        limit: Limit | None = None  # the finally reads it when _supervise raises
        try:
            limit = await self._supervise(
                proc, ws, stdin, wall, output := OutputTail(lim.output_bytes), cgroup, on_output
            )
        finally:
            self._kill(proc)
            if proc.returncode is None:
                await proc.wait()
            if cgroup:
                if cgroup.oom_killed():
                    limit = limit or "memory"
                elif cgroup.pids_struck():
                    limit = limit or "processes"
                await cgroup.remove()
        # The watchdog strikes a moment late (or another limit first): what the run wrote
        # past the quota goes, whatever stopped it.
        removed = await asyncio.to_thread(ws.trim, since)
        if removed:
            limit = limit or "disk"
        text = output.text()
        exit_code = proc.returncode
        if limit in ("wall_time", "output") or (
            limit in ("disk", "memory", "cpu_time") and exit_code == -signal.SIGKILL
        ):
            exit_code = None
        elif exit_code is not None and exit_code < 0:
            exit_code = 128 - exit_code
        if limit is None and exit_code is not None and exit_code > 128:
            if exit_code - 128 in (signal.SIGXCPU, signal.SIGKILL):
                limit = "cpu_time"
            elif exit_code - 128 == signal.SIGXFSZ:
                limit = "disk"
        if limit is None:
            limit = limit_in_text(text[-4000:], failed=bool(exit_code))
        return CodeRun(
            exit_code=exit_code,
            limit=limit,
            output=text,
            output_total=output.total,
            sandboxed=self.mode == "bwrap",
            seconds=time.monotonic() - started,
            bounded=cgroup is not None,
            removed=tuple(removed),
        )

    async def _supervise(
        self,
        proc: asyncio.subprocess.Process,
        ws: Workspace,
        stdin: bytes,
        wall: float,
        output: OutputTail,
        cgroup: RunCgroup | None,
        on_output: Callable[[bytes], Awaitable[None]] | None = None,
    ) -> Limit | None:
        assert proc.stdin is not None and proc.stdout is not None
        over = asyncio.Event()
        full = asyncio.Event()
        reader = asyncio.create_task(
            output.drain(proc.stdout, self.limits.max_output_bytes, over, on_output)
        )
        watchers = [asyncio.create_task(self._watch_quota(ws, full))]
        feeder = asyncio.create_task(self._feed(proc.stdin, stdin))
        waiter = asyncio.create_task(proc.wait())
        stops: dict[asyncio.Task[Any], Limit] = {
            asyncio.create_task(over.wait()): "output",
            asyncio.create_task(full.wait()): "disk",
        }
        if cgroup is not None:
            memory, cpu = asyncio.Event(), asyncio.Event()
            watchers.append(asyncio.create_task(self._watch_cgroup(cgroup, memory, cpu)))
            stops[asyncio.create_task(memory.wait())] = "memory"
            stops[asyncio.create_task(cpu.wait())] = "cpu_time"
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
            tasks = (reader, *watchers, feeder, waiter, *stops)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return limit

    async def _watch_cgroup(
        self, cgroup: RunCgroup, memory: asyncio.Event, cpu: asyncio.Event
    ) -> None:
        """Stop the run at its first OOM kill (v1 kills one process, not the run) and when
        its processes together have had their CPU time."""
        while True:
            await asyncio.sleep(_WATCH_SECONDS)
            if cgroup.oom_killed():
                memory.set()
                return
            if cgroup.cpu_seconds() >= self.limits.cpu_seconds:
                cpu.set()
                return

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


PROGRESS_OUTPUT_CHARS = 4000
"""The most of a run's new output one ``tool_progress`` event carries (its end)."""


def _progress_of(ctx: ToolContext) -> Callable[[bytes], Awaitable[None]]:
    """A run's output as the call's progress: its last line as the message, the new
    output in ``data`` (reports that come faster than the events go out are
    coalesced: the newest output wins; the result has all of it)."""

    async def on_output(chunk: bytes) -> None:
        text = chunk.decode("utf-8", "replace")
        lines = text.rstrip().rsplit("\n", 1)
        await ctx.progress(lines[-1], data={"output": text[-PROGRESS_OUTPUT_CHARS:]})

    return on_output


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
        problem = sandbox_problem(bwrap, uid=settings.sandbox_uid)
        host_uid = code_uid(settings.sandbox_uid)
        root = Path(settings.workspace_root)
        blocked = None if host_uid is None else unreachable(root, host_uid)
        if problem is None and blocked is not None:
            problem = (
                f"code runs as uid {host_uid} under a root worker, and it cannot reach the "
                f"workspaces ({root}): {blocked} is mode {blocked.stat().st_mode & 0o7777:o} "
                "(let others through it, chmod o+x, or set REACTQ_WORKSPACE_ROOT elsewhere)"
            )
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
    sandbox = Sandbox(
        workspaces,
        limits,
        mode=settings.sandbox,
        bwrap=bwrap,
        cgroup=settings.sandbox_cgroup or "",
        uid=settings.sandbox_uid,
    )
    if settings.sandbox == "bwrap":
        note = sandbox.bounds_note()
        (log.info if sandbox.cgroups else log.warning)("run_code and run_file: %s", note)
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
        run = await sandbox.run(
            ws, command, stdin=stdin, wall=timeout_seconds, on_output=_progress_of(ctx)
        )
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
        run = await sandbox.run(ws, command, wall=timeout_seconds, on_output=_progress_of(ctx))
        return f"$ {shlex.join(command)}  (in {where})\n" + run.render(lim)

    timeout = lim.wall_seconds + 30  # the sandbox's own limit strikes first, with a result
    return [
        Tool(run_code, name="run_code", writes=True, timeout=timeout),
        Tool(run_file, name="run_file", writes=True, timeout=timeout),
    ]
