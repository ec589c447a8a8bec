"""RetryPolicy: which model-call failures to retry, and how long to wait.

429, 5xx and connection failures are retried with jittered exponential backoff,
honouring the endpoint's ``Retry-After`` / ``retry-after-ms``; the number of
retries and the total time spent (waits included) are both bounded. Any other
4xx fails at once: asking again would get the same answer.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

from reactq.shared.errors import LLMError

__all__ = ["RetryPolicy", "parse_retry_after"]


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the endpoint asks us to wait (``retry-after-ms``, ``Retry-After``), or None."""
    if not headers:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:  # an HTTP date
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(frozen=True)
class RetryPolicy:
    """How an ``OpenAICompatibleClient`` retries; every bound is checked at construction."""

    max_retries: int = 2
    """Retries after the first try (0 disables retrying)."""
    base_delay: float = 0.5
    """The first backoff, in seconds; it doubles with each retry."""
    max_delay: float = 8.0
    """No computed backoff is longer than this."""
    max_total: float = 60.0
    """Give up once the next wait would end more than this many seconds after the first try."""
    jitter: float = 0.5
    """Each computed backoff is scaled by a random factor in [1 - jitter, 1]."""

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries!r}")
        for name in ("base_delay", "max_delay", "max_total"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0 seconds, got {getattr(self, name)!r}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be in [0, 1], got {self.jitter!r}")

    def retryable(self, error: LLMError) -> bool:
        """True for the failures worth asking again (429, 5xx, connection): the error
        registry's word (``reactq.shared.error_codes``)."""
        return error.retryable

    def delay(self, retry: int, retry_after: float | None) -> float:
        """The wait before retry number ``retry`` (1-based)."""
        if retry_after is not None:
            return retry_after
        backoff = min(self.max_delay, self.base_delay * (2 ** (retry - 1)))
        return backoff * (1.0 - self.jitter * random.random())

    def next_wait(
        self, error: LLMError, retry: int, started: float, retry_after: float | None
    ) -> float | None:
        """Seconds to wait before retry number ``retry``, or None to give up now."""
        if retry > self.max_retries or not self.retryable(error):
            return None
        wait = self.delay(retry, retry_after)
        if time.monotonic() - started + wait > self.max_total:
            return None
        return wait
