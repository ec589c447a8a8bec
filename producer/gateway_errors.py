"""How the gateway answers errors: always an ``ErrorBody`` with a stable code.

Caller errors of ``shared.errors`` map to statuses here; anything unexpected is
a 500 that says nothing about the request (the detail goes to the log).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from reactq.producer.gateway_models import ErrorBody, FieldError
from reactq.shared.errors import (
    AgentMismatchError,
    EmptyMessageError,
    InvalidSessionIdError,
    InvalidTurnError,
    MessageTooLargeError,
    ReactqError,
    TurnRejectedError,
    UnknownAgentError,
)

logger = logging.getLogger(__name__)

_DESCRIPTIONS = {
    401: "No valid API key",
    404: "Not found",
    # A path parameter holding "/" can land on another route's path.
    405: "Method not allowed on that path",
    409: "Refused by the session's state (a strategy rejected the turn, or another agent "
    "owns the session)",
    413: "The request body or the message is over its size limit",
    422: "Invalid input: ``field`` and ``errors`` say which and why",
    501: "Not available in this version",
    503: "A service the gateway needs does not answer",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in _DESCRIPTIONS.items()
}
"""The error responses, for the OpenAPI document."""

# Caller errors of a submit -> (HTTP status, the field at fault).
_TURN_ERRORS: list[tuple[type[ReactqError], int, str | None]] = [
    (InvalidSessionIdError, 422, "path.session_id"),
    (EmptyMessageError, 422, "body.message"),
    (MessageTooLargeError, 413, "body.message"),
    (UnknownAgentError, 422, "body.agent"),
    (AgentMismatchError, 409, "body.agent"),
    (InvalidTurnError, 422, None),
    (TurnRejectedError, 409, None),
]


class GatewayError(Exception):
    """An HTTP error with a stable code; the handler turns it into an ``ErrorBody``."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field


def _json(status: int, body: ErrorBody, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in loc)


async def _gateway_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GatewayError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return _json(
        exc.status, ErrorBody(code=exc.code, message=exc.message, field=exc.field), headers
    )


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [FieldError(field=_field(e["loc"]), reason=e["msg"]) for e in exc.errors()]
    first = errors[0] if errors else None
    message = f"{first.field}: {first.reason}" if first else "invalid request"
    body = ErrorBody(
        code="invalid_request",
        message=message,
        field=first.field if first else None,
        errors=errors,
    )
    return _json(422, body)


async def _reactq_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ReactqError)
    for cls, status, field in _TURN_ERRORS:
        if isinstance(exc, cls):
            errors = [FieldError(field=field, reason=exc.message)] if field else []
            turn_id = exc.details.get("turn_id") if isinstance(exc, TurnRejectedError) else None
            body = ErrorBody(
                code=exc.code, message=exc.message, field=field, errors=errors, turn_id=turn_id
            )
            return _json(status, body)
    logger.exception("unexpected reactq error", exc_info=exc)
    return _json(500, ErrorBody(code=exc.code, message="internal error"))


async def _not_implemented(request: Request, exc: Exception) -> JSONResponse:
    return _json(501, ErrorBody(code="not_implemented", message=str(exc) or "not implemented"))


async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    logger.warning("Redis unavailable: %s", exc)
    return _json(503, ErrorBody(code="unavailable", message="Redis does not answer; retry"))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        # FastAPI's word for a body it could not decode (not UTF-8, not JSON): invalid
        # input like any other, so 422 naming the body.
        body = ErrorBody(
            code="invalid_request",
            message=f"body: {exc.detail}",
            field="body",
            errors=[FieldError(field="body", reason=str(exc.detail))],
        )
        return _json(422, body)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return _json(
        exc.status_code, ErrorBody(code=code, message=str(exc.detail)), dict(exc.headers or {})
    )


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("gateway error on %s %s", request.method, request.url.path, exc_info=exc)
    return _json(500, ErrorBody(code="internal_error", message="internal error"))


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` as an ``ErrorBody``."""
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(ReactqError, _reactq_error)
    app.add_exception_handler(NotImplementedError, _not_implemented)
    app.add_exception_handler(RedisConnectionError, _unavailable)
    app.add_exception_handler(RedisTimeoutError, _unavailable)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)
