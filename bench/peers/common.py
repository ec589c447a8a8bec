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
    """Tool results in a Chat Completions request body."""
    return sum(1 for m in messages if m.get("role") == "tool")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--mode", choices=["sequential", "concurrent", "http"], required=True)
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--base-url", default="")
    parser.add_argument("--warmup", type=int, default=50)
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


async def raw_sdk_turn(client: Any, model: str) -> None:
    """The same turn with nothing but the openai SDK: the floor every framework pays."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather and time in Paris?"}]
    for _ in range(3):
        completion = await client.chat.completions.create(
            model=model, messages=messages, tools=TOOL_SCHEMAS, temperature=0.0
        )
        message = completion.choices[0].message
        if not message.tool_calls:
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
