"""The kernel against the SDKs it replaces, side by side: ``python -m bench.kernel``.

The same scripted turn (get_weather, then get_time, then a final answer; the
step decided from the number of tool messages) runs through reactq's AgentLoop
and AgentRunner (+MemoryStateStore), fifty-agent-sdk 1.12.0's AgentLoop and
AgentRunner (+its MemoryStateStore), and neosian 1.12.2's Agent.run and
Conversation (over a dict store). Each peer runs in a virtualenv this script
makes under ``.reactq/bench-venvs/`` (fifty with ``mcp<2``; neosian on Python
3.12: ``$PYTHON312``, else ``python3.12`` on PATH, else one uv or pyenv knows),
every measurement in a fresh subprocess so peak RSS is its own.

Modes: ``sequential`` (fresh session each turn), ``concurrent`` (all turns at
once, each model call sleeping ``--latency``), and ``http`` (the real openai SDK
to a local ScriptedServer). Over HTTP each framework turn runs next to the same
turn made with the bare SDK in the same process (rotating order), so the
overhead is a median of paired differences, robust to the machine's load; every
HTTP row is the median of ``--rounds`` processes. ``http/20`` rows run sessions
of ``--session-turns`` turns whose history grows, as production sessions do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers.common import FINAL_TEXT, count_tool_messages, step_for  # noqa: E402
from reactq.worker.agent.llm.replies import Reply  # noqa: E402
from reactq.worker.agent.llm.scripted_server import ScriptedServer  # noqa: E402

VENVS = ROOT / ".reactq" / "bench-venvs"
PEERS: dict[str, dict[str, Any]] = {
    "fifty": {
        "python": lambda: sys.executable,
        "requirements": ["fifty-agent-sdk==1.12.0", "mcp<2"],
        "runner": "fifty_runner.py",
    },
    "neosian": {
        "python": lambda: find_python("3.12"),
        "requirements": ["neosian==1.12.2"],
        "runner": "neosian_runner.py",
    },
}


def _is_python(executable: str, version: str) -> bool:
    try:
        out = subprocess.run(
            [executable, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def find_python(version: str) -> str:
    """A Python ``version`` interpreter: ``$PYTHON312`` (for 3.12), ``python3.12`` on
    PATH, or one that uv or pyenv knows; SystemExit saying how to provide one."""
    variable = "PYTHON" + version.replace(".", "")
    chosen = os.environ.get(variable)
    if chosen:
        if not _is_python(chosen, version):
            raise SystemExit(f"bench.kernel: {variable}={chosen!r} is not a Python {version}")
        return chosen
    candidates = [shutil.which(f"python{version}")]
    # A version manager's interpreters, when one is installed (a pyenv shim on PATH
    # fails unless that version is selected).
    for finder in (
        ["uv", "python", "find", version],
        ["pyenv", "whence", "--path", f"python{version}"],
    ):
        if shutil.which(finder[0]):
            found = subprocess.run(finder, capture_output=True, text=True)
            candidates += found.stdout.split() if found.returncode == 0 else []
    for candidate in candidates:
        if candidate and _is_python(candidate, version):
            return candidate
    raise SystemExit(
        f"bench.kernel: the neosian peer needs Python {version} and none was found: "
        f"set {variable}=/path/to/python{version}, put python{version} on PATH, "
        f"or install it with uv (uv python install {version})"
    )


def bench_handler(request: dict[str, Any]) -> Reply:
    """The scripted model over HTTP: the step from the number of tool messages."""
    step = step_for(count_tool_messages(request.get("messages") or []))
    usage = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
    if step is None:
        return Reply.text(FINAL_TEXT, usage=usage)
    return Reply.tool_calls([step], usage=usage)


def ensure_venv(name: str) -> Path:
    """The peer's virtualenv python, creating and installing it on first use."""
    spec = PEERS[name]
    venv = VENVS / name
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    wanted = " ".join(spec["requirements"])
    if marker.exists() and marker.read_text() == wanted:
        return python
    print(f"[setup] creating {venv} ({wanted})", file=sys.stderr, flush=True)
    subprocess.run([spec["python"](), "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *spec["requirements"]],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    marker.write_text(wanted)
    return python


def run_one(python: Path, runner: str, **options: Any) -> dict[str, Any]:
    """Run one measurement in a fresh process; return its result JSON."""
    argv = [str(python), str(ROOT / "bench" / "peers" / runner)]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{runner} {options} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(result: dict[str, Any]) -> dict[str, float]:
    samples = sorted(result["samples_us"])
    n = len(samples)
    out = {
        "mean": statistics.fmean(samples),
        "p50": samples[n // 2],
        "p99": samples[min(n - 1, int(n * 0.99))],
        "rss_mb": result["peak_rss_kb"] / 1024,
        "wall_s": result["wall_s"],
    }
    if n >= 400:  # flatness as sessions accumulate: the first tenth against the last
        tenth = n // 10
        first = sorted(result["samples_us"][:tenth])
        last = sorted(result["samples_us"][-tenth:])
        out["drift"] = last[len(last) // 2] / first[len(first) // 2]
    return out


def paired(result: dict[str, Any], key: str, positions: range | None = None) -> float:
    """The median of the per-index differences between the framework's turn and a bare
    SDK turn run next to it (``positions``: only those turn positions in a session)."""
    n = result.get("session_turns", 1)
    diffs = [
        mine - theirs
        for i, (mine, theirs) in enumerate(zip(result["samples_us"], result[key], strict=True))
        if positions is None or i % n in positions
    ]
    return statistics.median(diffs)


def http_rows(
    python: Path, runner: str, base_url: str, name: str, args: argparse.Namespace
) -> list[tuple[str, str, dict[str, float]]]:
    """The HTTP rows of one framework: single-turn sessions, then sessions that grow.

    Each row is the median over ``args.rounds`` fresh processes of: the p50 of the
    framework's turns, of the bare SDK's, and the median paired difference (see
    ``measure_http``): ``overhead`` over the SDK's ``create``, ``lean`` over the SDK
    with the request transform skipped, ``late`` over ``create`` in the last quarter
    of each session (the longest histories).
    """
    rows: list[tuple[str, str, dict[str, float]]] = []
    plans = [(scenario, "http", args.http, 1) for scenario in ("loop", "runner")]
    if args.sessions and args.session_turns > 1:
        mode = f"http/{args.session_turns}"
        total = args.sessions * args.session_turns
        # A peer's loop takes no history; its runner keeps the session.
        scenarios = ("loop", "runner") if name == "reactq" else ("runner",)
        plans += [(scenario, mode, total, args.session_turns) for scenario in scenarios]
    for scenario, mode, turns, n in plans:
        rounds: list[dict[str, float]] = []
        framework = ""
        for _ in range(args.rounds):
            result = run_one(
                python,
                runner,
                scenario=scenario,
                mode="http",
                turns=turns,
                base_url=base_url,
                session_turns=n,
                warmup=50 if n == 1 else 10,
            )
            result["session_turns"] = n
            framework = result["framework"]
            late = range(n - max(1, n // 4), n)
            rounds.append(
                {
                    **summary(result),
                    "sdk_p50": statistics.median(result["raw_samples_us"]),
                    "overhead": paired(result, "raw_samples_us"),
                    "lean": paired(result, "lean_samples_us"),
                    "late": paired(result, "raw_samples_us", late if n > 1 else None),
                }
            )
        row = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        row["spread"] = max(r["overhead"] for r in rounds) - min(r["overhead"] for r in rounds)
        rows.append((framework, mode, row))
    return rows


def main(argv: list[str] | None = None) -> None:
    """Run every framework and print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.kernel", description=__doc__)
    parser.add_argument("--sequential", type=int, default=2000, help="sequential turns")
    parser.add_argument("--concurrent", type=int, default=200, help="concurrent turns")
    parser.add_argument("--latency", type=float, default=0.05, help="model sleep (concurrent)")
    parser.add_argument("--http", type=int, default=300, help="sequential turns over HTTP")
    parser.add_argument(
        "--sessions", type=int, default=5, help="sessions over HTTP whose history grows"
    )
    parser.add_argument("--session-turns", type=int, default=20, help="turns per such session")
    parser.add_argument(
        "--rounds", type=int, default=3, help="HTTP runs per row (fresh processes; the median)"
    )
    parser.add_argument("--only", default="", help="comma list: reactq,fifty,neosian")
    args = parser.parse_args(argv)
    only = set(filter(None, args.only.split(","))) or {"reactq", "fifty", "neosian"}
    pythons: dict[str, tuple[Path, str]] = {}
    if "reactq" in only:
        pythons["reactq"] = (Path(sys.executable), "reactq_runner.py")
    for name in ("fifty", "neosian"):
        if name in only:
            pythons[name] = (ensure_venv(name), PEERS[name]["runner"])
    server = ScriptedServer(bench_handler, max_requests=1).start_in_thread()
    rows: list[tuple[str, str, dict[str, float]]] = []
    try:
        for name, (python, runner) in pythons.items():
            for scenario in ("loop", "runner"):
                for mode, turns in (
                    ("sequential", args.sequential),
                    ("concurrent", args.concurrent),
                ):
                    latency = args.latency if mode == "concurrent" else 0.0
                    result = run_one(
                        python, runner, scenario=scenario, mode=mode, turns=turns, latency=latency
                    )
                    stats = summary(result)
                    if mode == "concurrent":  # CPU per turn: the wall time beyond the sleeps
                        stats["cpu_us"] = (result["wall_s"] - 3 * latency) * 1e6 / turns
                    rows.append((result["framework"], mode, stats))
            if args.http:
                rows += http_rows(python, runner, server.base_url, name, args)
    finally:
        server.stop()
    print_table(rows)


def print_table(rows: list[tuple[str, str, dict[str, float]]]) -> None:
    """Print every row, then our ratio to each peer for the same mode and role."""
    print(f"\n{'framework':<30}{'mode':<12}{'mean µs':>10}{'p50 µs':>10}{'p99 µs':>10}"
          f"{'RSS MB':>8}{'wall s':>8}{'drift':>7}")  # fmt: skip
    for name, mode, s in rows:
        if mode.startswith("http"):
            continue
        drift = f"{s['drift']:.2f}" if "drift" in s else ""
        print(f"{name:<30}{mode:<12}{s['mean']:>10.0f}{s['p50']:>10.0f}{s['p99']:>10.0f}"
              f"{s['rss_mb']:>8.1f}{s['wall_s']:>8.2f}{drift:>7}")  # fmt: skip
    http = [row for row in rows if row[1].startswith("http")]
    if http:
        print(
            "\nHTTP (median of rounds; +µs = median paired difference per turn; late = "
            "last quarter of each session; lean = over the SDK without its request transform)"
        )
        print(f"{'framework':<30}{'mode':<10}{'p50 µs':>9}{'SDK p50':>9}{'+µs/SDK':>9}"
              f"{'late':>9}{'lean':>9}{'spread':>8}")  # fmt: skip
        for name, mode, s in http:
            print(f"{name:<30}{mode:<10}{s['p50']:>9.0f}{s['sdk_p50']:>9.0f}"
                  f"{s['overhead']:>+9.0f}{s['late']:>+9.0f}{s['lean']:>+9.0f}"
                  f"{s['spread']:>8.0f}")  # fmt: skip
    print(
        "\nratio = reactq / peer: p50 per turn (sequential); CPU per turn, i.e. (wall - 3 x "
        "latency) / turns (concurrent); HTTP: overhead over the bare SDK (goal <= +300 µs)"
    )
    ours = {(n.split()[1], m): s for n, m, s in rows if n.startswith("reactq")}
    for (role, mode), s in ours.items():
        if mode.startswith("http"):
            print(f"  reactq {role:<21} {mode:<11} overhead {s['overhead']:+.0f} µs "
                  f"(late {s['late']:+.0f}, lean {s['lean']:+.0f})")  # fmt: skip
    for name, mode, s in rows:
        if name.startswith("reactq"):
            continue
        role = (
            "AgentLoop"
            if any(k in name for k in ("AgentLoop", "Agent.run"))
            else "AgentRunner+Memory"
        )
        mine = ours.get((role, mode))
        if mine is None:
            continue
        if mode.startswith("http"):
            detail = f"overhead {mine['overhead']:+.0f} µs vs {s['overhead']:+.0f} µs"
            print(f"  {name:<28} {mode:<11} {detail}")
            continue
        if mode == "concurrent":
            ratio = mine["cpu_us"] / s["cpu_us"]
            detail = f"{mine['cpu_us']:.0f} µs vs {s['cpu_us']:.0f} µs CPU/turn"
        else:
            ratio = mine["p50"] / s["p50"]
            detail = f"{mine['p50']:.0f} µs vs {s['p50']:.0f} µs p50"
        print(f"  {name:<28} {mode:<11} {detail}  ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
