"""Request size and time per turn of one long session, with and without the context
policy: ``python bench/context.py [--turns 1000] [--window 8000]``.

In-process: an AgentRunner on the memory store against a scripted model that
counts a request as the scripted server does (four characters of JSON a token) and
answers briefly; each turn sends about 110 tokens. Prints the size of the turn's
last request and the turn's wall time at turns 10, 100 and 1,000 (those within
``--turns``), for both runs, and their ratio (without / with).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reactq.shared.bus import TurnEmitter
from reactq.shared.state.memory import MemoryStateStore
from reactq.worker.agent import AgentLoop, AgentRunner, LLMResponse, LoopConfig
from reactq.worker.agent.context_policy import DEFAULT_SUMMARY_PROMPT
from reactq.worker.agent.llm.base import RequestOptions

CHECKPOINTS = (10, 100, 1000)


class NullBus:
    """Takes events and drops them."""

    async def publish(self, event: Any) -> Any:
        return event


class SizedModel:
    """Answers "ok" (a summary for a summary request), reporting usage by size."""

    def __init__(self) -> None:
        self.last_size = 0

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        model: str,
        tools: list[dict[str, Any]] | None,
        stream: bool = False,
        options: RequestOptions | None = None,
        **_: Any,
    ) -> LLMResponse:
        size = len(json.dumps(messages, ensure_ascii=False))
        summary = messages[0]["content"] == DEFAULT_SUMMARY_PROMPT
        if not summary:
            self.last_size = size
        text = "The user wrote at length about lorem ipsum." if summary else "ok"
        prompt = size // 4
        usage = {"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2}
        return LLMResponse(content=text, finish_reason="stop", usage=usage)


async def session(turns: int, window: int, policy: bool) -> dict[int, tuple[int, float]]:
    """``{turn: (request characters, seconds)}`` at the checkpoints."""
    llm = SizedModel()
    config = LoopConfig(model="bench-model", context_window=window)
    if not policy:
        config = LoopConfig(model="bench-model", context_window=window, context_policy=None)
    runner = AgentRunner(AgentLoop(llm, None, config), MemoryStateStore(), "bench")
    bus = NullBus()
    out: dict[int, tuple[int, float]] = {}
    for turn in range(1, turns + 1):
        emitter = TurnEmitter(bus, "s", f"t{turn}")  # type: ignore[arg-type]
        started = time.perf_counter()
        await runner.run_turn(
            session_id="s",
            message=f"turn {turn}: " + "lorem ipsum " * 35,
            turn_id=f"t{turn}",
            emitter=emitter,
        )
        if turn in CHECKPOINTS:
            out[turn] = (llm.last_size, time.perf_counter() - started)
    return out


def main() -> None:
    """Run both sessions and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--window", type=int, default=8000, help="the model's window (tokens)")
    args = parser.parse_args()
    without = asyncio.run(session(args.turns, args.window, policy=False))
    with_policy = asyncio.run(session(args.turns, args.window, policy=True))
    print(f"one session, {args.turns} turns, window {args.window} tokens")
    print(f"{'turn':>6} {'request chars':>28} {'ms per turn':>26}")
    print(
        f"{'':>6} {'without':>9} {'with':>8} {'ratio':>9} {'without':>9} {'with':>7} {'ratio':>8}"
    )
    for turn in sorted(without):
        size_a, time_a = without[turn]
        size_b, time_b = with_policy[turn]
        print(
            f"{turn:>6} {size_a:>9} {size_b:>8} {size_a / size_b:>8.1f}x "
            f"{time_a * 1000:>9.2f} {time_b * 1000:>7.2f} {time_a / time_b:>7.1f}x"
        )


if __name__ == "__main__":
    main()
