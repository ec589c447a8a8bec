"""Fakes for testing your own agents and services against reactq, offline.

Two scripted models stand in for a provider:

- ``ScriptedLLM`` is an in-process ``LLMClient``: give it a list of answers
  (an ``LLMResponse``, a plain string, or an exception to raise) or a function
  of the request, and build the agent's loop on it.
- ``ScriptedServer`` is a real OpenAI-compatible HTTP server on 127.0.0.1,
  driven by a handler returning ``Reply`` objects, for code that goes through
  the ``openai`` SDK (a worker process, ``reactq run``).

``run_turn`` runs one turn of an ``Agent`` on the in-memory state store and
event bus and returns its final event, every event and the stored history::

    from reactq import Agent, LLMResponse, ToolCall, tool
    from reactq.testing import ScriptedLLM, run_turn

    llm = ScriptedLLM([
        LLMResponse(tool_calls=[ToolCall(id="c1", name="get_weather",
                                         arguments='{"city": "Paris"}')]),
        "It is sunny in Paris.",
    ])
    outcome = await run_turn(agent, "Weather in Paris?", llm=llm)
    assert outcome.final.status == "completed"
"""

from __future__ import annotations

from dataclasses import dataclass

from reactq.shared.bus import TurnEmitter
from reactq.shared.bus_memory import MemoryEventBus
from reactq.shared.events import Event, FinalEvent
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.state.base import StateStore
from reactq.shared.state.memory.store import MemoryStateStore
from reactq.shared.turns import new_turn_id
from reactq.worker.agent.llm.base import LLMClient, LLMResponse
from reactq.worker.agent.llm.demo import demo_model
from reactq.worker.agent.llm.replies import Reply
from reactq.worker.agent.llm.scripted import ScriptedCall, ScriptedLLM
from reactq.worker.agent.llm.scripted_server import Handler, ScriptedServer
from reactq.worker.agent.runner import AgentRunner
from reactq.worker.definitions import Agent

__all__ = [  # noqa: RUF022 - grouped by purpose, as the style guide asks
    # an in-process model
    "ScriptedLLM",
    "ScriptedCall",
    "LLMResponse",
    "ToolCall",
    # an OpenAI-compatible server
    "ScriptedServer",
    "Handler",
    "Reply",
    "demo_model",
    "replies_in_order",
    # in-memory backends and one turn on them
    "MemoryEventBus",
    "MemoryStateStore",
    "TurnOutcome",
    "run_turn",
]


def replies_in_order(*replies: Reply) -> Handler:
    """A ``ScriptedServer`` handler answering ``replies`` in order, then HTTP 500."""
    queue = list(replies)

    def handler(request: dict[str, object]) -> Reply:
        return queue.pop(0) if queue else Reply.error(500, "the scripted replies ran out")

    return handler


@dataclass(frozen=True)
class TurnOutcome:
    """What ``run_turn`` saw."""

    final: FinalEvent
    """The turn's final event (``.status``, ``.text``)."""
    events: list[Event]
    """Every event of the turn, in order, ending with ``final``."""
    messages: list[ChatMessage]
    """The session's stored conversation after the turn."""


async def run_turn(
    agent: Agent,
    message: str,
    *,
    llm: LLMClient,
    session_id: str = "test",
    store: StateStore | None = None,
) -> TurnOutcome:
    """Run one turn of ``agent`` against ``llm`` in this process.

    The state lives in ``store`` (a fresh ``MemoryStateStore`` when None; pass one
    to run several turns of a session), the events on a ``MemoryEventBus``.
    """
    own_store = store is None
    state: StateStore = MemoryStateStore() if store is None else store
    bus = MemoryEventBus()
    emitter = TurnEmitter(bus, session_id, new_turn_id())
    try:
        runner = AgentRunner(agent.build_loop(llm), state, agent.name)
        final = await runner.run_turn(
            session_id=session_id, message=message, turn_id=emitter.turn_id, emitter=emitter
        )
        events = await bus.read(session_id)
        messages = await state.get_messages(session_id)
    finally:
        await bus.close()
        if own_store:
            await state.close()
    return TurnOutcome(final, events, messages)
