"""What every benchmark runner shares (stdlib only: it runs in each peer's virtualenv).

The scripted turn: step 1 calls ``get_weather(city="Paris")``, step 2
``get_time(tz="UTC")``, step 3 answers. The step is decided from the number of
tool results in the request, so one stateless scripted model serves every turn.
A runner prints one JSON object: per-turn microseconds, wall time and peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

FINAL_TEXT = "It is sunny and 18 C in Paris; it is 12:00 in UTC."
STEPS: list[tuple[str, dict[str, str]] | None] = [
    ("get_weather", {"city": "Paris"}),
    ("get_time", {"tz": "UTC"}),
    None,
]


def step_for(tool_messages: int) -> tuple[str, dict[str, str]] | None:
    """The tool call to make after ``tool_messages`` tool results (None: the final answer)."""
    return STEPS[min(tool_messages, len(STEPS) - 1)]


def count_tool_messages(messages: list[dict[str, Any]]) -> int:
    """Tool results since the last user message of a Chat Completions request body."""
    count = 0
    for message in reversed(messages):
        role = message.get("role")
        if role == "user":
            break
        count += role == "tool"
    return count


def session_key(i: int, session_turns: int) -> str:
    """The session turn ``i`` belongs to: ``session_turns`` consecutive turns share one
    (a warm-up turn, ``i < 0``, always has its own)."""
    return f"s{i // session_turns}" if i >= 0 else f"w{-i}"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--mode", choices=["sequential", "concurrent", "http"], required=True)
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--base-url", default="")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument(
        "--session-turns", type=int, default=1, help="turns per session (the history grows)"
    )
    return parser.parse_args()


def peak_rss_kb() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


async def measure(
    turn: Callable[[int], Awaitable[None]], args: argparse.Namespace
) -> dict[str, Any]:
    """Run ``turn(i)`` ``args.turns`` times (sequential or all at once); return timings."""
    for i in range(min(args.warmup, args.turns)):
        await turn(-1 - i)
    samples: list[float] = []

    async def timed(i: int) -> None:
        start = time.perf_counter_ns()
        await turn(i)
        samples.append((time.perf_counter_ns() - start) / 1000.0)

    wall_start = time.perf_counter()
    if args.mode == "concurrent":
        await asyncio.gather(*(timed(i) for i in range(args.turns)))
    else:
        for i in range(args.turns):
            await timed(i)
    wall = time.perf_counter() - wall_start
    return {"samples_us": samples, "wall_s": wall}


def emit(result: dict[str, Any]) -> None:
    """Print the result line the orchestrator reads (last line of stdout)."""
    result["peak_rss_kb"] = peak_rss_kb()
    result["python"] = sys.version.split()[0]
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    sys.stdout.flush()


TOOL_SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} (benchmark tool)",
            "parameters": {
                "type": "object",
                "properties": {param: {"type": "string"}},
                "required": [param],
            },
        },
    }
    for name, param in (("get_weather", "city"), ("get_time", "tz"))
]


async def raw_sdk_turn(
    client: Any,
    model: str,
    history: list[dict[str, Any]] | None = None,
    *,
    lean: bool = False,
) -> None:
    """The same turn with nothing but the openai SDK: the floor every framework pays.

    ``history`` (a session's messages so far) grows by the turn's messages. ``lean``
    sends messages and tools through ``extra_body``, past the SDK's request transform.
    """
    messages = history if history is not None else []
    messages.append({"role": "user", "content": "Weather and time in Paris?"})
    for _ in range(3):
        if lean:
            completion = await client.chat.completions.create(
                model=model,
                messages=[],
                temperature=0.0,
                extra_body={"messages": messages, "tools": TOOL_SCHEMAS},
            )
        else:
            completion = await client.chat.completions.create(
                model=model, messages=messages, tools=TOOL_SCHEMAS, temperature=0.0
            )
        message = completion.choices[0].message
        if not message.tool_calls:
            messages.append({"role": "assistant", "content": message.content})
            return
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in message.tool_calls
                ],
            }
        )
        for c in message.tool_calls:
            json.loads(c.function.arguments)
            messages.append({"role": "tool", "tool_call_id": c.id, "content": '"ok"'})


async def measure_http(
    turn: Callable[[int], Awaitable[None]], args: argparse.Namespace
) -> dict[str, Any]:
    """``turn(i)`` interleaved with the bare SDK's turn, in this process, over HTTP.

    Each index runs three turns back to back, in an order that rotates: the
    framework's, the bare SDK's (``create``), and the lean SDK's (``extra_body``,
    no request transform). Each keeps its own sessions of ``args.session_turns``
    turns, so the three see the same history length at the same index, and the
    same machine load: the paired differences cancel most of the noise.
    """
    import openai

    clients = [
        openai.AsyncOpenAI(base_url=args.base_url, api_key="sk-bench", max_retries=0)
        for _ in range(2)
    ]
    histories: list[dict[str, list[dict[str, Any]]]] = [{}, {}]
    n = args.session_turns

    def raw_variant(k: int) -> Callable[[int], Awaitable[None]]:
        async def run(i: int) -> None:
            history = histories[k].setdefault(session_key(i, n), [])
            await raw_sdk_turn(clients[k], "bench-model", history, lean=k == 1)

        return run

    variants = [turn, raw_variant(0), raw_variant(1)]
    samples: list[list[float]] = [[], [], []]
    for i in range(min(args.warmup, args.turns)):
        for variant in variants:
            await variant(-1 - i)
    wall_start = time.perf_counter()
    for i in range(args.turns):
        for k in range(3):
            which = (i + k) % 3
            start = time.perf_counter_ns()
            await variants[which](i)
            samples[which].append((time.perf_counter_ns() - start) / 1000.0)
    wall = time.perf_counter() - wall_start
    for client in clients:
        await client.close()
    return {
        "samples_us": samples[0],
        "raw_samples_us": samples[1],
        "lean_samples_us": samples[2],
        "wall_s": wall,
    }
