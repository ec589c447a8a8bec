"""CPU time read from /proc: what a process or thread has used, whatever else the
machine was doing (the pool benchmarks' figures are these, not wall time)."""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def stat_fields(stat: str | Path) -> list[str]:
    """The fields of a /proc ``stat`` file after the command name (field 3 first)."""
    return Path(stat).read_text().rpartition(")")[2].split()


def cpu_seconds(stat: str | Path) -> float:
    """User + system CPU seconds of a /proc ``stat`` file's process (all its threads)
    or thread (``/proc/<pid>/task/<tid>/stat``)."""
    fields = stat_fields(stat)
    return (int(fields[11]) + int(fields[12])) / TICK
