"""A cgroup per ``run_code`` / ``run_file`` run: memory (swap off), processes and CPU
bounded for the run as a whole, however many processes it forks.

Resource limits (``RLIMIT_*``) hold per process: six children under a 1 GB address
space limit hold 6 GB. A cgroup holds every process of the run. At start-up
``probe`` finds where run cgroups can be made, under ``REACTQ_SANDBOX_CGROUP`` or,
by default, the worker's own cgroup:

* cgroup v2 (``/sys/fs/cgroup/cgroup.controllers``): memory, pids and cpu must be
  available there (delegated, for a worker that is not root). A cgroup with
  processes in it cannot enable controllers for its children ("no internal
  processes"); when that parent is the worker's own cgroup, its processes move into
  a leaf of their own (``reactq-worker``) first, as systemd asks of a delegated
  service.
* cgroup v1: a writable directory in each of the memory, pids, cpu and cpuacct
  hierarchies.

Where neither works, ``probe`` says why and run_code keeps per-process limits only.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import secrets
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["JOIN", "CgroupParent", "RunCgroup", "probe"]

log = logging.getLogger("reactq.bundles")

_ROOT = Path("/sys/fs/cgroup")
_V1 = ("memory", "pids", "cpu", "cpuacct")
_V2 = ("memory", "pids", "cpu")
_PERIOD_US = 100_000
JOIN = 'for f; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; shift; done'
"""Shell that writes its own pid to each ``cgroup.procs`` given before ``--`` (the run's
first process joins its cgroups before bwrap forks anything, so every process counts)."""


@dataclass(frozen=True)
class CgroupParent:
    """Where run cgroups are made: one directory (v2) or one per v1 hierarchy."""

    version: int
    dirs: dict[str, Path]
    """v2: ``{"": parent}``; v1: controller name to its hierarchy's parent directory (one
    directory for controllers mounted together, as ``cpu,cpuacct``)."""

    def unique(self) -> list[Path]:
        """Each directory once."""
        return list(dict.fromkeys(self.dirs.values()))

    swap_off: bool
    """Whether swap is counted against the memory limit (else the run may use swap too)."""

    def describe(self) -> str:
        """For the start-up log."""
        where = ", ".join(map(str, self.unique()))
        swap = "swap off" if self.swap_off else "swap NOT accounted by this kernel"
        return f"cgroup v{self.version} under {where} ({swap})"


def _own_cgroups() -> dict[str, str]:
    """Controller (``""`` for v2) to this process's cgroup path, from /proc/self/cgroup."""
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path
    return own


def _v1_mounts() -> dict[str, tuple[Path, str]]:
    """v1 controller to (mount point, the hierarchy path mounted there)."""
    mounts: dict[str, tuple[Path, str]] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        fstype, _, options = [*tail.split(" "), "", ""][:3]
        if fstype != "cgroup":
            continue
        parts = fields.split(" ")
        for name in options.split(","):
            if name in _V1:
                mounts.setdefault(name, (Path(parts[4]), parts[3]))
    return mounts


def _under(mount: Path, mount_root: str, path: str) -> Path:
    relative = os.path.relpath(path, mount_root) if mount_root != "/" else path.lstrip("/")
    if relative.startswith(".."):
        raise OSError(errno.ENOENT, f"cgroup {path} is outside the mounted {mount_root}")
    return mount / relative if relative != "." else mount


def _try_child(dirs: list[Path]) -> None:
    """Make a child in each directory, move a process into them, remove them: OSError
    when any step cannot be done (as a run would need it)."""
    made: list[Path] = []
    try:
        for parent in dirs:
            child = parent / f"reactq-probe-{secrets.token_hex(4)}"
            child.mkdir()
            made.append(child)
        procs = [str(child / "cgroup.procs") for child in made]
        done = subprocess.run(
            ["/bin/sh", "-c", JOIN + "; shift; exec true", "probe", *procs, "--"],
            capture_output=True,
            timeout=20,
        )
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip()
            raise OSError(errno.EACCES, f"a process cannot join its cgroup: {said}")
    finally:
        for child in made:
            with contextlib.suppress(OSError):
                child.rmdir()


def _probe_v2(setting: str) -> CgroupParent:
    own = _own_cgroups().get("")
    if own is None:
        raise OSError(errno.ENOENT, "this process is in no cgroup v2")
    parent = _ROOT / (setting or own).lstrip("/")
    available = set((parent / "cgroup.controllers").read_text().split())
    missing = [c for c in _V2 if c not in available]
    if missing:
        raise OSError(errno.EPERM, f"{parent} has no {', '.join(missing)} controller delegated")
    try:
        _enable(parent)
    except OSError as exc:
        if exc.errno != errno.EBUSY or parent != _ROOT / own.lstrip("/"):
            raise
        _leave_for_a_leaf(parent)
        _enable(parent)
    _try_child([parent])
    return CgroupParent(2, {"": parent}, swap_off=(parent / "memory.swap.max").exists())


def _enable(parent: Path) -> None:
    enabled = set((parent / "cgroup.subtree_control").read_text().split())
    wanted = " ".join(f"+{c}" for c in _V2 if c not in enabled)
    if wanted:
        (parent / "cgroup.subtree_control").write_text(wanted)


