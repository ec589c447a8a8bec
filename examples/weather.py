"""A weather agent, written the way an application writes its own.

Run one turn in-process (SQLite state, no broker)::

    python examples/weather.py "What's the weather in Oslo?"

Host it in a pool, from the repository's root (the worker looks in the current
directory first)::

    reactq worker --agents examples.weather:agent
"""

from __future__ import annotations

import asyncio
import sys

from reactq import Agent, ToolMode, tool
from reactq.demo.weather import get_weather as look_up
from reactq.shared.settings import Settings
from reactq.worker.cli import ensure_model_endpoint
from reactq.worker.local import run_local_turn


@tool()
async def get_weather(city: str, unit: str = "celsius") -> dict[str, object]:
    """Get the current weather for a city.

    Args:
        city: The city's name, e.g. "Paris".
        unit: "celsius" or "fahrenheit".
    """
    report: dict[str, object] = await look_up.fn(city)
    if unit == "fahrenheit":
        celsius = int(str(report.pop("temperature_c")))
        report["temperature_f"] = round(celsius * 9 / 5 + 32)
    return report


agent = Agent(
    name="weather",
    model="gpt-4o-mini",
    system_prompt="You are a weather assistant. Look the weather up; answer in one sentence.",
    tools=[get_weather],
    tool_mode=ToolMode.NATIVE,
)


def main() -> int:
    """Run one turn of ``agent`` with the question on the command line."""
    question = " ".join(sys.argv[1:]) or "What's the weather in Paris?"
    server = ensure_model_endpoint({agent.name: agent})
    try:
        final = asyncio.run(run_local_turn(Settings.from_env(), agent, "example", question))
    finally:
        if server is not None:
            server.stop()
    print(final.text)
    return 0 if final.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
