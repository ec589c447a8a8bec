"""Where a model is reached: ``Model`` (a fallback model, maybe on its own endpoint),
``LLMEndpoint`` (an endpoint with its client knobs, resolved) and ``ClientCache``
(one client per endpoint in a process, shared by the agents that name it).

An agent's endpoint is its own ``base_url`` / key / knobs where it names them,
else the pool's settings (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``REACTQ_LLM_TIMEOUT_SECONDS``, ``REACTQ_LLM_MAX_RETRIES``). A key named by
``api_key_env`` is read through ``Settings``, the one reader of the environment.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reactq.shared.logs import redact_also
from reactq.shared.protocol.ratelimit import RateLimit
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.base import LLMClient
from reactq.worker.agent.llm.pool import LLMClientPool

if TYPE_CHECKING:
    from reactq.worker.agent.llm.openai_client import OpenAICompatibleClient
    from reactq.worker.definitions import Agent

__all__ = ["ClientCache", "ClientFactory", "LLMEndpoint", "Model", "RateLimit", "as_model"]


@dataclass(frozen=True)
class Model:
    """A model to fall back to: its name, and its own endpoint when it has one.

    Without ``base_url`` it is reached on the agent's endpoint, with the agent's
    key unless ``api_key_env`` names another. With ``base_url`` it gets only the
    key ``api_key_env`` names (none otherwise): the agent's key never goes to
    another endpoint.
    """

    name: str
    """The model's name, as the endpoint knows it."""
    base_url: str | None = None
    """Its OpenAI-compatible endpoint; None: the agent's."""
    api_key_env: str | None = None
    """The environment variable holding its key (read through Settings)."""
    rate_limit: RateLimit | None = None
    """Its share of the pool's rate limit; None: the agent's on the agent's endpoint,
    none on its own."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"a fallback model needs a non-empty name, got {self.name!r}")
        check_rate_limit(self.rate_limit)
        for knob in ("base_url", "api_key_env"):
            value = getattr(self, knob)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"Model {self.name!r}: {knob} must be a non-empty string or None")


def as_model(value: Model | str) -> Model:
    """A fallback model from a ``Model`` or a plain model name; ValueError otherwise."""
    if isinstance(value, Model):
        return value
    if isinstance(value, str):
        return Model(value)
    raise ValueError(f"fallback_models takes model names or Model(...), got {value!r}")


@dataclass(frozen=True)
class LLMEndpoint:
    """An endpoint and the knobs of a client for it, resolved from an agent and the
    settings; what ``Agent(client_factory=...)`` is given."""

    base_url: str | None
    """The OpenAI-compatible endpoint; None: OpenAI's."""
    api_key: str | None = field(default=None, repr=False)
    """Its key (None: none); never shown in repr."""
    timeout: float = 60.0
    """Seconds one request may take."""
    max_retries: int = 2
    """Retries of a retryable failure (RetryPolicy), after the first try."""
    headers: tuple[tuple[str, str], ...] = ()
    """Extra HTTP headers sent with every request."""
    rate_limit: RateLimit | None = None
    """The requests and tokens per minute the pool may send its model here, together."""

    def secrets(self) -> list[str]:
        """The values that must never be logged: the key and every header value."""
        values = [value for _, value in self.headers]
        return values if self.api_key is None else [self.api_key, *values]


ClientFactory = Callable[[LLMEndpoint], LLMClient]
"""``client_factory(endpoint) -> LLMClient``: builds an agent's model client (called on
the event loop that will use it)."""


def openai_client(endpoint: LLMEndpoint) -> OpenAICompatibleClient:
    """The default client: the official ``openai`` SDK on ``endpoint``."""
    # Imported when a client is made: defining an agent does not load the SDK.
    from reactq.worker.agent.llm.openai_client import OpenAICompatibleClient

    return OpenAICompatibleClient(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key,
        timeout=endpoint.timeout,
        max_retries=endpoint.max_retries,
        headers=dict(endpoint.headers),
    )


class ClientCache:
    """Model clients for a process's agents: one per (factory, endpoint), shared.

    ``shards`` > 1 spreads each endpoint's calls over that many clients
    (``LLMClientPool``). Every key and header value it resolves is added to the log
    redaction, whatever the name of the variable it came from.
    """

    def __init__(self, shards: int = 1) -> None:
        self.shards = max(1, shards)
        self._clients: dict[Hashable, LLMClient] = {}

    def for_agent(self, agent: Agent, settings: Settings) -> list[LLMClient]:
        """The agent's clients: its own first, then one per fallback model, in order."""
        factory: ClientFactory = agent.client_factory or openai_client
        out = []
        for endpoint in agent.endpoints(settings):
            redact_also(*endpoint.secrets())
            key = (factory, endpoint)
            if key not in self._clients:
                built = [factory(endpoint) for _ in range(self.shards)]
                self._clients[key] = built[0] if len(built) == 1 else LLMClientPool(built)
            out.append(self._clients[key])
        return out

    def clients(self) -> list[LLMClient]:
        """Every client made so far."""
        return list(self._clients.values())

    async def aclose(self) -> None:
        """Close every client that can be closed."""
        for client in self._clients.values():
            close = getattr(client, "aclose", None)
            if close is not None:
                await close()


def check_rate_limit(value: object) -> None:
    """ValueError unless ``value`` is a RateLimit or None."""
    if value is not None and not isinstance(value, RateLimit):
        raise ValueError(
            f"rate_limit must be a RateLimit(requests_per_minute=..., tokens_per_minute=...) "
            f"or None, got {value!r}"
        )


def header_items(
    headers: Mapping[str, str] | Iterable[tuple[str, str]] | None,
) -> tuple[tuple[str, str], ...]:
    """``headers`` (a mapping, or pairs) as sorted pairs, hashable; ValueError for a name
    or a value that is not a string."""
    if headers is None:
        return ()
    if isinstance(headers, str | bytes) or not isinstance(headers, Mapping | Iterable):
        raise ValueError(f"headers must be a mapping of header name to value, got {headers!r}")
    try:
        pairs: dict[Any, Any] = dict(headers)  # checked below
    except (TypeError, ValueError):
        raise ValueError(
            f"headers must be a mapping of header name to value, got {headers!r}"
        ) from None
    for name, value in pairs.items():
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise ValueError(f"headers must map non-empty names to string values, got {name!r}")
    return tuple(sorted(pairs.items()))
