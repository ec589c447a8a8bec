"""What one ``run_code`` / ``run_file`` run may use, and its outcome as the model reads it."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from reactq.shared.errors import ConfigError

__all__ = ["CodeRun", "Limit", "OutputTail", "SandboxLimits", "limit_in_text"]


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use; a run past a limit is stopped and its result says which."""

    wall_seconds: float = 60.0
    """Real time, from the worker's side: past it every process of the run is killed."""
    cpu_seconds: int = 30
    """CPU time of the run's processes together (its cgroup), and of each (``RLIMIT_CPU``)."""
    memory_bytes: int = 1 << 30
    """Memory of the run as a whole, swap off (its cgroup), and address space of each
    process (``RLIMIT_AS``)."""
    max_processes: int = 64
    """Processes and threads of the run at once (its cgroup, else ``RLIMIT_NPROC``)."""
    cpus: float = 1.0
    """CPUs the run may keep busy at once (its cgroup's CPU quota)."""
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
    bounded: bool = False
    """True when a cgroup bounded the run as a whole (else its limits held per process)."""
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
            lines.append(f"[limit struck: {_LIMIT_TEXT[self.limit](limits, self.bounded)}]")
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


def _memory_text(lim: SandboxLimits, whole: bool) -> str:
    if whole:
        return (
            f"memory ({lim.memory_bytes} bytes for the run as a whole, no swap; as much "
            "address space per process)"
        )
    return f"memory ({lim.memory_bytes} bytes of address space per process)"


def _cpu_text(lim: SandboxLimits, whole: bool) -> str:
    if whole:
        return f"CPU time ({lim.cpu_seconds} s for the run as a whole, {lim.cpus:g} CPU at most)"
    return f"CPU time ({lim.cpu_seconds} s per process)"


_LIMIT_TEXT = {
    "wall_time": lambda lim, _: f"wall time ({lim.wall_seconds:g} s): every process was killed",
    "cpu_time": _cpu_text,
    "memory": _memory_text,
    "processes": lambda lim, _: f"processes ({lim.max_processes} at once)",
    "disk": lambda lim, _: "disk: the workspace quota (what the run wrote past it is removed)",
    "output": lambda lim, _: f"output ({lim.max_output_bytes} bytes): the run was killed",
}


class OutputTail:
    """Reads a pipe to its end, keeping the first and last ``keep // 2`` bytes."""

    def __init__(self, keep: int) -> None:
        self.half = keep // 2
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0

    async def drain(
        self,
        stream: asyncio.StreamReader,
        ceiling: int,
        over: asyncio.Event,
        on_chunk: Callable[[bytes], Awaitable[None]] | None = None,
    ) -> None:
        """Read ``stream`` to its end (or past ``ceiling`` bytes: ``over`` is set),
        keeping its head and tail; ``on_chunk`` sees each piece as it comes."""
        while chunk := await stream.read(1 << 16):
            if on_chunk is not None:
                await on_chunk(chunk)
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


def limit_in_text(output: str, failed: bool) -> Limit | None:
    """A limit the code met and reported itself (a process limit is only an error there).

    Only from a run that ``failed``, but for bash's fork retries: a fork bomb's last
    command may well succeed.
    """
    if "fork: retry" in output:
        return "processes"
    if not failed:
        return None
    if "MemoryError" in output or "Cannot allocate memory" in output:
        return "memory"
    if "File too large" in output:
        return "disk"
    if "Resource temporarily unavailable" in output:
        return "processes"
    return None
