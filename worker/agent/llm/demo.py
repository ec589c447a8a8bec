"""``demo_model``: a stateless stand-in for a real model, for demos and benchmarks.

It decides from the request alone, so any number of workers can share one
server: a user message to an agent with subagents is handed to the first of them
(a ``delegate`` call); a user asking about the weather "in <City>" gets a
``get_weather`` call (when that tool is offered); a tool result gets a sentence
built from it; any other message is echoed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from reactq.worker.agent.llm.replies import Reply

__all__ = ["demo_model"]

PREFIX = "[offline demo model] "
_CITY_RE = re.compile(r"\bin\s+([A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)")
# A failed call's result reads "[code] error" (reactq.worker.agent.results.tool_error_text).
_TOOL_ERROR_RE = re.compile(r"^\[[a-z_]+\] ")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def _offered_tools(request: Mapping[str, Any]) -> set[str]:
    names = set()
    for entry in request.get("tools") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("function"), Mapping):
            names.add(str(entry["function"].get("name", "")))
    return names


def _describe(result: str) -> str:
    if result.startswith(PREFIX):  # another agent's answer (a subagent's, delegated to)
        return result.removeprefix(PREFIX)
    try:
        data = json.loads(result)
    except ValueError:
        return f"The tool said: {result}"
    if not isinstance(data, Mapping):
        return f"The tool said: {result}"
    if str(data.get("error", "")):
        return f"The tool failed: {data['error']}"
    temp = next((data[k] for k in ("temperature_c", "temp_c", "temperature") if k in data), None)
    cond = next((data[k] for k in ("conditions", "condition", "summary") if k in data), None)
    city = data.get("city")
    if temp is not None and city:
        return f"It is {temp}°C" + (f" and {cond}" if cond else "") + f" in {city}."
    return f"The tool said: {json.dumps(data, ensure_ascii=False)}"


def _subagents(request: Mapping[str, Any]) -> list[str]:
    """The agents the ``delegate`` tool offers (its schema's enum), if it is offered."""
    for entry in request.get("tools") or []:
        function = entry.get("function") if isinstance(entry, Mapping) else None
        if isinstance(function, Mapping) and function.get("name") == "delegate":
            agent = function.get("parameters", {}).get("properties", {}).get("agent", {})
            return [str(a) for a in agent.get("enum") or []]
    return []


def demo_model(request: Mapping[str, Any]) -> Reply:
    """Answer a Chat Completions request deterministically (see the module doc)."""
    messages = [m for m in request.get("messages") or [] if isinstance(m, Mapping)]
    if not messages:
        return Reply.text(PREFIX + "Say something.")
    last = messages[-1]
    if last.get("role") == "tool":
        content = _text(last.get("content"))
        failed = _TOOL_ERROR_RE.match(content)
        if failed:
            return Reply.text(PREFIX + "Sorry, the tool failed: " + content[failed.end() :].strip())
        return Reply.text(PREFIX + _describe(content))
    user_text = next(
        (_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), ""
    )
    subagents = _subagents(request)
    if last.get("role") == "user" and subagents:
        return Reply.tool_calls([("delegate", {"agent": subagents[0], "task": user_text})])
    if last.get("role") == "user" and "get_weather" in _offered_tools(request):
        match = _CITY_RE.search(user_text)
        if match:
            return Reply.tool_calls([("get_weather", {"city": match.group(1)})])
    return Reply.text(PREFIX + "You said: " + user_text)
