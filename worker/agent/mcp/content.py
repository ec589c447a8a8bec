"""MCP tool results as the text the model reads, and screening a server's error text."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from reactq.worker.agent.results import safe_text

if TYPE_CHECKING:
    from mcp_types import CallToolResult

__all__ = [
    "MAX_ERROR_CHARS",
    "MAX_RESULT_CHARS",
    "ToolErrorScreen",
    "content_blocks",
    "default_error_message",
    "result_text",
    "screen_error",
]

log = logging.getLogger("reactq.mcp")

MAX_RESULT_CHARS = 200_000
MAX_ERROR_CHARS = 2_000

ToolErrorScreen = Callable[[str, list[dict[str, Any]]], "str | Awaitable[str]"]
"""``on_tool_error(message, content)``: the text the model reads for an ``isError`` result.

``message`` is the server's error text, ``content`` its content blocks as JSON
data. Return the text to show; raising or returning a non-string falls back to
``default_error_message``.
"""


def content_blocks(result: CallToolResult) -> list[dict[str, Any]]:
    """The result's content blocks as JSON-able dicts (the wire form)."""
    return [
        block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content
    ]


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        size = len(str(block.get("data", ""))) * 3 // 4
        return f"[{kind}: {block.get('mimeType', 'unknown type')}, about {size} bytes]"
    if kind == "resource":
        resource = block.get("resource") or {}
        if "text" in resource:
            return str(resource["text"])
        return f"[resource {resource.get('uri', '')}: {resource.get('mimeType', 'binary')}]"
    if kind == "resource_link":
        return f"[resource link: {block.get('uri', '')}]"
    return json.dumps(block, ensure_ascii=False)


def result_text(result: CallToolResult) -> str:
    """A successful result as text: its content blocks, else its structured content."""
    parts = [_block_text(block) for block in content_blocks(result)]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    return _bounded(safe_text("\n".join(parts)), MAX_RESULT_CHARS)


def default_error_message(tool: str, message: str) -> str:
    """The bounded text the model reads for a failed MCP tool call."""
    text = " ".join(message.split()) or "no details given"
    return _bounded(safe_text(f"the MCP tool {tool!r} failed: {text}"), MAX_ERROR_CHARS)


async def screen_error(screen: ToolErrorScreen | None, tool: str, result: CallToolResult) -> str:
    """What the model reads for an ``isError`` result, through the ``on_tool_error`` hook."""
    blocks = content_blocks(result)
    message = "\n".join(_block_text(block) for block in blocks)
    fallback = default_error_message(tool, message)
    if screen is None:
        return fallback
    try:
        screened = screen(message, blocks)
        if isinstance(screened, Awaitable):
            screened = await screened
    except Exception as exc:  # a broken hook must not show the raw server text
        log.warning(
            "on_tool_error for %s raised %s; using the default message", tool, type(exc).__name__
        )
        return fallback
    if not isinstance(screened, str):
        return fallback
    return safe_text(screened)


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [cut: {len(text) - limit} more characters]"