def _leave_for_a_leaf(parent: Path) -> None:
    """Move every process of ``parent`` into its child ``reactq-worker``."""
    leaf = parent / "reactq-worker"
    leaf.mkdir(exist_ok=True)
    for _ in range(10):  # processes forked meanwhile land in parent: go round again
        pids = (parent / "cgroup.procs").read_text().split()
        if not pids:
            log.info("moved the worker's processes into the cgroup %s", leaf)
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                (leaf / "cgroup.procs").write_text(pid)
    raise OSError(errno.EBUSY, f"processes keep arriving in {parent}")


def _probe_v1(setting: str) -> CgroupParent:
    own = _own_cgroups()
    mounts = _v1_mounts()
    missing = [c for c in _V1 if c not in mounts or c not in own]
    if missing:
        raise OSError(errno.ENOENT, f"no cgroup v1 hierarchy for {', '.join(missing)}")
    dirs = {c: _under(mounts[c][0], mounts[c][1], setting or own[c]) for c in _V1}
    _try_child(list(dict.fromkeys(dirs.values())))
    swap_off = (dirs["memory"] / "memory.memsw.limit_in_bytes").exists()
    return CgroupParent(1, dirs, swap_off=swap_off)


def probe(setting: str) -> tuple[CgroupParent | None, str]:
    """Where run cgroups can be made, or None and why not (blocking: call at start-up)."""
    if setting == "off":
        return None, "REACTQ_SANDBOX_CGROUP=off"
    version = 2 if (_ROOT / "cgroup.controllers").exists() else 1
    try:
        parent = _probe_v2(setting) if version == 2 else _probe_v1(setting)
    except OSError as exc:
        return None, f"cgroup v{version}: {exc.strerror or exc}" + (
            f" ({exc.filename})" if exc.filename else ""
        )
    return parent, parent.describe()


class RunCgroup:
    """One run's cgroup (one per v1 hierarchy), limits written, removed by ``remove``."""

    def __init__(self, parent: CgroupParent, memory: int, processes: int, cpus: float) -> None:
        self.parent = parent
        name = f"reactq-run-{secrets.token_hex(6)}"
        self.dirs = {c: d / name for c, d in parent.dirs.items()}
        self.unique = [d / name for d in parent.unique()]
        quota = max(1000, int(cpus * _PERIOD_US))
        if parent.version == 1:
            writes = [
                ("memory", "memory.limit_in_bytes", str(memory)),
                # memsw is memory plus swap: equal to the memory limit means no swap at all.
                ("memory", "memory.memsw.limit_in_bytes", str(memory) if parent.swap_off else ""),
                ("memory", "memory.swappiness", "0"),
                ("pids", "pids.max", str(processes)),
                ("cpu", "cpu.cfs_period_us", str(_PERIOD_US)),
                ("cpu", "cpu.cfs_quota_us", str(quota)),
            ]
        else:
            writes = [
                ("memory", "memory.max", str(memory)),
                ("memory", "memory.swap.max", "0" if parent.swap_off else ""),
                ("memory", "memory.oom.group", "1"),  # an OOM kill ends the whole run
                ("pids", "pids.max", str(processes)),
                ("cpu", "cpu.max", f"{quota} {_PERIOD_US}"),
            ]
        try:
            for path in self.unique:
                path.mkdir()
            for controller, name, value in writes:
                if value:
                    (self._dir(controller) / name).write_text(value)
        except OSError:
            self._rmdirs()
            raise

    def _dir(self, controller: str) -> Path:
        return self.dirs.get(controller) or self.dirs[""]

    @property
    def procs(self) -> list[Path]:
        """The ``cgroup.procs`` files the run's first process writes its pid to."""
        return [d / "cgroup.procs" for d in self.unique]

    def _read(self, controller: str, name: str) -> str:
        try:
            return (self._dir(controller) / name).read_text()
        except OSError:
            return ""

    def _count(self, controller: str, name: str, key: str) -> int:
        for line in self._read(controller, name).splitlines():
            field, _, value = line.partition(" ")
            if field == key:
                return int(value)
        return 0

    def cpu_seconds(self) -> float:
        """CPU time of every process the run has had."""
        if self.parent.version == 1:
            return int(self._read("cpuacct", "cpuacct.usage") or 0) / 1e9
        return self._count("cpu", "cpu.stat", "usage_usec") / 1e6

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the run for its memory limit."""
        name = "memory.oom_control" if self.parent.version == 1 else "memory.events"
        return self._count("memory", name, "oom_kill") > 0

    def pids_struck(self) -> bool:
        """Whether a fork of the run was refused for the process limit."""
        return self._count("pids", "pids.events", "max") > 0

    def kill_all(self) -> None:
        """SIGKILL every process in the run's cgroup."""
        for procs in self.procs:
            with contextlib.suppress(OSError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)

    def _rmdirs(self) -> bool:
        gone = True
        for path in self.unique:
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                gone = False
        return gone

    async def remove(self) -> None:
        """Kill what is left of the run and remove its cgroups."""
        for _ in range(100):
            self.kill_all()
            if self._rmdirs():
                return
            await asyncio.sleep(0.05)
        log.warning("could not remove the sandbox cgroup %s", ", ".join(map(str, self.unique)))
