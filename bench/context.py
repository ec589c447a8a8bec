"""Request size and time per turn of one long session, with and without the context
policy: ``python bench/context.py [--turns 1000] [--window 8000] [--store URL]``.

In-process: an AgentRunner on a state store (``--store``: ``memory://`` by default,
or any ``open_store`` URL, e.g. ``sqlite+aiosqlite:///tmp/bench.db``) against a
scripted model that counts a request as the scripted server does (four characters
of JSON a token) and answers briefly; each turn sends about 110 tokens. Prints, at
turns 10, 100 and 1,000 (those within ``--turns``) and for both runs: the size of
the turn's last request, the messages the store read for the turn
(``begin_turn``), and the turn's wall time (the median of the five turns up to
it), with the ratios (without / with).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reactq.shared.bus import TurnEmitter
from reactq.shared.state import StateStore, TurnStart, open_store
from reactq.worker.agent import AgentLoop, AgentRunner, LLMResponse, LoopConfig
from reactq.worker.agent.context_policy import DEFAULT_SUMMARY_PROMPT
from reactq.worker.agent.llm.base import RequestOptions

CHECKPOINTS = (10, 100, 1000)
SAMPLES = 5
"""Turns timed up to each checkpoint (their median is reported)."""


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


class ReadCounter:
    """Wraps a store: remembers how many messages its last ``begin_turn`` read."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.last_read = 0

    async def begin_turn(self, *args: Any, **kwargs: Any) -> TurnStart:
        start = await self.store.begin_turn(*args, **kwargs)
        self.last_read = len(start.messages)
        return start

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def session(
    turns: int, window: int, policy: bool, store_url: str
) -> dict[int, tuple[int, int, float]]:
    """``{turn: (request characters, messages read, seconds)}`` at the checkpoints."""
    llm = SizedModel()
    config = LoopConfig(model="bench-model", context_window=window)
    if not policy:
        config = LoopConfig(model="bench-model", context_window=window, context_policy=None)
    store = ReadCounter(await open_store(store_url))
    runner = AgentRunner(AgentLoop(llm, None, config), store, "bench")
    bus = NullBus()
    session_id = f"bench-{uuid.uuid4().hex[:12]}"
    out: dict[int, tuple[int, int, float]] = {}
    times: list[float] = []
    try:
        for turn in range(1, turns + 1):
            turn_id = f"{session_id}-t{turn}"  # turn ids are global in a store
            emitter = TurnEmitter(bus, session_id, turn_id)  # type: ignore[arg-type]
            started = time.perf_counter()
            await runner.run_turn(
                session_id=session_id,
                message=f"turn {turn}: " + "lorem ipsum " * 35,
                turn_id=turn_id,
                emitter=emitter,
            )
            times = [*times[-(SAMPLES - 1) :], time.perf_counter() - started]
            if turn in CHECKPOINTS:
                out[turn] = (llm.last_size, store.last_read, statistics.median(times))
        await store.delete_session(session_id)
    finally:
        await store.close()
    return out


def main() -> None:
    """Run both sessions and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--window", type=int, default=8000, help="the model's window (tokens)")
    parser.add_argument("--store", default="memory://", help="a state store URL (open_store)")
    args = parser.parse_args()
    without = asyncio.run(session(args.turns, args.window, False, args.store))
    with_policy = asyncio.run(session(args.turns, args.window, True, args.store))
    print(f"one session, {args.turns} turns, window {args.window} tokens, store {args.store}")
    print(f"{'turn':>6} {'request chars':>28} {'messages read':>20} {'ms per turn':>26}")
    print(
        f"{'':>6} {'without':>9} {'with':>8} {'ratio':>9} {'without':>9} {'with':>10}"
        f" {'without':>9} {'with':>7} {'ratio':>8}"
    )
    for turn in sorted(without):
        size_a, read_a, time_a = without[turn]
        size_b, read_b, time_b = with_policy[turn]
        print(
            f"{turn:>6} {size_a:>9} {size_b:>8} {size_a / size_b:>8.1f}x {read_a:>9} {read_b:>10}"
            f" {time_a * 1000:>9.2f} {time_b * 1000:>7.2f} {time_a / time_b:>7.1f}x"
        )


if __name__ == "__main__":
    main()
