"""LLMClientPool: spread a process's model calls over several HTTP connection pools.

A connection pool that looks at every connection and every waiting request each
time a request starts or ends (httpcore's, the openai SDK's default transport,
does) spends time quadratic in the calls in flight. A worker holding hundreds of
turns in flight therefore shares its calls out over several clients, each with a
small pool (measured with ``bench/pool.py --scenario cpu``: 32 calls a client
cost about 0.6 ms more CPU per turn than 4 with httpcore).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from reactq.worker.agent.llm.base import DeltaSink, LLMClient, LLMResponse, RequestOptions

CALLS_PER_CLIENT = 8
"""Concurrent calls one client is sized for."""


class LLMClientPool:
    """An LLMClient that hands each call to the next of ``clients`` in turn."""

    def __init__(self, clients: Sequence[LLMClient]) -> None:
        if not clients:
            raise ValueError("LLMClientPool needs at least one client")
        self.clients = list(clients)
        self._next = itertools.cycle(self.clients)

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        model: str,
        tools: list[dict[str, Any]] | None,
        stream: bool = False,
        options: RequestOptions | None = None,
        on_delta: DeltaSink | None = None,
        on_reasoning: DeltaSink | None = None,
    ) -> LLMResponse:
        """Ask the model, through the next client."""
        # Only when given: a custom client may predate the argument.
        reasoning = {"on_reasoning": on_reasoning} if on_reasoning is not None else {}
        return await next(self._next).complete(
            messages,
            model=model,
            tools=tools,
            stream=stream,
            options=options,
            on_delta=on_delta,
            **reasoning,
        )

    async def aclose(self) -> None:
        """Close every client."""
        for client in self.clients:
            close = getattr(client, "aclose", None)
            if close is not None:
                await close()


def clients_for(concurrency: int) -> int:
    """How many clients a process with ``concurrency`` turns in flight should use."""
    return max(1, -(-concurrency // CALLS_PER_CLIENT))
