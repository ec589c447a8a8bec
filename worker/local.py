"""The embedded mode: run turns in-process, no broker, no Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from reactq.shared.bus import TurnEmitter
from reactq.shared.bus_memory import MemoryEventBus
from reactq.shared.events import Event, FinalEvent, StartedEvent
from reactq.shared.settings import Settings
from reactq.shared.state import open_store
from reactq.shared.turns import new_turn_id, validate_message, validate_session_id
from reactq.worker.agent.llm.endpoint import ClientCache
from reactq.worker.agent.runner import AgentRunner
from reactq.worker.definitions import Agent


async def run_local_turn(
    settings: Settings,
    agent: Agent,
    session_id: str,
    message: str,
    *,
    on_event: Callable[[Event], None] | None = None,
) -> FinalEvent:
    """Run one turn of ``agent`` in this process on the configured state store.

    The model endpoint and default model come from ``settings`` (unless the agent names its own).

    ``on_event`` sees every event as it happens (the CLI prints them).
    """

    validate_session_id(session_id)
    validate_message(message, settings.max_message_bytes)
    bus = MemoryEventBus()
    store = await open_store(settings.database_url, outage_seconds=settings.store_outage_seconds)
    clients = ClientCache()
    try:
        llm, *fallbacks = clients.for_agent(agent, settings)
        loop = agent.build_loop(llm, settings=settings, fallback_llms=fallbacks)
        runner = AgentRunner(loop, store, agent.name, workspace_root=settings.workspace_root)
        turn_id = new_turn_id()
        stream = bus.subscribe(session_id, after="0")

        async def show() -> None:
            async for event in stream:
                if on_event is not None:
                    on_event(event)
                if event.type == "final":
                    return

        printer = asyncio.create_task(show())
        emitter = TurnEmitter(bus, session_id, turn_id)
        await emitter.emit(StartedEvent, worker="in-process", config_version=loop.version)
        final = await runner.run_turn(
            session_id=session_id, message=message, turn_id=turn_id, emitter=emitter
        )
        await asyncio.wait_for(printer, 10)
        return final
    finally:
        await clients.aclose()
        await store.close()
        await bus.close()
