"""A2A message parts to a reactq turn's input, and a turn's answer to A2A parts.

A text part is text; a file part with an image media type (inline bytes or a URL) is an
image part; a data part goes in as its JSON text. Anything else is refused as invalid
params, before a turn is enqueued.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from a2a.types.a2a_pb2 import Message, Part, Role
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict

__all__ = ["agent_message", "approval_answer", "input_of", "text_of"]

_YES = frozenset({"approve", "approved", "yes", "y", "ok", "allow"})


def input_of(message: Message) -> str | list[dict[str, Any]]:
    """The turn's input of an A2A message: its text when it is all text, else its
    content parts (OpenAI shape)."""
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            if part.text.strip():
                parts.append({"type": "text", "text": part.text})
        elif kind == "data":
            parts.append({"type": "text", "text": json.dumps(MessageToDict(part.data))})
        elif kind in ("raw", "url") and part.media_type.startswith("image/"):
            url = (
                part.url
                if kind == "url"
                else f"data:{part.media_type};base64,{base64.b64encode(part.raw).decode()}"
            )
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            raise InvalidParamsError(
                f"unsupported part ({kind or 'empty'} {part.media_type!r}): this agent "
                "takes text, data and image parts"
            )
    if not parts:
        raise InvalidParamsError("the message has no content: give it a text part")
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def text_of(message: Message) -> str:
    """The message's text parts, joined."""
    return "\n".join(p.text for p in message.parts if p.WhichOneof("content") == "text").strip()


def approval_answer(message: Message) -> tuple[bool, str | None]:
    """What a message answering ``input-required`` decides: approve (``approve``,
    ``yes``...) or deny, with the text as the reason."""
    text = text_of(message)
    if text.lower().rstrip(".!") in _YES:
        return True, None
    return False, text or "denied"


def agent_message(text: str, context_id: str, task_id: str, message_id: str) -> Message:
    """An agent's message of ``text`` in a task."""
    return Message(
        message_id=message_id,
        context_id=context_id,
        task_id=task_id,
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
    )
