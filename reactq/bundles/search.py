"""``search_files``'s engine: a regex over the workspace's text files, under a time budget.

The worker walks the workspace (confined, never through a link) and reads the
files; the regex runs in a child process (``scan.py``) that the worker kills
when the budget is spent, because ``re`` cannot be interrupted in a thread and
holds the GIL while it backtracks (see ``scan.py``). Each line is searched up
to a byte cap, so one minified line costs no more than any other. What was
found before the budget ran out is returned, with a note saying the search
stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from reactq.bundles.globs import GlobPattern
from reactq.bundles.workspace import Workspace, WorkspaceError, split_path

__all__ = ["SCAN_SCRIPT", "SearchLimits", "SearchResult", "search"]

SCAN_SCRIPT = Path(__file__).resolve().with_name("scan.py")
"""The child's script, run by path."""

MAX_PATTERN_CHARS = 1000


@dataclass(frozen=True)
class SearchLimits:
    """How much one search may cost."""

    seconds: float = 10.0
    """The time budget: the scan stops (its child is killed) when it is spent."""
    line_bytes: int = 500
    """Bytes of each line searched and shown; the rest of a longer line is ignored."""
    file_bytes: int = 4 * 1024 * 1024
    """Larger files are skipped."""
    files: int = 20_000
    """Files considered at most (the walk stops there)."""


@dataclass
class SearchResult:
    """What a search found, and how far it got."""

    matches: list[tuple[str, int, str, bool]] = field(default_factory=list)
    """(path, line number, text, cut) in path and line order."""
    searched: int = 0
    """Files the scanner finished."""
    candidates: int = 0
    """Files that matched the filters."""
    skipped_binary: int = 0
    skipped_large: int = 0
    stopped: str | None = None
    """Why the search stopped early: ``time``, ``results``, ``walk``, ``failed``, or None."""

    def render(self, pattern: str, max_results: int, limits: SearchLimits) -> str:
        """The result as the model reads it."""
        lines = [
            f"{path}:{number}: {text}" + (" [line cut]" if cut else "")
            for path, number, text, cut in self.matches
        ]
        files = len({m[0] for m in self.matches})
        if not lines:
            lines.append(f"No line matches /{pattern}/ in {self.searched} file(s) searched.")
        else:
            lines.append(
                f"[{len(self.matches)} matching line(s) in {files} file(s); "
                f"{self.searched} of {self.candidates} file(s) searched]"
            )
        notes = {
            "time": f"the search stopped after its {limits.seconds:g} s time budget; "
            "narrow it with path or glob",
            "results": f"only the first {max_results} matching lines are shown",
            "walk": f"only the first {limits.files} files were considered",
            "failed": "the scanner stopped unexpectedly; some files were not searched",
        }
        if self.stopped:
            lines.append(f"Note: {notes[self.stopped]}.")
        if self.skipped_binary or self.skipped_large:
            lines.append(
                f"Note: skipped {self.skipped_binary} binary file(s) and {self.skipped_large} "
                f"over {limits.file_bytes} bytes."
            )
        return "\n".join(lines)


def compile_pattern(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """Check the pattern here, so a bad one is reported with ``re``'s own reason."""
    if not pattern:
        raise WorkspaceError("the pattern is empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise WorkspaceError(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise WorkspaceError(f"invalid regular expression: {exc}") from None


def _candidates(
    ws: Workspace, path: str, glob: GlobPattern | None, limits: SearchLimits, result: SearchResult
) -> tuple[list[str], bool]:
    """The files to search, in path order; large ones are counted and left out."""
    base = split_path(path)
    entries, truncated = ws.walk(path, limit=limits.files * 4)
    files = []
    for entry in entries:
        if entry.kind != "file":
            continue
        relative = "/".join(entry.path.split("/")[len(base) :]) or entry.path
        if glob is not None and not glob.matches(relative):
            continue
        if entry.size > limits.file_bytes:
            result.skipped_large += 1
            continue
        files.append(entry.path)
        if len(files) >= limits.files:
            return files, True
    return files, truncated


def _read_batch(
    ws: Workspace, paths: list[str], limits: SearchLimits, result: SearchResult
) -> list[tuple[str, bytes]]:
    """The next files' contents (about a MiB at a time), skipping binary ones."""
    out: list[tuple[str, bytes]] = []
    total = 0
    while paths and total < (1 << 20):
        path = paths.pop(0)
        try:
            data = ws.read_bytes(path, limit=limits.file_bytes)
        except WorkspaceError:
            continue  # gone, grown, or replaced by a link since the walk: not searched
        if b"\0" in data[:8192]:
            result.skipped_binary += 1
            continue
        out.append((path, data))
        total += len(data)
    return out


async def search(
    ws: Workspace,
    pattern: str,
    *,
    path: str = ".",
    glob: str | None = None,
    ignore_case: bool = False,
    max_results: int = 100,
    limits: SearchLimits | None = None,
) -> SearchResult:
    """Every line under ``path`` matching ``pattern``, within ``limits``."""
    limits = limits or SearchLimits()
    compile_pattern(pattern, ignore_case)
    matcher = GlobPattern(glob, basename_if_plain=True) if glob else None
    result = SearchResult()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.seconds
    files, walk_cut = await asyncio.to_thread(_candidates, ws, path, matcher, limits, result)
    result.candidates = len(files)
    if walk_cut:
        result.stopped = "walk"
    if not files:
        return result
    options = {"pattern": pattern, "ignore_case": ignore_case, "line_bytes": limits.line_bytes}
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",  # isolated: no PYTHON* variable, no user site, not the current directory
            "-S",  # no site-packages: the scanner needs the standard library only
            "-B",
            str(SCAN_SCRIPT),
            json.dumps(options),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError as exc:
        raise WorkspaceError(f"the search could not start its scanner ({exc})") from None
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    async def feed() -> None:
        pending = list(files)
        try:
            while pending:
                batch = await asyncio.to_thread(_read_batch, ws, pending, limits, result)
                for name, data in batch:
                    stdin.write(json.dumps([name, len(data)]).encode() + b"\n")
                    stdin.write(data)
                    await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the scanner was stopped
        finally:
            # End of input: the scanner finishes and exits, whatever happened here.
            stdin.close()

    async def collect() -> None:
        while True:
            line = await stdout.readline()
            if not line:
                return
            item = json.loads(line)
            if len(item) == 1:
                result.searched += 1
                continue
            result.matches.append((item[0], int(item[1]), item[2], bool(item[3])))
            if len(result.matches) >= max_results:
                result.stopped = "results"
                return

    feeder = asyncio.create_task(feed())
    try:
        try:
            async with asyncio.timeout_at(deadline):
                await collect()
        except TimeoutError:
            result.stopped = "time"
        if result.stopped is None and await proc.wait() != 0:
            result.stopped = "failed"  # its output ended early: it died
    finally:
        feeder.cancel()
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        await asyncio.wait([feeder])
        await proc.wait()
    if not feeder.cancelled() and (error := feeder.exception()) is not None:
        raise error
    return result
