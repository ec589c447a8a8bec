"""Make a stored history valid to send to a model again.

Chat Completions refuses an assistant tool call without its tool result, and a
tool result without its call. A stored history can hold either: a branch forked
between a call and its result, or a turn interrupted mid-step. ``repair`` drops
exactly those pieces and keeps everything else, in order.
"""

from __future__ import annotations

from collections.abc import Sequence

from reactq.shared.messages import ChatMessage


def repair(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The messages without unanswered tool calls and orphan tool results."""
    answered: set[str] = set()
    called: set[str] = set()
    for message in messages:
        if message.role == "tool" and message.tool_call_id:
            answered.add(message.tool_call_id)
        elif message.tool_calls:
            called.update(call.id for call in message.tool_calls)
    if answered == called:
        return list(messages)  # the common case: nothing to mend, nothing copied
    out: list[ChatMessage] = []
    for message in messages:
        if message.role == "tool":
            if message.tool_call_id in called:
                out.append(message)
        elif message.tool_calls:
            kept = [call for call in message.tool_calls if call.id in answered]
            if kept or message.content:
                out.append(message.model_copy(update={"tool_calls": kept or None}))
        else:
            out.append(message)
    return out
