"""What importing a part of reactq costs: ``python bench/imports.py [--runs N]``.

Each case runs in fresh interpreters (the venv's Python, or the one running this),
``--runs`` times; the table shows the best wall time (start-up included, so
``python -c pass`` is the floor), its ratio to ``python -c pass``, and how many
modules the case leaves in ``sys.modules`` (counted in one more run). The best of
several runs is what the code costs; the others measure the machine's load.
``reactq --help`` runs the venv's console script itself.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CASES: dict[str, str] = {
    "python -c pass": "pass",
    "import reactq": "import reactq",
    "import reactq.shared.events": "import reactq.shared.events",
    "import reactq.worker.agent": "import reactq.worker.agent",
    "from reactq import Producer": "from reactq import Producer",
    "from reactq import Agent": "from reactq import Agent",
}
"""Label -> the code ``python -c`` runs."""

HELP = "reactq --help"

# Printed when the interpreter exits, so that it counts what `--help` loaded before
# argparse's SystemExit.
_COUNT = "import atexit, sys\natexit.register(lambda: print(len(sys.modules), file=sys.stderr))\n"


def _best(command: list[str], runs: int) -> float:
    """The fastest of ``runs`` runs of ``command``, in seconds."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return min(times)


def _modules(code: str, argv: list[str] | None = None) -> int:
    """How many modules ``code`` leaves in ``sys.modules`` (``argv``: its ``sys.argv``)."""
    setup = f"sys.argv = {argv!r}\n" if argv else ""
    out = subprocess.run(
        [sys.executable, "-c", _COUNT + setup + code],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(out.stderr.strip().splitlines()[-1])


@dataclass
class Row:
    """One case measured."""

    case: str
    seconds: float
    """The best wall time."""
    modules: int
    ratio: float = 0.0
    """``seconds`` over ``python -c pass``'s."""


def measure(runs: int) -> list[Row]:
    """One row per case, ``python -c pass`` first."""
    rows = [
        Row(label, _best([sys.executable, "-c", code], runs), _modules(code))
        for label, code in CASES.items()
    ]
    script = Path(sys.executable).parent / "reactq"
    if script.exists():
        # What the console script runs: import main, call it.
        code = "from reactq.cli import main\nsys.exit(main())"
        best = _best([str(script), "--help"], runs)
        rows.append(Row(HELP, best, _modules(code, ["reactq", "--help"])))
    for row in rows:
        row.ratio = row.seconds / rows[0].seconds
    return rows


def main(argv: list[str] | None = None) -> int:
    """Measure every case and print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per case (default 10)")
    parser.add_argument("--json", action="store_true", help="one JSON row per case")
    args = parser.parse_args(argv)
    rows = measure(args.runs)
    if args.json:
        for row in rows:
            print(json.dumps(asdict(row)))
        return 0
    width = max(len(row.case) for row in rows)
    print(f"{'case':<{width}}  {'best':>8}  {'x pass':>7}  {'modules':>7}")
    for row in rows:
        ms = row.seconds * 1000
        print(f"{row.case:<{width}}  {ms:6.0f}ms  {row.ratio:7.1f}  {row.modules:>7}")
    print(f"(best of {args.runs} runs each, {sys.executable})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
