"""Agents of the structured output tests (issue 15, item 3), loaded into real
`reactq worker` processes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from reactq.worker import Agent, tool
from reactq.worker.agent.llm.scripted_server import Reply


class Forecast(BaseModel):
    """What the structured agent answers."""

    model_config = ConfigDict(extra="forbid")
    city: str
    temp_c: int


@tool(read_only=True)
async def get_weather(city: str) -> dict[str, Any]:
    """Weather in a city."""
    return {"city": city, "temp_c": 21}


agent = Agent(
    name="forecast",
    model="scripted",
    system_prompt="You report the weather.",
    tools=[get_weather],
    output_type=Forecast,
)

stubborn = Agent(name="stubborn", model="scripted-prose", output_type=Forecast)

agents = [agent, stubborn]


def weather_then_json(request: Mapping[str, Any]) -> Reply:
    """``forecast``: call ``get_weather``, then answer its result as JSON, but only when
    the request asked for a json_schema (so the answer proves it was sent).
    ``stubborn``: always prose."""
    messages = request["messages"]
    if request["model"] == "scripted-prose":
        return Reply.text("It is sunny.")
    if messages[-1]["role"] == "user":
        return Reply.tool_calls([("get_weather", {"city": "Paris"})])
    if request.get("response_format", {}).get("type") != "json_schema":
        return Reply.text("no schema was asked for")
    return Reply.text(json.dumps(json.loads(messages[-1]["content"])))
