"""The LLM seam: one Protocol with one method, the options it takes and the response."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from reactq.shared.messages import ToolCall
from reactq.shared.protocol.ratelimit import ProviderLimits

__all__ = ["DeltaSink", "LLMClient", "LLMResponse", "RequestOptions", "uses_max_completion_tokens"]

DeltaSink = Callable[[str], Awaitable[None]]
"""Called with each piece of streamed text as it arrives."""

# OpenAI's reasoning families (o1/o3/o4, gpt-5.x) refuse ``max_tokens``; also behind a
# routing or fine-tune prefix ("openai/gpt-5.1", "ft:o4-mini:...").
_COMPLETION_TOKENS_RE = re.compile(r"^(?:.*[/:])?(?:gpt-5|o[134])(?![0-9a-z])")
_REASONING_EFFORT_RE = re.compile(r"^[a-z][a-z0-9_-]*$")


def uses_max_completion_tokens(model: str) -> bool:
    """True for the models that take ``max_completion_tokens`` instead of ``max_tokens``."""
    return bool(_COMPLETION_TOKENS_RE.match(model.lower()))


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """Request parameters beyond messages and tools, validated at construction."""

    temperature: float | None = 0.0
    """Sampling temperature in [0, 2]; None leaves it out of the request."""
    max_tokens: int | None = None
    """Cap on generated tokens (sent as max_completion_tokens where the model needs it)."""
    reasoning_effort: str | None = None
    """A provider reasoning level ("low", "medium", ...); None leaves it out."""
    response_format: Mapping[str, Any] | None = None
    """The ``response_format`` to send as is (a json_schema for structured output)."""
    stop: tuple[str, ...] = ()
    """Text that ends the generation where the model writes it (at most 4; the text
    modes stop it before it writes a tool's result itself). Not sent to the models
    that refuse it (o-series, gpt-5.x)."""
    seed: int | None = None
    """A sampling seed, for providers that honour it (repeatable runs); None leaves it out."""

    def __post_init__(self) -> None:
        t = self.temperature
        if t is not None and (isinstance(t, bool) or not isinstance(t, int | float)):
            raise ValueError(f"temperature must be a number in [0, 2] or None, got {t!r}")
        if t is not None and not 0.0 <= t <= 2.0:
            raise ValueError(f"temperature must be in [0, 2] or None, got {t!r}")
        m = self.max_tokens
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ValueError(f"max_tokens must be an int >= 1 or None, got {m!r}")
        r = self.reasoning_effort
        if r is not None and (not isinstance(r, str) or not _REASONING_EFFORT_RE.fullmatch(r)):
            raise ValueError(
                f"reasoning_effort must be a lowercase level such as 'low' or 'high', "
                f"or None to leave it out; got {r!r}"
            )
        f = self.response_format
        if f is not None and not (isinstance(f, Mapping) and isinstance(f.get("type"), str)):
            raise ValueError(f"response_format must be a dict with a 'type', or None; got {f!r}")
        stop = self.stop
        if (
            not isinstance(stop, tuple)
            or len(stop) > 4
            or not all(isinstance(x, str) and x for x in stop)
        ):
            raise ValueError(f"stop_sequences must be at most 4 non-empty strings, got {stop!r}")
        seed = self.seed
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be an int or None, got {seed!r}")

    def to_request(self, model: str) -> dict[str, Any]:
        """These options as Chat Completions request keys for ``model``."""
        out: dict[str, Any] = {}
        if self.temperature is not None:
            out["temperature"] = self.temperature
        if self.max_tokens is not None:
            key = "max_completion_tokens" if uses_max_completion_tokens(model) else "max_tokens"
            out[key] = self.max_tokens
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        if self.response_format is not None:
            out["response_format"] = dict(self.response_format)
        # The reasoning families answer 400 to ``stop``; their text modes rely on the
        # parsers alone cutting off what the model wrote after its call.
        if self.stop and not uses_max_completion_tokens(model):
            out["stop"] = list(self.stop)
        if self.seed is not None:
            out["seed"] = self.seed
        return out


DEFAULT_OPTIONS = RequestOptions()


@dataclass(slots=True)
class LLMResponse:
    """One model answer: text, tool calls, or both."""

    content: str | None = None
    """The text the model wrote (None when it only called tools)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """The tool calls it made, in order."""
    finish_reason: str | None = None
    """Why it stopped (stop, tool_calls, length, ...), as the endpoint said."""
    usage: dict[str, int] = field(default_factory=dict)
    """Token counts: prompt_tokens, completion_tokens, total_tokens."""
    reasoning: str | None = None
    """Reasoning text the provider sent beside the answer (``reasoning_content`` or
    ``reasoning``: DeepSeek, vLLM, llama.cpp); None when it sent none."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields of the provider's message reactq does not know, as sent (kept, not replayed)."""
    limits: ProviderLimits | None = None
    """What the provider said is left of its rate limits (``x-ratelimit-*`` headers)."""
    model: str | None = None
    """The model that answered, as the endpoint named it (None: it did not say)."""
    response_id: str | None = None
    """The endpoint's id of the completion (None: it gave none)."""

    @property
    def truncated(self) -> bool:
        """True when the generation hit the token cap."""
        return self.finish_reason == "length"


@runtime_checkable
class LLMClient(Protocol):
    """Anything that turns a Chat Completions request into an LLMResponse.

    Implementations raise ``shared.errors.LLMError`` subclasses for failures.
    With ``stream=True`` they call ``on_delta`` with each piece of text as it
    arrives, and ``on_reasoning`` (when given) with each piece of reasoning text;
    cancelling the call must close the stream.
    """

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
        """Ask the model for its next message."""
        ...
