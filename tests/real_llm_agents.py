"""Agents of the real-model tests (tests/test_real_llm.py), loaded into real
`reactq worker` processes: one per tool mode and one that streams, all on the
endpoint in ``REACTQ_TEST_LLM_URL`` at temperature 0 with a fixed seed."""

from __future__ import annotations

import os
from typing import Any

from reactq.worker import Agent, ToolMode, tool

URL = os.environ.get("REACTQ_TEST_LLM_URL", "http://127.0.0.1:9/v1")


@tool(read_only=True)
async def get_weather(city: str) -> dict[str, Any]:
    """Get the current weather in a city."""
    return {"city": city, "temp_c": 17, "sky": "drizzle"}


@tool(read_only=True)
async def get_population(country: str) -> dict[str, Any]:
    """Get the population of a country."""
    return {"country": country, "population": 4321987}


def _agent(name: str, mode: ToolMode, *, stream: bool = False) -> Agent:
    return Agent(
        name=name,
        model="qwen2.5-0.5b-instruct",
        base_url=URL,
        tools=[get_weather, get_population],
        tool_mode=mode,
        temperature=0.0,
        seed=7,
        max_iterations=4,
        stream=stream,
        # The model runs on the CPU beside the suite: a call may take seconds.
        timeout=120,
        max_retries=0,
    )


agents = [
    _agent("real-native", ToolMode.NATIVE),
    _agent("real-json", ToolMode.JSON),
    _agent("real-prose", ToolMode.PROSE),
    _agent("real-stream", ToolMode.JSON, stream=True),
]
