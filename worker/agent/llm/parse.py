"""Turning a completion (a whole body's JSON, or the SDK's streamed chunks) into an
``LLMResponse``.

Every malformed answer gets its own classified error: an error envelope in a
200, a completion without choices, a stream without events. Text a store cannot keep
(a lone surrogate, which JSON may spell, or a NUL) is repaired to U+FFFD here, where
the model's answer enters (``reactq.shared.text_checks``): its content, reasoning,
tool calls and other fields, and each streamed delta.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from reactq.shared.errors import (
    ContextLengthExceededError,
    LLMErrorEnvelopeError,
    LLMNoChoicesError,
    LLMResponseError,
)
from reactq.shared.messages import ToolCall
from reactq.shared.text_checks import repair_json, repair_text
from reactq.worker.agent.llm.base import DeltaSink, LLMResponse

__all__ = [
    "StreamAssembler",
    "from_completion_json",
    "mentions_context_length",
    "synthetic_call_id",
]

_CONTEXT_MARKERS = ("context_length_exceeded", "maximum context length", "context window")
# How providers say a text-only model got image parts: OpenAI ("Invalid content type.
# image_url is only supported by certain models"), vLLM ("not a multimodal model"),
# Ollama and others ("does not support images" / "vision").
_IMAGE_MARKERS = ("content type", "not support", "unsupported", "multimodal", "vision")
_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
# Where providers put reasoning text: DeepSeek, llama.cpp and older vLLM the first,
# newer vLLM and OpenRouter the second.
REASONING_FIELDS = ("reasoning_content", "reasoning")
# Message fields reactq reads itself; any other non-empty one is kept in ``extra``.
_KNOWN_FIELDS = frozenset({"role", "content", "tool_calls", *REASONING_FIELDS})


def split_fields(fields: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """A message's (or a delta's) reasoning text, and its other fields reactq does not
    know (empty ones dropped: ``refusal: null``, ``annotations: []``)."""
    reasoning = None
    for name in REASONING_FIELDS:
        value = fields.get(name)
        if isinstance(value, str) and value and reasoning is None:
            reasoning = value
    extra = {
        k: v
        for k, v in fields.items()
        if v not in (None, "", [], {})
        and (k not in _KNOWN_FIELDS or (k in REASONING_FIELDS and v != reasoning))
    }
    return reasoning, repair_json(extra) if extra else extra


def merge_extra(into: dict[str, Any], piece: dict[str, Any]) -> None:
    """Add a streamed delta's unknown fields: text is concatenated, lists extended, any
    other value replaced."""
    for key, value in piece.items():
        old = into.get(key)
        if isinstance(old, str) and isinstance(value, str):
            into[key] = old + value
        elif isinstance(old, list) and isinstance(value, list):
            into[key] = old + value
        else:
            into[key] = value


def mentions_context_length(code: str | None, message: str) -> bool:
    """True when a provider's error code or text says the context window overflowed."""
    text = f"{code or ''} {message}".lower()
    return any(marker in text for marker in _CONTEXT_MARKERS)


def mentions_image_refusal(code: str | None, message: str) -> bool:
    """True when a provider's error code or text says the model cannot take images."""
    text = f"{code or ''} {message}".lower()
    return "image" in text and any(marker in text for marker in _IMAGE_MARKERS)


def synthetic_call_id() -> str:
    """A call id for an endpoint that sent none: random, so that ids never collide
    across the steps of a turn (a tool result answers its call by id)."""
    return f"call_{secrets.token_hex(12)}"


def _usage(raw: Any) -> dict[str, int]:
    if raw is None:
        return {}
    out: dict[str, int] = {}
    for key in _USAGE_KEYS:
        value = getattr(raw, key, None)
        if isinstance(value, int):
            out[key] = value
    return out


def _error_envelope(obj: Any) -> str | None:
    extra = getattr(obj, "model_extra", None)
    error = extra.get("error") if extra else None
    return None if error is None else _envelope_text(error)


def _envelope_text(error: Any) -> str:
    """What an ``error`` field says: its message, or the field itself."""
    if isinstance(error, dict):
        return str(error.get("message") or json.dumps(error, default=str))
    return str(error)


def _raise_envelope(envelope: str, where: str = "") -> None:
    if mentions_context_length(None, envelope):
        raise ContextLengthExceededError(envelope)
    raise LLMErrorEnvelopeError(f"the endpoint sent an error{where}: {envelope}")


