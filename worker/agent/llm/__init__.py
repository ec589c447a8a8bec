"""The LLM seam: ``LLMClient``, the OpenAI SDK client, and the scripted fakes.

``ScriptedServer``, ``Reply`` and ``demo_model`` load lazily, so running
``python -m worker.agent.llm.scripted_server`` does not import it twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reactq.worker.agent.llm.base import LLMClient, LLMResponse
from reactq.worker.agent.llm.openai_client import OpenAICompatibleClient
from reactq.worker.agent.llm.scripted import ScriptedCall, ScriptedLLM

if TYPE_CHECKING:
    from reactq.worker.agent.llm.demo import demo_model
    from reactq.worker.agent.llm.replies import Reply
    from reactq.worker.agent.llm.scripted_server import ScriptedServer

__all__ = [
    # the seam
    "LLMClient",
    "LLMResponse",
    # the real client
    "OpenAICompatibleClient",
    # fakes
    "Reply",
    "ScriptedCall",
    "ScriptedLLM",
    "ScriptedServer",
    "demo_model",
]

_LAZY = {
    "Reply": "reactq.worker.agent.llm.replies",
    "ScriptedServer": "reactq.worker.agent.llm.scripted_server",
    "demo_model": "reactq.worker.agent.llm.demo",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
