"""Fallback models: which model a turn is on, and when it moves to the next.

A turn starts on the agent's model. A provider failure the client has already
retried as far as its policy allows (``FALLBACK_CODES``: 5xx, a connection
failure or timeout, a rate limit past its retries), or a context too long for
the window, moves it to the next of ``fallback_models``, where it stays for the
rest of the turn; the same request is asked again there. A failure of any other
kind (a refused key, a bad request, an answer that is not a completion) would
come back the same from the next model too, and ends the turn as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reactq.shared.errors import LLMError
from reactq.worker.agent.llm.base import LLMClient
from reactq.worker.agent.llm.ratelimit import RateLimiter

__all__ = ["FALLBACK_CODES", "ModelChain", "ModelSwitch"]

FALLBACK_CODES = frozenset(
    {"llm_server_error", "llm_connection", "llm_rate_limited", "context_length_exceeded"}
)
"""The error codes that move a turn to its next model. A stream cut mid-way
(``llm_stream_cut``) is not among them: its text was shown already."""


@dataclass(frozen=True)
class ModelSwitch:
    """A move from one model to the next."""

    from_model: str
    """The model that failed."""
    to_model: str
    """The model the turn goes on with."""
    error: LLMError
    """Why."""


class ModelChain:
    """The models of one turn, in order, and the one it is on."""

    __slots__ = ("_entries", "_limiters", "index")

    def __init__(
        self,
        entries: Sequence[tuple[str, LLMClient]],
        limiters: Sequence[RateLimiter | None] = (),
    ) -> None:
        if not entries:
            raise ValueError("a ModelChain needs at least one model")
        self._entries = list(entries)
        self._limiters = list(limiters)
        self.index = 0

    @property
    def model(self) -> str:
        """The model the turn is on."""
        return self._entries[self.index][0]

    @property
    def llm(self) -> LLMClient:
        """Its client."""
        return self._entries[self.index][1]

    @property
    def limiter(self) -> RateLimiter | None:
        """Its share of the pool's rate limit, if it has one."""
        return self._limiters[self.index] if self.index < len(self._limiters) else None

    def advance(self, error: LLMError) -> ModelSwitch | None:
        """Move to the next model when ``error`` calls for it and one is left; return the
        move, or None (the error then ends the call)."""
        if error.code not in FALLBACK_CODES or self.index + 1 >= len(self._entries):
            return None
        failed = self.model
        self.index += 1
        return ModelSwitch(failed, self.model, error)