def from_completion_json(data: Any) -> LLMResponse:
    """The response in a non-streamed completion's decoded JSON body; raises a
    classified LLMError (an error envelope in a 200, no choices, a non-completion)."""
    error = data.get("error") if isinstance(data, dict) else None
    if error is not None:
        _raise_envelope(_envelope_text(error))
    if not isinstance(data, dict) or "choices" not in data:
        raise LLMResponseError(f"the endpoint answered a non-completion: {str(data)[:200]!r}")
    choices = data["choices"]
    if not choices:
        raise LLMNoChoicesError("the endpoint answered a completion with no choices")
    choice = choices[0]
    message = choice["message"]
    calls: list[ToolCall] = []
    for raw in message.get("tool_calls") or ():
        function = raw.get("function")
        if function is not None:
            name, arguments = function.get("name"), function.get("arguments")
        else:  # a "custom" tool call: free-form input
            custom = raw.get("custom") or {}
            name, arguments = custom.get("name", ""), custom.get("input", "")
        calls.append(
            ToolCall(
                id=_repaired(raw.get("id")) or synthetic_call_id(),
                name=_repaired(name) or "",
                arguments=_repaired(arguments) or "",
            )
        )
    usage = data.get("usage") or {}
    reasoning, extra = split_fields(message)
    return LLMResponse(
        content=_repaired(message.get("content")),
        tool_calls=calls,
        finish_reason=choice.get("finish_reason"),
        usage={k: v for k in _USAGE_KEYS if isinstance(v := usage.get(k), int)},
        reasoning=_repaired(reasoning),
        extra=extra,
        model=_text_or_none(data.get("model")),
        response_id=_text_or_none(data.get("id")),
    )


def _text_or_none(value: Any) -> str | None:
    return repair_text(value) if isinstance(value, str) and value else None


def _repaired(value: Any) -> Any:
    """A field of the model's answer with text a store cannot keep repaired."""
    return repair_text(value) if isinstance(value, str) else repair_json(value)


class _Pieces:
    """Streamed text shown piece by piece, repaired (``repair_text``) before it is shown.

    A piece ending in a high surrogate keeps it for the next piece: an endpoint that
    splits an escaped surrogate pair across two chunks still shows its one character.
    """

    def __init__(self, sink: DeltaSink | None) -> None:
        self.sink = sink
        self.held = ""

    async def show(self, piece: str) -> None:
        piece, self.held = self.held + piece, ""
        if "\ud800" <= piece[-1] <= "\udbff":
            piece, self.held = piece[:-1], piece[-1]
        if piece and self.sink is not None:
            await self.sink(repair_text(piece))


class StreamAssembler:
    """Rebuilds one response from chunks, whatever the chunking.

    Tool calls are keyed by their ``index``; an endpoint that omits it is keyed
    by ``id`` (a new id opens a new call, no id continues the last one).
    """

    def __init__(
        self, on_delta: DeltaSink | None = None, on_reasoning: DeltaSink | None = None
    ) -> None:
        self.on_delta = on_delta
        self.on_reasoning = on_reasoning
        self._deltas = _Pieces(on_delta)
        self._reasoning = _Pieces(on_reasoning)
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.extra: dict[str, Any] = {}
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, int] = {}
        self.model: str | None = None
        self.response_id: str | None = None
        self.chunks = 0
        self.saw_choice = False

    async def add(self, chunk: Any) -> None:
        """Take one chunk (raising on an error envelope inside the stream)."""
        self.chunks += 1
        envelope = _error_envelope(chunk)
        if envelope is not None:
            _raise_envelope(envelope, " mid-stream")
        if getattr(chunk, "usage", None) is not None:
            self.usage = _usage(chunk.usage)
        if self.model is None:
            self.model = _text_or_none(getattr(chunk, "model", None))
            self.response_id = _text_or_none(getattr(chunk, "id", None))
        for choice in chunk.choices or ():
            if (choice.index or 0) != 0:
                continue
            self.saw_choice = True
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            if delta.model_extra:
                reasoning, extra = split_fields(delta.model_extra)
                if extra:
                    merge_extra(self.extra, extra)
                if reasoning:
                    self.reasoning.append(reasoning)
                    await self._reasoning.show(reasoning)
            if delta.content:
                self.content.append(delta.content)
                await self._deltas.show(delta.content)
            for tc in delta.tool_calls or ():
                self._add_call_fragment(tc)

    def _add_call_fragment(self, tc: Any) -> None:
        index = tc.index
        if index is None:
            if tc.id and all(c["id"] != tc.id for c in self.calls.values()):
                index = len(self.calls)
            else:
                index = max(self.calls, default=0)
        entry = self.calls.setdefault(index, {"id": "", "name": "", "arguments": []})
        if tc.id and not entry["id"]:
            entry["id"] = tc.id
        function = tc.function
        if function is not None:
            if function.name and function.name != entry["name"]:
                # Some endpoints repeat the full name in every chunk; others split it.
                entry["name"] = (
                    function.name if not entry["name"] else entry["name"] + function.name
                )
            if function.arguments:
                entry["arguments"].append(function.arguments)

    def result(self) -> LLMResponse:
        """The assembled response; raises when the stream carried no answer."""
        if self.chunks == 0:
            raise LLMResponseError(
                "the endpoint sent no stream events (its answer was not an SSE stream)"
            )
        if not self.saw_choice:
            raise LLMNoChoicesError("the endpoint streamed no choices")
        calls = [
            ToolCall(
                id=repair_text(entry["id"]) or synthetic_call_id(),
                name=repair_text(entry["name"]),
                arguments=repair_text("".join(entry["arguments"])),
            )
            for _, entry in sorted(self.calls.items())
        ]
        return LLMResponse(
            content=repair_text("".join(self.content)) if self.content else None,
            tool_calls=calls,
            finish_reason=self.finish_reason,
            usage=self.usage,
            reasoning=repair_text("".join(self.reasoning)) if self.reasoning else None,
            extra=self.extra,
            model=self.model,
            response_id=self.response_id,
        )
