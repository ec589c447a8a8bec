"""A weather agent, written the way an application writes its own.

Run one turn in-process (SQLite state, no broker)::

    python examples/weather.py "What's the weather in Oslo?"

Host it in a pool, from the repository's root (the worker looks in the current
directory first)::

    reactq worker --agents examples.weather:agent
"""

from __future__ import annotations

import sys

from reactq import Agent, ToolMode, tool
from reactq.demo.weather import get_weather as look_up


@tool(read_only=True)
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
    """Run one turn of ``agent`` in-process with the question on the command line.

    The same as ``reactq run QUESTION --agents examples.weather:agent``: SQLite
    state, no broker, and the offline demo model when no endpoint is configured.
    """
    from reactq.cli import main as reactq

    question = " ".join(sys.argv[1:]) or "What's the weather in Paris?"
    return reactq(["run", question, "--agents", f"{__name__}:agent"])


if __name__ == "__main__":
    sys.exit(main())
