"""What a ``POST /v1/responses`` body asks for: the turn's text, the answers it gives a
waiting response (``mcp_approval_response`` and ``function_call_output`` items), and
the client's own function tools.

``input`` is text or input items. ``message`` items (the user's) are the turn's text;
``mcp_approval_response`` items decide the ``mcp_approval_request`` items of the
``previous_response_id`` response; ``function_call_output`` items give the results of
its ``function_call`` items (calls of the client's tools). A request answers a waiting
response or runs new text, not both. ``tools`` of type ``function`` are client tools
(``shared/client_tools.py``); the agent's own tools run on the pool, so no other tool
type is taken.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from reactq.producer.gateway.errors import GatewayError
from reactq.producer.gateway.openai_api.items import call_id_of_approval

__all__ = ["RequestInput", "client_tools_of", "input_of"]


@dataclass
class RequestInput:
    """A request's input, sorted."""

    text: str = ""
    """The turn's message (empty when the request answers a waiting response)."""
    decisions: dict[str, bool | str] = field(default_factory=dict)
    """``mcp_approval_response`` items: ``{call_id: True | False | reason}``."""
    results: dict[str, str] = field(default_factory=dict)
    """``function_call_output`` items: ``{call_id: output}``."""

    @property
    def answers(self) -> bool:
        """True when it answers a waiting response."""
        return bool(self.decisions or self.results)


def bad(message: str, where: str) -> GatewayError:
    """A 400 (OpenAI's ``invalid_request_error``) naming the body field at fault."""
    return GatewayError(message, status=422, error_code="invalid_request", field=f"body.{where}")


def _output_text(value: Any) -> str:
    """A ``function_call_output``'s output: text, or content parts' text, or JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        return "".join(str(p.get("text", "")) for p in value)
    return json.dumps(value, ensure_ascii=False)


def input_of(value: str | list[dict[str, Any]]) -> RequestInput:
    """The request's ``input``, sorted; a 400 for an item reactq does not take."""
    if isinstance(value, str):
        if not value.strip():
            raise bad("input is empty", "input")
        return RequestInput(text=value)
    found = RequestInput()
    parts: list[str] = []
    for item in value:
        kind = item.get("type", "message")
        if kind == "mcp_approval_response":
            request_id = item.get("approval_request_id")
            if not isinstance(request_id, str) or not isinstance(item.get("approve"), bool):
                raise bad("an mcp_approval_response wants approval_request_id and approve", "input")
            reason = item.get("reason")
            denied: bool | str = reason if isinstance(reason, str) and reason else False
            found.decisions[call_id_of_approval(request_id)] = True if item["approve"] else denied
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or "output" not in item:
                raise bad("a function_call_output wants call_id and output", "input")
            found.results[call_id] = _output_text(item["output"])
        elif kind == "message":
            if item.get("role", "user") != "user":
                # The client's copy of what the agent said (reactq keeps the session):
                # the turn is the user's text after it.
                parts.clear()
                continue
            content = item.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(str(c.get("text", "")) for c in content if isinstance(c, dict))
            else:
                raise bad("a message item wants content", "input")
        elif kind in ("function_call", "reasoning", "mcp_approval_request", "mcp_call"):
            parts.clear()  # the client's copy of the agent's steps
        else:
            raise bad(f"input items of type {kind!r} are not supported", "input")
    found.text = "\n".join(p for p in parts if p)
    if found.answers and found.text.strip():
        raise bad(
            "mcp_approval_response and function_call_output items continue the response "
            "that waits: send new text in the next request",
            "input",
        )
    if not found.answers and not found.text.strip():
        raise bad("input has no text", "input")
    return found


def client_tools_of(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The request's ``function`` tools as client tools; a 400 for any other type."""
    out: list[dict[str, Any]] = []
    for index, tool in enumerate(tools or ()):
        kind = tool.get("type")
        if kind != "function":
            raise bad(
                f"tools of type {kind!r} are not supported: the agent's own tools run on the "
                "pool; give function tools for the client to run",
                f"tools.{index}",
            )
        spec = {"name": tool.get("name"), "description": tool.get("description") or ""}
        if isinstance(tool.get("parameters"), dict):
            spec["parameters"] = tool["parameters"]
        out.append(spec)
    return out
