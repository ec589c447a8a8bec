"""The context policy: what a run does before a model call so the request fits the
model's window.

Three steps, each later one only when the earlier ones were not enough:

1. **Shrink** old tool results to their head and tail (a marker says how much was
   cut) once the request is over ``shrink_at`` of the window; a message of an
   earlier turn too large on its own is cut the same way.
2. **Compact**, at the start of a turn whose request is over ``compact_at``: the
   oldest part of the conversation is summarised by one model call into a summary
   message (``ChatMessage.summary_of``) that the turn commits with its messages. The
   store keeps the full history; a turn's read starts at the latest summary
   (``StateStore.begin_turn``) and the model reads from it on (``model_view``), so a
   turn costs the same however long the session is.
   When no summary can be written (the summary call failed, or answered nothing),
   the turn **leaves out** its oldest whole turns instead (``leave_out``), until the
   request is back under ``compact_at``: they stay in the history, a
   ``turns_left_out`` event names them, and the next turn tries the summary again.
3. **Refuse**: a request that still does not fit ends the turn with
   ``context_length_exceeded`` naming the largest message and the limit. The
   message stays in the history, and the next turn shrinks or summarises it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reactq.shared.errors import ContextLengthExceededError
from reactq.shared.messages import ChatMessage
from reactq.worker.agent.llm.base import LLMClient, LLMResponse, RequestOptions
from reactq.worker.agent.results import OBSERVATION_PREFIX, shrink_text
from reactq.worker.agent.windows import TokenCounter, message_chars

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "SUMMARY_HEADER",
    "ContextPolicy",
    "LeftOut",
    "compaction_split",
    "fit_request",
    "leave_out",
    "model_view",
    "summarise",
    "summary_message",
]

DEFAULT_SUMMARY_PROMPT = (
    "You compact a conversation between a user and an AI assistant so the assistant can "
    "go on without the full transcript. Write a concise summary that keeps every fact, "
    "name, number, decision, preference and open task the user or the tools gave, and "
    "what the assistant already did or promised. Write only the summary."
)
SUMMARY_HEADER = "[Summary of the earlier conversation, messages 1-{upto}]"


@dataclass(frozen=True, kw_only=True)
class ContextPolicy:
    """When and how a run keeps its requests inside the model's window (fractions
    of the window; ValueError names a bad knob)."""

    shrink_at: float = 0.6
    """Shrink old tool results once a request is over this share of the window."""
    compact_at: float = 0.75
    """Summarise the oldest messages at a turn's start once over this share."""
    keep_recent: float = 0.25
    """The share of the window the newest messages may keep verbatim when compacting."""
    tool_result_chars: int = 1000
    """Characters a shrunk tool result keeps (head and tail)."""
    summary_model: str | None = None
    """The model that writes summaries (on the agent's endpoint); None: the turn's model."""
    summary_prompt: str = DEFAULT_SUMMARY_PROMPT
    """The instructions of the summary call."""

    def __post_init__(self) -> None:
        for name in ("shrink_at", "compact_at", "keep_recent"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a fraction of the window, got {value!r}")
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value!r}")
        if self.keep_recent >= self.compact_at:
            raise ValueError(
                f"keep_recent ({self.keep_recent}) must be below compact_at "
                f"({self.compact_at}): a compaction must leave the request under its trigger"
            )
        chars = self.tool_result_chars
        if isinstance(chars, bool) or not isinstance(chars, int) or chars < 100:
            raise ValueError(f"tool_result_chars must be an int >= 100, got {chars!r}")
        if self.summary_model is not None and not (
            isinstance(self.summary_model, str) and self.summary_model.strip()
        ):
            raise ValueError(
                f"summary_model must be a model name or None, got {self.summary_model!r}"
            )
        if not isinstance(self.summary_prompt, str) or not self.summary_prompt.strip():
            raise ValueError(
                f"summary_prompt must be a non-empty string, got {self.summary_prompt!r}"
            )


