"""The pool's shared rate limit, as a turn meets it: wait for the budget before a model
call, settle it after.

``RateLimiters`` makes one ``RateLimiter`` per model of an agent that has a limit
(``LLMEndpoint.rate_limit``: the agent's ``rate_limit``, a fallback ``Model``'s, or
the pool's ``REACTQ_LLM_REQUESTS_PER_MINUTE`` / ``REACTQ_LLM_TOKENS_PER_MINUTE`` for
agents on the pool's endpoint). Each draws on its endpoint and model's bucket in
Redis (``reactq.shared.protocol.ratelimit``), which every worker of the pool shares.
A request's tokens are estimated before the call (characters / 4 of its body) and
corrected with the ``usage`` the provider returns.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from reactq.shared.protocol.ratelimit import Grant, RateBudget, RateLimit, bucket_name
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.base import LLMResponse

if TYPE_CHECKING:
    from reactq.worker.definitions import Agent

__all__ = ["CHARS_PER_TOKEN", "OnWait", "RateLimiter", "RateLimiters", "estimate_tokens"]

CHARS_PER_TOKEN = 4
"""The estimate's ratio: about four characters of English a token."""

OnWait = Callable[[Grant], Awaitable[None]]
"""Called once when a call has to wait, with the budget's first answer."""


def estimate_tokens(messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None) -> int:
    """Tokens a request will count, before it is sent: characters / 4 of its body."""
    size = len(json.dumps(messages, ensure_ascii=False))
    if tools:
        size += len(json.dumps(tools, ensure_ascii=False))
    return -(-size // CHARS_PER_TOKEN)


class RateLimiter:
    """One model's draw on the pool's budget (``bucket``: its endpoint and model)."""

    def __init__(self, budget: RateBudget, bucket: str, limit: RateLimit) -> None:
        self.budget = budget
        self.bucket = bucket
        self.limit = limit

    @property
    def counts_tokens(self) -> bool:
        """True when the limit has a token budget (a request's tokens are estimated)."""
        return self.limit.tokens_per_minute is not None

    async def acquire(self, tokens: int, on_wait: OnWait) -> None:
        """Return once the budget grants one request and ``tokens``; ``on_wait`` is
        awaited once if it has to wait first."""
        announced = False
        while True:
            grant = await self.budget.take(self.bucket, self.limit, tokens)
            if grant.granted:
                return
            if not announced:
                announced = True
                await on_wait(grant)
            # Waiters that all wake at once would all ask at once; spread them a little.
            await asyncio.sleep(grant.wait * (1 + random.random() / 10))

    async def settle(self, estimate: int, response: LLMResponse) -> None:
        """Correct the tokens taken by the call's ``usage``; pass on the provider's limits."""
        used = response.usage.get("total_tokens", 0) if self.counts_tokens else 0
        extra = used - estimate if used else 0
        if extra or response.limits is not None:
            await self.budget.settle(
                self.bucket, self.limit, tokens=extra, provider=response.limits
            )


class RateLimiters:
    """Makes the ``RateLimiter``s of a process's agents, on one ``RateBudget``."""

    def __init__(self, budget: RateBudget) -> None:
        self.budget = budget

    def for_agent(self, agent: Agent, settings: Settings) -> list[RateLimiter | None]:
        """One per model of the agent, its own first then each fallback's, in order
        (None for a model without a limit): ``Agent.build_loop(limiters=...)``."""
        models = [agent.resolved_model(settings), *(m.name for m in agent.loop.fallbacks)]
        out: list[RateLimiter | None] = []
        for model, endpoint in zip(models, agent.endpoints(settings), strict=True):
            limit = endpoint.rate_limit
            bucket = bucket_name(endpoint.base_url, model)
            out.append(None if limit is None else RateLimiter(self.budget, bucket, limit))
        return out
