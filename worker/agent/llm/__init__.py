"""Model calls: the ``LLMClient`` seam, its OpenAI SDK client, what surrounds a call,
and the scripted fakes.

===================  =================================================================
``base``             the seam: ``LLMClient``, ``RequestOptions``, ``LLMResponse``
``openai_client``    ``OpenAICompatibleClient``: the seam over the official ``openai`` SDK
``direct``           non-streamed completions straight over aiohttp
``parse``            a completion (a whole body or streamed chunks) as an ``LLMResponse``
``pool``             ``LLMClientPool``: a process's calls over several connection pools
``endpoint``         where a model is reached: ``Model``, ``LLMEndpoint``, ``ClientCache``
``retry``            ``RetryPolicy``: which failures to retry, how long to wait
``ratelimit``        the pool's shared rate limit, as a turn meets it
``scripted``         ``ScriptedLLM``: an in-process fake (no network)
``scripted_server``  ``ScriptedServer``: a real OpenAI-compatible HTTP server for tests
``replies``          ``Reply``: what a ``ScriptedServer`` handler answers
``demo``             ``demo_model``: the offline demo model
===================  =================================================================

The names below load on first use, so importing this package imports neither the
``openai`` SDK nor aiohttp, and ``python -m reactq.worker.agent.llm.scripted_server``
does not import that module twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reactq.shared.lazy import LazyExports

if TYPE_CHECKING:
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

_EXPORTS = LazyExports(
    __name__,
    {
        "reactq.worker.agent.llm.base": "LLMClient LLMResponse",
        "reactq.worker.agent.llm.demo": "demo_model",
        "reactq.worker.agent.llm.openai_client": "OpenAICompatibleClient",
        "reactq.worker.agent.llm.replies": "Reply",
        "reactq.worker.agent.llm.scripted": "ScriptedCall ScriptedLLM",
        "reactq.worker.agent.llm.scripted_server": "ScriptedServer",
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.getattr(name)


def __dir__() -> list[str]:
    return _EXPORTS.dir()
