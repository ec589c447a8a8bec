"""``Reply``: what a ScriptedServer handler answers, and its wire rendering.

A Reply is either a completion (text and/or tool calls) that the server renders
as a Chat Completions body, or as SSE chunks when the request streams; or a
fixed HTTP answer (``error`` / ``raw``) sent as is.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Reply", "prompt_tokens"]


@dataclass(frozen=True)
class Reply:
    """One scripted answer; build it with the class methods."""

    status: int = 200
    """HTTP status."""
    content: str | None = None
    """Assistant text of a completion."""
    calls: tuple[tuple[str, str], ...] = ()
    """Tool calls of a completion: (name, arguments as JSON text, maybe invalid)."""
    body: bytes | None = None
    """A fixed body (error / raw replies); None for a completion."""
    content_type: str = "application/json"
    """Content type of a fixed body."""
    headers: tuple[tuple[str, str], ...] = ()
    """Extra response headers."""
    finish_reason: str | None = None
    """Override of the finish reason (default: tool_calls or stop)."""
    usage: Mapping[str, int] | None = None
    """Override of the usage block (default: a rough count)."""
    pieces: int = 3
    """How many SSE chunks the text and each call's arguments are split into."""
    call_ids: tuple[str, ...] = field(default=())
    """Fixed tool call ids (default: fresh random ones)."""
    delay: float = 0.0
    """Seconds to wait before answering (on top of the server's latency)."""
    chunk_delay: float = 0.0
    """Streams: seconds between SSE events."""
    cut_after: int | None = None
    """Streams: drop the connection after this many SSE events (a stream cut mid-way)."""
    stall_after: int | None = None
    """Streams: after this many SSE events, send nothing more until the client hangs up."""
    reasoning: str | None = None
    """Reasoning text sent before the answer (streamed in ``pieces`` like the text)."""
    reasoning_field: str = "reasoning_content"
    """The message field the reasoning goes in (``reasoning`` for newer vLLM, OpenRouter)."""
    fields: Mapping[str, Any] | None = None
    """More fields of the assistant message, as a provider of its own adds them (in the
    first chunk of a stream)."""

    def but(self, **changes: Any) -> Reply:
        """A copy with some fields changed (``Reply.text("x").but(delay=0.05)``)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def text(
        cls, content: str, *, usage: Mapping[str, int] | None = None, pieces: int = 3
    ) -> Reply:
        """A plain text answer."""
        return cls(content=content, usage=usage, pieces=pieces)

    @classmethod
    def tool_calls(
        cls,
        calls: Iterable[tuple[str, Any]],
        *,
        content: str | None = None,
        usage: Mapping[str, int] | None = None,
        pieces: int = 3,
        call_ids: Iterable[str] = (),
    ) -> Reply:
        """Tool calls: ``(name, args)`` where args is a dict or raw (maybe invalid) text."""
        encoded = tuple(
            (name, args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
            for name, args in calls
        )
        return cls(
            content=content, calls=encoded, usage=usage, pieces=pieces, call_ids=tuple(call_ids)
        )

    @classmethod
    def error(
        cls, status: int, body: Mapping[str, Any] | str, headers: Mapping[str, str] | None = None
    ) -> Reply:
        """An HTTP error; a str body becomes an OpenAI-style ``{"error": {...}}`` envelope."""
        if isinstance(body, str):
            body = {"error": {"message": body, "type": "scripted_error", "code": None}}
        return cls(
            status=status,
            body=json.dumps(body).encode(),
            headers=tuple((headers or {}).items()),
        )

    @classmethod
    def raw(
        cls,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """Exactly these bytes, with this status and content type."""
        return cls(
            status=status,
            body=body,
            content_type=content_type,
            headers=tuple((headers or {}).items()),
        )

    @property
    def is_completion(self) -> bool:
        """True when the server must render a completion (not a fixed body)."""
        return self.body is None


def _ids(reply: Reply) -> list[str]:
    return [
        reply.call_ids[i] if i < len(reply.call_ids) else f"call_{uuid.uuid4().hex[:24]}"
        for i in range(len(reply.calls))
    ]


def prompt_tokens(request: Mapping[str, Any]) -> int:
    """A request's prompt tokens as the scripted usage block counts them: a rough,
    deterministic four characters a token of its messages' JSON."""
    return max(1, len(json.dumps(request.get("messages", []), ensure_ascii=False)) // 4)


def _usage(reply: Reply, request: Mapping[str, Any]) -> dict[str, int]:
    if reply.usage is not None:
        return dict(reply.usage)
    prompt = prompt_tokens(request)
    written = len(reply.content or "") + len(reply.reasoning or "")
    written += sum(len(n) + len(a) for n, a in reply.calls)
    completion = max(1, written // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _finish(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.calls else "stop")


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def completion_body(reply: Reply, request: Mapping[str, Any]) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning is not None:
        message[reply.reasoning_field] = reply.reasoning
    message.update(reply.fields or {})
    if reply.calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, (name, args) in zip(_ids(reply), reply.calls, strict=True)
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(request.get("model", "scripted")),
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
        "usage": _usage(reply, request),
    }


def stream_chunks(reply: Reply, request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed answer, in order."""
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": str(request.get("model", "scripted")),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": "", **(reply.fields or {})})]
    out += [
        chunk({reply.reasoning_field: piece})
        for piece in _split(reply.reasoning or "", reply.pieces)
    ]
    out += [chunk({"content": piece}) for piece in _split(reply.content or "", reply.pieces)]
    for index, (cid, (name, args)) in enumerate(zip(_ids(reply), reply.calls, strict=True)):
        head = {"index": index, "id": cid, "type": "function"}
        out.append(chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}))
        for piece in _split(args, reply.pieces):
            out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    out.append(chunk({}, _finish(reply)))
    options = request.get("stream_options") or {}
    if isinstance(options, Mapping) and options.get("include_usage"):
        out.append({**base, "choices": [], "usage": _usage(reply, request)})
    return out
