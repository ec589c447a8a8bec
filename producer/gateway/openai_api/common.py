"""What OpenAI's front doors share: a model name is a hosted agent, and an error is
worded as OpenAI words it.

``model`` is ``reactq/<agent>`` (as ``GET /v1/models`` lists it) or the agent's bare
name. An error under these routes is ``{"error": {"message", "type", "param",
"code"}}`` with the status the ``openai`` SDK maps to its exceptions (400
``BadRequestError`` where reactq says 422, 404 ``NotFoundError``, 401
``AuthenticationError``, 409 ``ConflictError``, 429 ``RateLimitError``, 5xx
``InternalServerError``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from reactq.producer.gateway.errors import GatewayError
from reactq.producer.gateway.models import ErrorBody
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
from reactq.shared.catalogue import AgentInfo

__all__ = [
    "MODEL_PREFIX",
    "OPENAI_ERRORS",
    "OpenAIError",
    "OpenAIErrorBody",
    "agent_of_model",
    "model_id",
    "openai_error",
    "visible_agents",
]

MODEL_PREFIX = "reactq/"
"""What ``GET /v1/models`` puts before an agent's name."""

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


class OpenAIError(BaseModel):
    """The ``error`` of an OpenAI error body."""

    model_config = ConfigDict(frozen=True)

    message: str
    type: str
    """``invalid_request_error``, ``authentication_error``, ``rate_limit_error``..."""
    param: str | None = None
    """The input at fault."""
    code: str | None = None
    """reactq's stable error code (``model_not_found``, ``invalid_request``...)."""


class OpenAIErrorBody(BaseModel):
    """An error as OpenAI's API answers it: ``{"error": {...}}``."""

    model_config = ConfigDict(frozen=True)

    error: OpenAIError


_ERROR_DESCRIPTIONS = {
    400: "Invalid input (``param`` names it)",
    401: "No valid API key",
    404: "No such model (``model_not_found``) or resource",
    409: "Refused by the session's or the turn's state",
    413: "The request body or the message is over its size limit",
    429: "Too many requests",
    501: "Not available in this version",
    503: "A service the gateway needs does not answer",
}
OPENAI_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": OpenAIErrorBody, "description": text}
    for code, text in _ERROR_DESCRIPTIONS.items()
}
"""The error responses of OpenAI's front doors, for the OpenAPI document."""


def openai_error(status: int, body: ErrorBody) -> tuple[int, dict[str, Any]]:
    """reactq's error as OpenAI's: the same message and code, ``param`` the field at
    fault (without ``body.``), and a 400 for input reactq refuses with a 422."""
    if status == 422:
        status = 400
    param = body.field.removeprefix("body.") if body.field else None
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return status, {
        "error": {"message": body.message, "type": kind, "param": param, "code": body.code}
    }


def model_id(agent: str) -> str:
    """The model id of ``agent`` as ``GET /v1/models`` lists it."""
    return MODEL_PREFIX + agent


async def visible_agents(gateway: Gateway, scope: KeyScope | None) -> list[AgentInfo]:
    """The agents the key may run, one entry a name (the live definition first)."""
    seen: dict[str, AgentInfo] = {}
    for info in sorted(await gateway.producer.agents(), key=lambda a: (a.name, not a.live)):
        if (scope is None or scope.may_run(info.name)) and info.name not in seen:
            seen[info.name] = info
    return list(seen.values())


async def agent_of_model(gateway: Gateway, model: str, scope: KeyScope | None) -> str:
    """The agent ``model`` names, else a 404 ``model_not_found`` (as for an agent no
    worker announced, one the key may not run is not there)."""
    name = model.removeprefix(MODEL_PREFIX)
    if name and any(info.name == name for info in await visible_agents(gateway, scope)):
        return name
    raise GatewayError(
        f"The model {model!r} does not exist: GET /v1/models lists the agents you can use",
        status=404,
        error_code="model_not_found",
        field="body.model",
    )
