"""The kernel against the SDKs it replaces, side by side: ``python -m bench.kernel``.

The same scripted turn (get_weather, then get_time, then a final answer; the
step decided from the number of tool messages) runs through reactq's AgentLoop
and AgentRunner (+MemoryStateStore), fifty-agent-sdk 1.12.0's AgentLoop and
AgentRunner (+its MemoryStateStore), and neosian 1.12.2's Agent.run and
Conversation (over a dict store). Each peer runs in a virtualenv this script
makes under ``.reactq/bench-venvs/`` (fifty with ``mcp<2``; neosian on Python
>= 3.12), every measurement in a fresh subprocess so peak RSS is its own.

Modes: ``sequential`` (fresh session each turn), ``concurrent`` (all turns at
once, each model call sleeping ``--latency``), and ``http`` (the real openai SDK
to a local ScriptedServer; the overhead is over the same calls made with the
bare SDK in the same virtualenv).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers.common import FINAL_TEXT, count_tool_messages, step_for  # noqa: E402
from worker.agent.llm.replies import Reply  # noqa: E402
from worker.agent.llm.scripted_server import ScriptedServer  # noqa: E402

VENVS = ROOT / ".reactq" / "bench-venvs"
PY312 = "/root/.pyenv/versions/3.12.1/bin/python"
PEERS: dict[str, dict[str, Any]] = {
    "fifty": {
        "python": sys.executable,
        "requirements": ["fifty-agent-sdk==1.12.0", "mcp<2"],
        "runner": "fifty_runner.py",
    },
    "neosian": {
        "python": PY312 if Path(PY312).exists() else "python3.12",
        "requirements": ["neosian==1.12.2"],
        "runner": "neosian_runner.py",
    },
}


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
    subprocess.run([spec["python"], "-m", "venv", str(venv)], check=True)
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


def main(argv: list[str] | None = None) -> None:
    """Run every framework and print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.kernel", description=__doc__)
    parser.add_argument("--sequential", type=int, default=2000, help="sequential turns")
    parser.add_argument("--concurrent", type=int, default=200, help="concurrent turns")
    parser.add_argument("--latency", type=float, default=0.05, help="model sleep (concurrent)")
    parser.add_argument("--http", type=int, default=300, help="sequential turns over HTTP")
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
                raw = run_one(
                    python,
                    runner,
                    scenario="raw",
                    mode="http",
                    turns=args.http,
                    base_url=server.base_url,
                )
                rows.append((f"openai SDK ({name} venv)", "http", summary(raw)))
                for scenario in ("loop", "runner"):
                    result = run_one(
                        python,
                        runner,
                        scenario=scenario,
                        mode="http",
                        turns=args.http,
                        base_url=server.base_url,
                    )
                    stats = summary(result)
                    stats["overhead"] = stats["p50"] - summary(raw)["p50"]
                    rows.append((result["framework"], "http", stats))
    finally:
        server.stop()
    print_table(rows)


def print_table(rows: list[tuple[str, str, dict[str, float]]]) -> None:
    """Print every row, then our ratio to each peer for the same mode and role."""
    print(f"\n{'framework':<30}{'mode':<12}{'mean µs':>10}{'p50 µs':>10}{'p99 µs':>10}"
          f"{'RSS MB':>8}{'wall s':>8}{'drift':>7}{'+µs/SDK':>9}")  # fmt: skip
    for name, mode, s in rows:
        drift = f"{s['drift']:.2f}" if "drift" in s else ""
        over = f"{s['overhead']:+.0f}" if "overhead" in s else ""
        print(f"{name:<30}{mode:<12}{s['mean']:>10.0f}{s['p50']:>10.0f}{s['p99']:>10.0f}"
              f"{s['rss_mb']:>8.1f}{s['wall_s']:>8.2f}{drift:>7}{over:>9}")  # fmt: skip
    print(
        "\nratio = reactq / peer: p50 per turn (sequential); CPU per turn, i.e. (wall - 3 x "
        "latency) / turns (concurrent); overhead over the bare SDK (http)"
    )
    ours = {(n.split()[1], m): s for n, m, s in rows if n.startswith("reactq")}
    for name, mode, s in rows:
        if name.startswith(("reactq", "openai")):
            continue
        role = (
            "AgentLoop"
            if any(k in name for k in ("AgentLoop", "Agent.run"))
            else "AgentRunner+Memory"
        )
        mine = ours.get((role, mode))
        if mine is None:
            continue
        if mode == "http":
            ours_s, theirs = mine["overhead"], s["overhead"]
            ratio = ours_s / theirs if theirs else float("nan")
            detail = f"overhead {ours_s:+.0f} µs vs {theirs:+.0f} µs"
        elif mode == "concurrent":
            ratio = mine["cpu_us"] / s["cpu_us"]
            detail = f"{mine['cpu_us']:.0f} µs vs {s['cpu_us']:.0f} µs CPU/turn"
        else:
            ratio = mine["p50"] / s["p50"]
            detail = f"{mine['p50']:.0f} µs vs {s['p50']:.0f} µs p50"
        print(f"  {name:<28} {mode:<11} {detail}  ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
