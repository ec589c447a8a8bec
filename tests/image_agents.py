"""Agents of the images-in-messages tests (issue 15, item 4), loaded into real
`reactq worker` processes: one on a model that sees images, one on a text-only model
(the scripted server refuses image parts sent to ``text-only``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reactq.worker import Agent
from reactq.worker.agent.llm.scripted_server import Reply

TEXT_ONLY_MODEL = "text-only"


def describe(request: Mapping[str, Any]) -> Reply:
    """Say how many images the newest user message carried and its text."""
    content = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
    if isinstance(content, str):
        return Reply.text(f"text only: {content}")
    images = sum(1 for part in content if part["type"] == "image_url")
    text = " ".join(part["text"] for part in content if part["type"] == "text")
    return Reply.text(f"saw {images} image(s): {text}")


vision = Agent(name="vision", model="scripted", system_prompt="You see images.")
blind = Agent(name="blind", model=TEXT_ONLY_MODEL, system_prompt="You read text only.")

agents = [vision, blind]