def model_view(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """What the model reads of a branch: from its latest summary on (the summary, then
    the messages it does not stand for), or all of it when it has none."""
    latest: ChatMessage | None = None
    for message in reversed(messages):
        if message.summary_of is not None:
            latest = message
            break
    if latest is None:
        return list(messages)
    upto = latest.summary_of or 0
    rest = [
        m for m in messages if m.summary_of is None and (m.sequence is None or m.sequence > upto)
    ]
    return [latest, *rest]


def compaction_split(
    history: Sequence[ChatMessage], wire_chars: Sequence[int], keep_chars: int
) -> int:
    """How many of ``history``'s first messages a summary should stand for: the newest
    messages within ``keep_chars`` stay, cut at a user message (a turn's start), so
    no tool result loses its call. 0: nothing worth summarising."""
    kept = 0
    split = len(history)
    for index in range(len(history) - 1, -1, -1):
        kept += wire_chars[index]
        if kept > keep_chars:
            break
        split = index
    # Move forward to the next turn's start that a store has numbered.
    while split < len(history) and not _turn_start(history[split]):
        split += 1
    if split >= len(history) or history[split - 1].sequence is None:
        return 0
    only_summary = split == 1 and history[0].summary_of is not None
    return 0 if only_summary else split


@dataclass(frozen=True)
class LeftOut:
    """The oldest whole turns a request leaves out when no summary can be written."""

    kept: list[ChatMessage]
    """The history the request still carries (a leading summary, the newer turns)."""
    left_out: list[ChatMessage]
    """The messages left out, oldest first: whole turns, each from its user message on."""

    @property
    def turn_ids(self) -> list[str]:
        """The turns left out, oldest first."""
        return list(dict.fromkeys(m.turn_id for m in self.left_out if m.turn_id is not None))


def leave_out(
    history: Sequence[ChatMessage], wire_chars: Sequence[int], over_chars: int
) -> LeftOut | None:
    """The oldest whole turns of ``history`` that take at least ``over_chars`` characters
    out of the request (every earlier turn when they are not enough), cut where a turn
    starts, so no tool result loses its call. A leading summary stays: it is all the
    request has of what came before it. None: nothing to leave out."""
    start = 1 if history and history[0].summary_of is not None else 0
    end = start
    removed = 0
    for index in range(start + 1, len(history) + 1):
        removed += wire_chars[index - 1]
        if index == len(history) or _turn_start(history[index]):
            end = index
            if removed >= over_chars:
                break
    if over_chars <= 0 or end == start:
        return None
    return LeftOut(kept=[*history[:start], *history[end:]], left_out=list(history[start:end]))


def _turn_start(message: ChatMessage) -> bool:
    return (
        message.role == "user"
        and message.summary_of is None
        and message.sequence is not None
        and not (message.content or "").startswith(OBSERVATION_PREFIX)
    )


def transcript(messages: Sequence[ChatMessage], max_chars: int) -> str:
    """The messages as the text the summary call reads, each cut to its share of
    ``max_chars`` (head and tail) so the call itself fits."""
    share = max(200, max_chars // max(1, len(messages)))
    lines = []
    for message in messages:
        text = message.content or ""
        if message.tool_calls:
            calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
            text = f"{text}\n[calls {calls}]" if text else f"[calls {calls}]"
        who = f"tool {message.name}" if message.role == "tool" else message.role
        lines.append(f"{who}: {shrink_text(text, share)}")
    return "\n\n".join(lines)


async def summarise(
    llm: LLMClient,
    model: str,
    options: RequestOptions,
    policy: ContextPolicy,
    messages: Sequence[ChatMessage],
    max_chars: int,
) -> LLMResponse:
    """One model call that summarises ``messages`` (LLMError when it fails)."""
    wire = [
        {"role": "system", "content": policy.summary_prompt},
        {"role": "user", "content": transcript(messages, max_chars)},
    ]
    # A summary is prose: never the agent's structured-output schema.
    plain = dataclasses.replace(options, response_format=None)
    return await llm.complete(wire, model=model, tools=None, stream=False, options=plain)


def summary_message(text: str, upto: int, turn_id: str | None) -> ChatMessage:
    """The message that stands for messages 1..``upto`` of the branch."""
    header = SUMMARY_HEADER.format(upto=upto)
    return ChatMessage(role="user", content=f"{header}\n{text}", summary_of=upto, turn_id=turn_id)


def fit_request(
    wire: list[dict[str, Any]],
    *,
    counter: TokenCounter,
    model: str,
    window: int,
    policy: ContextPolicy,
    protect_from: int,
    tools: Sequence[dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """``wire`` made to fit ``window`` (a copy when changed) and its estimated tokens.

    Messages from index ``protect_from`` on (this turn's user message and the step
    being answered) are never cut. Raises ContextLengthExceededError when it cannot fit.
    """
    tokens = counter.count(model, wire, tools)
    if tokens <= policy.shrink_at * window:
        return wire, tokens
    ratio = counter.ratio(model)
    target = int(policy.shrink_at * window * ratio)
    overhead = int(counter.chars([], tools))
    sizes = [message_chars(m) for m in wire]
    total = sum(sizes) + overhead
    out = list(wire)
    keep = policy.tool_result_chars
    # Tool results first (the model rarely needs an old one whole), then any earlier
    # message too large on its own: a quarter of the window each at most.
    passes = ((True, keep), (False, max(keep, int(window * ratio / 4))))
    for results_only, cap in passes:
        for index in range(min(protect_from, len(out))):
            if total <= target:
                break
            message = out[index]
            content = message.get("content") or ""
            if results_only and not _is_result(message):
                continue
            if message.get("role") == "system" or len(content) <= cap:
                continue
            shrunk = shrink_text(content, cap)
            total -= len(content) - len(shrunk)
            sizes[index] -= len(content) - len(shrunk)
            out[index] = {**message, "content": shrunk}
    tokens = counter.tokens(model, total)
    if tokens > window:
        largest = max(range(len(out)), key=sizes.__getitem__)
        role = out[largest].get("role")
        which = "this turn's message" if largest >= protect_from else "an earlier message"
        raise ContextLengthExceededError(
            f"the request needs about {tokens} tokens, over the {window}-token context window "
            f"of {model}: message {largest + 1} ({role}, {which}) alone is about "
            f"{counter.tokens(model, sizes[largest])} tokens; send it shorter, or in parts",
            model=model,
            context_window=window,
            context_tokens=tokens,
            message_index=largest + 1,
            message_role=role,
            message_tokens=counter.tokens(model, sizes[largest]),
        )
    return out, tokens


def _is_result(message: dict[str, Any]) -> bool:
    role = message.get("role")
    content = message.get("content") or ""
    # Text modes return observations as user messages that start "Observation".
    return role == "tool" or (role == "user" and content.startswith(OBSERVATION_PREFIX))
