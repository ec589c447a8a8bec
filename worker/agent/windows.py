"""How much a model can read: a context window per model, and a token count of a
request before it is sent.

The count is an estimate (characters divided by a ratio) that calibrates itself:
after every call the provider's ``prompt_tokens`` for the request just counted
corrects the ratio for that model, so a model whose tokenizer packs more or less
text a token is counted right from the second call on. No tokenizer library is
needed; an exact count is not either, since the policy keeps a margin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CONTEXT_WINDOWS",
    "DEFAULT_CONTEXT_WINDOW",
    "TokenCounter",
    "context_window_for",
    "message_chars",
]

DEFAULT_CONTEXT_WINDOW = 128_000
"""The window assumed for a model the table does not know and no agent sized."""

CONTEXT_WINDOWS: Mapping[str, int] = {
    # Longest matching prefix wins: "gpt-4o-mini-2024-07-18" is a "gpt-4o-mini".
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude": 200_000,
    "gemini-1.5": 1_000_000,
    "gemini-2": 1_000_000,
    "llama-3.1": 128_000,
    "llama-3.3": 128_000,
    "mistral-large": 128_000,
    "deepseek": 64_000,
    "qwen2.5": 32_768,
}
"""Context windows (tokens) of common models, by name prefix."""

_MESSAGE_OVERHEAD = 16  # characters of role and framing each message costs, roughly
_DEFAULT_RATIO = 4.0  # characters a token, for English text and JSON
_RATIO_BOUNDS = (1.0, 12.0)


def context_window_for(model: str, configured: int | None = None) -> int:
    """The window of ``model``: ``configured`` when given, else the table's (by the
    longest prefix of the name after any ``provider/``), else ``DEFAULT_CONTEXT_WINDOW``."""
    if configured is not None:
        return configured
    name = model.rpartition("/")[2].lower()
    best = ""
    for prefix in CONTEXT_WINDOWS:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return CONTEXT_WINDOWS[best] if best else DEFAULT_CONTEXT_WINDOW


def message_chars(message: Mapping[str, Any]) -> int:
    """The characters a wire message costs: its text, its calls and the framing."""
    size = _MESSAGE_OVERHEAD + len(message.get("content") or "")
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        size += len(function.get("name") or "") + len(function.get("arguments") or "") + 24
    return size + len(message.get("reasoning_content") or "")


def _tools_chars(tools: Sequence[Mapping[str, Any]] | None) -> int:
    return sum(len(repr(t)) for t in tools or ())


class TokenCounter:
    """Counts a request's tokens before it is sent, per model, and learns from what the
    provider reports (``calibrate``). Shared by the runs of one loop; the ratios it
    keeps are plain floats, so concurrent runs at worst calibrate twice."""

    def __init__(self) -> None:
        self.ratios: dict[str, float] = {}
        """Characters a token, per model, as last calibrated."""

    def ratio(self, model: str) -> float:
        """Characters a token for ``model``."""
        return self.ratios.get(model, _DEFAULT_RATIO)

    def chars(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        """The characters ``count`` divides (to pass to ``calibrate`` after the call)."""
        return sum(message_chars(m) for m in messages) + _tools_chars(tools)

    def count(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        """The estimated prompt tokens of a request to ``model``."""
        return self.tokens(model, self.chars(messages, tools))

    def tokens(self, model: str, chars: int) -> int:
        """``chars`` characters as tokens of ``model``."""
        return int(chars / self.ratio(model)) + 1

    def calibrate(self, model: str, chars: int, prompt_tokens: int) -> None:
        """Correct ``model``'s ratio from a request of ``chars`` that the provider
        counted as ``prompt_tokens`` (a moving average: one odd call moves it half)."""
        if chars <= 0 or prompt_tokens <= 0:
            return
        low, high = _RATIO_BOUNDS
        seen = min(max(chars / prompt_tokens, low), high)
        self.ratios[model] = (self.ratio(model) + seen) / 2 if model in self.ratios else seen
