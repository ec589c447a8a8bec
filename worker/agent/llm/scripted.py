"""ScriptedLLM: an in-process LLMClient for tests and demos (no network)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from reactq.shared.errors import LLMResponseError
from reactq.worker.agent.llm.base import DeltaSink, LLMResponse, RequestOptions

__all__ = ["ScriptedCall", "ScriptedLLM"]

ScriptItem = LLMResponse | str | BaseException
ScriptFunction = Callable[
    [list[dict[str, Any]], list[dict[str, Any]] | None], LLMResponse | Awaitable[LLMResponse]
]


@dataclass
class ScriptedCall:
    """One request ScriptedLLM received."""

    messages: list[dict[str, Any]]
    """The messages, as sent."""
    model: str
    """The model asked for."""
    tools: list[dict[str, Any]] | None
    """The tools offered (None when none)."""
    stream: bool = False
    """Whether streaming was asked for."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Request options, under ``"options"``, when the caller passed them."""


class ScriptedLLM:
    """Answers from a script: a list of responses, or a function of the request.

    A list item may be an ``LLMResponse``, a ``str`` (a plain text answer) or an
    exception (raised, to script failures). A function receives ``(messages,
    tools)`` and returns an ``LLMResponse`` (or an awaitable of one). Every request
    is recorded in ``calls``.
    """

    def __init__(self, script: Iterable[ScriptItem] | ScriptFunction) -> None:
        self._fn: ScriptFunction | None = script if callable(script) else None
        self._items: list[ScriptItem] = [] if callable(script) else list(script)
        self.calls: list[ScriptedCall] = []

    @property
    def remaining(self) -> int:
        """Scripted responses not used yet (0 for a function script)."""
        return len(self._items)

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
        """The next scripted response; LLMResponseError when the script is used up.

        With ``stream``, the response's reasoning goes to ``on_reasoning`` and its text
        to ``on_delta``, each as one piece.
        """
        extra = {"options": options} if options is not None else {}
        self.calls.append(ScriptedCall(list(messages), model, tools, stream, extra))
        response = await self._next(messages, tools)
        if stream and on_reasoning is not None and response.reasoning:
            await on_reasoning(response.reasoning)
        if stream and on_delta is not None and response.content:
            await on_delta(response.content)
        return response

    async def _next(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> LLMResponse:
        if self._fn is not None:
            result = self._fn(messages, tools)
            return await result if inspect.isawaitable(result) else result
        if not self._items:
            raise LLMResponseError(
                f"ScriptedLLM has no response left for request #{len(self.calls)}"
            )
        item = self._items.pop(0)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, str):
            return LLMResponse(content=item, finish_reason="stop")
        return item

    async def aclose(self) -> None:
        """Nothing to release; here so it can stand in for OpenAICompatibleClient."""
