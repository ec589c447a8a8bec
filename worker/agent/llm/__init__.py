"""The LLM seam: ``LLMClient``, the OpenAI SDK client, and the scripted fakes.

``ScriptedServer``, ``Reply`` and ``demo_model`` load lazily, so running
``python -m reactq.worker.agent.llm.scripted_server`` does not import it twice.
"""

from __future__ import annotations

from reactq.worker.agent.llm.base import LLMClient, LLMResponse
from reactq.worker.agent.llm.demo import demo_model
from reactq.worker.agent.llm.openai_client import OpenAICompatibleClient
from reactq.worker.agent.llm.replies import Reply
from reactq.worker.agent.llm.scripted import ScriptedCall, ScriptedLLM
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
