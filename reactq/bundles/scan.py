"""The regex scanner ``search_files`` runs as a child process (standard library only).

Python's ``re`` holds the GIL while it matches and cannot be interrupted from
another thread, so a catastrophic pattern (``(a+)+$``) run in a worker thread
would stall the worker's event loop, and every turn on it, for as long as it
backtracks. Run in a child process instead, the match can be stopped: the
worker kills the child when the search's time budget is spent and keeps what
it had already reported.

The child touches no file: the worker reads the workspace (confined, without
following links) and feeds it the contents on stdin. The protocol:

- argv[1]: JSON ``{"pattern": str, "ignore_case": bool, "line_bytes": int}``;
- stdin, per file: a JSON header line ``[path, size]``, then ``size`` bytes;
- stdout, per matching line: JSON ``[path, line_number, text, cut]`` (``cut``:
  the line was longer than ``line_bytes`` and only its start was searched),
  and after each file ``[path]``, so the worker knows how far it got.

It runs as ``python -I -S scan.py`` (by path, so nothing but the standard
library is imported and no environment variable changes its behaviour).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator

__all__ = ["main", "matches"]


def matches(
    pattern: re.Pattern[str], data: bytes, line_bytes: int
) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, cut) of each line of ``data`` that ``pattern`` matches.

    Only a line's first ``line_bytes`` bytes are searched and shown (``cut`` says
    there was more): a minified file's one huge line costs no more than a short one.
    """
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the empty "line" after the last newline
    for number, raw in enumerate(lines, 1):
        text = raw[:line_bytes].decode("utf-8", "replace").rstrip("\r")
        if pattern.search(text):
            yield number, text, len(raw) > line_bytes


def main(argv: list[str]) -> int:
    """Scan the files fed on stdin; print each match as soon as it is found."""
    options = json.loads(argv[1])
    flags = re.IGNORECASE if options.get("ignore_case") else 0
    pattern = re.compile(options["pattern"], flags)
    line_bytes = int(options["line_bytes"])
    source = sys.stdin.buffer
    out = sys.stdout
    while True:
        header = source.readline()
        if not header:
            return 0
        path, size = json.loads(header)
        data = source.read(size)
        for number, text, cut in matches(pattern, data, line_bytes):
            out.write(json.dumps([path, number, text, cut]) + "\n")
            # Flushed match by match: a kill mid-file keeps what was found.
            out.flush()
        out.write(json.dumps([path]) + "\n")
        out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
