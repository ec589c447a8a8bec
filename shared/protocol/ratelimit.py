"""A rate limit the whole pool shares: one token bucket per endpoint and model, in Redis.

Every worker draws from the same bucket (``Keys.rate_limit``), so a hundred workers
against one provider stay under its limits together. A bucket holds two budgets,
requests and tokens, each refilled continuously at its rate per minute up to
``burst_seconds`` worth of it; a call takes one request and its estimated tokens
(``take``) or learns how long to wait, and after the call ``settle`` corrects the
tokens by what the provider counted and tightens the bucket with what the provider
says is left of its own budget (``ProviderLimits``, from its ``x-ratelimit-*``
headers): nothing remaining holds the bucket until the provider's reset.

Each is one Lua call on one key (``ratelimit_*.lua``), timed by the Redis server's
clock, so workers whose clocks are skewed agree. The key's hash tag is its own: on a
Redis Cluster the bucket lives in one slot and its scripts touch nothing else.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

from redis.asyncio import Redis

from reactq.shared.keys import Keys
from reactq.shared.redis_client import lua_source, text

__all__ = ["Grant", "ProviderLimits", "RateBudget", "RateLimit", "bucket_name"]

_TAKE = lua_source(__name__, "now_ms", "ratelimit_bucket", "ratelimit_take")
_SETTLE = lua_source(__name__, "now_ms", "ratelimit_bucket", "ratelimit_settle")

# "6m0s", "1m30.5s", "20ms", "1h2m": the form OpenAI-compatible providers use for resets.
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_HOLD_WITHOUT_RESET = 1.0
"""Seconds a spent provider budget holds the bucket when the provider names no reset."""


@dataclass(frozen=True)
class RateLimit:
    """A provider's limits for one model: requests and tokens per minute (either or both).

    ``burst_seconds``: how many seconds of budget a quiet pool may spend at once (the
    bucket's size; at least one request). Small values spread calls evenly, as
    providers that enforce a minute's limit per second need.
    """

    requests_per_minute: float | None = None
    """Model calls per minute the whole pool may make; None: not limited."""
    tokens_per_minute: int | None = None
    """Tokens (prompt and completion) per minute; None: not limited."""
    burst_seconds: float = 1.0
    """Seconds of budget the bucket holds when full."""

    def __post_init__(self) -> None:
        if self.requests_per_minute is None and self.tokens_per_minute is None:
            raise ValueError(
                "RateLimit: give requests_per_minute, tokens_per_minute or both "
                "(use no rate_limit for none)"
            )
        for name in ("requests_per_minute", "tokens_per_minute", "burst_seconds"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
            ):
                raise ValueError(f"RateLimit: {name} must be > 0, got {value!r}")

    def script_args(self) -> list[float]:
        """The bucket's rates (per ms; 0: not limited) and capacities, as its scripts take them."""
        rpm, tpm = self.requests_per_minute or 0.0, self.tokens_per_minute or 0
        return [
            rpm / 60_000,
            max(1.0, rpm * self.burst_seconds / 60),
            tpm / 60_000,
            max(1.0, tpm * self.burst_seconds / 60),
        ]


@dataclass(frozen=True)
class ProviderLimits:
    """What a provider said is left of its budget (``x-ratelimit-*`` response headers)."""

    remaining_requests: int | None = None
    """Requests left before its reset; None: it did not say."""
    remaining_tokens: int | None = None
    """Tokens left before its reset; None: it did not say."""
    reset_requests: float | None = None
    """Seconds until its request budget is full again."""
    reset_tokens: float | None = None
    """Seconds until its token budget is full again."""

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> ProviderLimits | None:
        """The limits in a response's headers (names in lower case, or a case-insensitive
        mapping); None when it carries no usable remaining count."""
        requests = _count(headers.get("x-ratelimit-remaining-requests"))
        tokens = _count(headers.get("x-ratelimit-remaining-tokens"))
        if requests is None and tokens is None:
            return None
        return cls(
            requests,
            tokens,
            _duration(headers.get("x-ratelimit-reset-requests")),
            _duration(headers.get("x-ratelimit-reset-tokens")),
        )


_Short = Literal["", "requests", "tokens", "provider"]


@dataclass(frozen=True)
class Grant:
    """The answer of ``RateBudget.take``."""

    wait: float
    """0: taken, call now; else seconds to wait before asking again (nothing was taken)."""
    limit: _Short = ""
    """Which budget is short: ours of requests or tokens, or the provider's own."""

    @property
    def granted(self) -> bool:
        """True when the call may go now."""
        return self.wait <= 0


def bucket_name(base_url: str | None, model: str) -> str:
    """The bucket of a model on an endpoint: a digest, so any URL makes a valid key."""
    where = f"{base_url or ''}\n{model}".encode()
    return hashlib.sha256(where).hexdigest()[:24]


class RateBudget:
    """The pool's rate-limit buckets in one namespace (module doc)."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._take = redis.register_script(_TAKE)
        self._settle = redis.register_script(_SETTLE)

    async def take(self, bucket: str, limit: RateLimit, tokens: int = 0) -> Grant:
        """Take one request and ``tokens`` from the bucket, or say how long to wait."""
        wait_ms, why = await self._take(
            keys=[self.keys.rate_limit(bucket)], args=[*limit.script_args(), max(0, tokens)]
        )
        if not wait_ms:
            return Grant(0.0)
        return Grant(int(wait_ms) / 1000, cast(_Short, text(why)))

    async def settle(
        self,
        bucket: str,
        limit: RateLimit,
        *,
        tokens: int = 0,
        provider: ProviderLimits | None = None,
    ) -> None:
        """After a call: add ``tokens`` it used beyond its estimate (negative gives back),
        and tighten the bucket with the provider's ``provider`` limits."""
        p = provider or ProviderLimits()
        await self._settle(
            keys=[self.keys.rate_limit(bucket)],
            args=[
                *limit.script_args(),
                tokens,
                *_remaining(p.remaining_requests, p.reset_requests),
                *_remaining(p.remaining_tokens, p.reset_tokens),
            ],
        )


def _remaining(left: int | None, reset: float | None) -> tuple[str, int]:
    if left is None:
        return "", 0
    seconds = _HOLD_WITHOUT_RESET if reset is None else reset
    return str(left), math.ceil(seconds * 1000)


def _count(raw: str | None) -> int | None:
    try:
        return max(0, int(float(raw))) if raw is not None else None
    except (ValueError, OverflowError):
        return None


def _duration(raw: str | None) -> float | None:
    """Seconds in ``"6m0s"``, ``"20ms"``, ``"1.5"``; None when unreadable."""
    if raw is None:
        return None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    parts = _DURATION_PART.findall(raw)
    if not parts or "".join(n + u for n, u in parts) != raw:
        return None
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
