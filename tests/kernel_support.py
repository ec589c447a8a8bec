"""Shared pieces of the kernel tests: a list bus, endpoints on the ScriptedServer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from openai import AsyncOpenAI

from reactq.shared.bus import TurnEmitter
from reactq.shared.events import BaseEvent
from reactq.shared.messages import ChatMessage
from reactq.worker.agent import OpenAICompatibleClient
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer


class ListBus:
    """The smallest event sink: remembers what was published; calls ``on_event``;
    with ``fail``, refuses every event as a dead bus would."""

    def __init__(
        self, on_event: Callable[[Any], None] | None = None, *, fail: bool = False
    ) -> None:
        self.events: list[BaseEvent] = []
        self.on_event = on_event
        self.fail = fail

    async def publish(self, event: Any) -> Any:
        if self.fail:
            raise ConnectionError("bus down")
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)
        return event

    def types(self) -> list[str]:
        return [e.type for e in self.events]  # type: ignore[attr-defined]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]  # type: ignore[attr-defined]


def emitter_for(bus: ListBus, turn_id: str = "t1") -> TurnEmitter:
    return TurnEmitter(bus, "s1", turn_id, attempt=1)  # type: ignore[arg-type]


def scripted(*replies: Reply) -> Callable[[dict[str, Any]], Reply]:
    """A handler answering with ``replies`` in order (a 500 once they run out)."""
    queue = list(replies)

    def handler(request: dict[str, Any]) -> Reply:
        return queue.pop(0) if queue else Reply.error(500, "script exhausted")

    return handler


@asynccontextmanager
async def endpoint(
    handler: Callable[[dict[str, Any]], Any], *, sdk: bool = False, **options: Any
) -> AsyncIterator[tuple[ScriptedServer, OpenAICompatibleClient]]:
    """A ScriptedServer and a real-SDK client on it (no retries, short backoff).

    ``sdk``: hand the client an ``AsyncOpenAI`` of our own, so non-streamed calls go
    through the SDK's ``post`` rather than ``DirectPost`` (llm/direct.py)."""
    options = {"max_retries": 0, "timeout": 10, "retry_base_delay": 0.001, **options}
    async with ScriptedServer(handler) as server:
        own = (
            AsyncOpenAI(
                base_url=server.base_url,
                api_key="sk-test",
                max_retries=0,
                timeout=options["timeout"],
                default_headers=options.pop("headers", None),
            )
            if sdk
            else None
        )
        client = OpenAICompatibleClient(
            base_url=server.base_url, api_key="sk-test", client=own, **options
        )
        try:
            yield server, client
        finally:
            await client.aclose()
            if own is not None:
                await own.close()


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text, turn_id="t1")
