"""How the gateway answers errors: always an ``ErrorBody`` with a stable code.

Caller errors of ``shared.errors`` map to statuses here; anything unexpected is
a 500 that says nothing about the request (the detail goes to the log).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from reactq.producer.gateway.models import ErrorBody, FieldError
from reactq.shared.errors import (
    AgentMismatchError,
    ContextTooLargeError,
    EmptyMessageError,
    InvalidContextError,
    InvalidMessageError,
    InvalidMetadataError,
    InvalidOverrideError,
    InvalidSessionIdError,
    InvalidTextError,
    InvalidTurnError,
    MessageTooLargeError,
    OverrideNotAllowedError,
    ReactqError,
    ServiceUnavailableError,
    TurnRejectedError,
    UnknownAgentError,
    WebhookRefusedError,
)
from reactq.shared.text_checks import repair_json

logger = logging.getLogger(__name__)

_DESCRIPTIONS = {
    401: "No valid API key",
    404: "Not found",
    # A path parameter holding "/" can land on another route's path.
    405: "Method not allowed on that path",
    409: "Refused by the session's or the turn's state (a strategy rejected the turn, another "
    "agent owns the session, a call was decided already, the turn waits for no decision, "
    "the turn has finished: ``turn_finished``, a session to delete has a turn running: "
    "``session_busy``)",
    413: "The request body or the message is over its size limit",
    422: "Invalid input: ``field`` and ``errors`` say which and why (``invalid_json``: "
    "the body is not JSON)",
    501: "Not available in this version",
    503: "A service the gateway needs does not answer",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in _DESCRIPTIONS.items()
}
"""The error responses, for the OpenAPI document."""

SUBMIT_REFUSALS: dict[int | str, dict[str, Any]] = {
    413: {
        "model": ErrorBody,
        "description": "The request body is over REACTQ_MAX_REQUEST_BYTES, or the message over "
        "REACTQ_MAX_MESSAGE_BYTES (``field``: ``body.message``), or the context over "
        "REACTQ_MAX_CONTEXT_BYTES (``context_too_large``, ``body.context``)",
    },
    422: {
        "model": ErrorBody,
        "description": "Invalid input, including input the schema allows but the pool refuses: "
        "an agent no worker hosts (``field``: ``body.agent``), an empty or blank message "
        "(``empty_message``, ``body.message``), a body that is not JSON (``invalid_json``), "
        "metadata that does not serialise to JSON, such as a lone surrogate (``body.metadata``), "
        "an override the agent does not allow or a value its knob cannot take "
        "(``override_not_allowed``, ``invalid_override``, ``body.overrides``), "
        "a webhook URL that is not http(s) or not public (``webhook_refused``, ``body.webhook``), "
        "a session id of '.' or '..' (``path.session_id``); "
        "``field`` and ``errors`` say which and why",
    },
}
"""What a submit refuses beyond the schema's rules: a client (and a schema-driven
tester) must expect 422 and 413 for a body the schema accepts."""

# Caller errors of a submit -> (HTTP status, the field at fault).
_TURN_ERRORS: list[tuple[type[ReactqError], int, str | None]] = [
    (InvalidSessionIdError, 422, "path.session_id"),
    (EmptyMessageError, 422, "body.message"),
    (MessageTooLargeError, 413, "body.message"),
    (InvalidMessageError, 422, "body.message"),
    (InvalidMetadataError, 422, "body.metadata"),
    (ContextTooLargeError, 413, "body.context"),
    (InvalidContextError, 422, "body.context"),
    (OverrideNotAllowedError, 422, "body.overrides"),
    (InvalidOverrideError, 422, "body.overrides"),
    (UnknownAgentError, 422, "body.agent"),
    (AgentMismatchError, 409, "body.agent"),
    (WebhookRefusedError, 422, "body.webhook"),
    (InvalidTextError, 422, "body"),
    (InvalidTurnError, 422, None),
    (TurnRejectedError, 409, None),
]


class GatewayError(ReactqError):
    """An HTTP error the gateway answers as an ``ErrorBody``.

    ``status`` is the HTTP status and ``error_code`` the body's stable ``code``
    (``turn_not_found``, ``unauthorized``...); ``field`` names the input at fault.
    Message first, keywords after, like every ``ReactqError``, so it pickles.
    """

    code = "gateway_http_error"

    def __init__(
        self,
        message: str = "",
        *,
        status: int = 500,
        error_code: str = "internal_error",
        field: str | None = None,
        turn_id: str | None = None,
    ) -> None:
        super().__init__(
            message, status=status, error_code=error_code, field=field, turn_id=turn_id
        )
        self.status = status
        self.error_code = error_code
        self.field = field
        self.turn_id = turn_id

    def to_dict(self) -> dict[str, Any]:
        """The ``ErrorBody`` fields: the per-response code, message, field and turn."""
        body = {"code": self.error_code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        if self.turn_id is not None:
            body["turn_id"] = self.turn_id
        return body


class TextSafeJSONResponse(JSONResponse):
    """A JSON answer whose text UTF-8 cannot carry (a lone surrogate an older version
    stored, an error echoing a refused input) is repaired (U+FFFD) rather than failing
    to encode: the gateway's default response class, and every error body's."""

    def render(self, content: Any) -> bytes:
        """The body's bytes (``JSONResponse``'s, repaired only when they cannot encode)."""
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return super().render(repair_json(content))


ErrorShape = Callable[[int, ErrorBody], tuple[int, dict[str, Any]]]
"""How a protocol surface words an error: the status and reactq's ``ErrorBody`` in,
the status and body its clients parse out (OpenAI's ``{"error": {...}}`` with a 400
where reactq says 422, for one)."""


def error_shapes(app: FastAPI) -> dict[str, ErrorShape]:
    """The error shapes of ``app``'s protocol surfaces, by path prefix: each surface's
    ``install`` adds its own, and every error under that prefix is worded by it."""
    shapes: dict[str, ErrorShape] | None = getattr(app.state, "error_shapes", None)
    if shapes is None:
        shapes = app.state.error_shapes = {}
    return shapes


def shape_for(app: Any, path: str) -> ErrorShape | None:
    """The error shape of the surface ``path`` is under (None: reactq's ``ErrorBody``)."""
    state = getattr(app, "state", None)
    shapes: dict[str, ErrorShape] = getattr(state, "error_shapes", None) or {}
    for prefix, shape in shapes.items():
        if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
            return shape
    return None


def _json(
    status: int,
    body: ErrorBody,
    headers: dict[str, str] | None = None,
    request: Request | None = None,
) -> TextSafeJSONResponse:
    shape = shape_for(request.app, request.url.path) if request is not None else None
    content = body.model_dump(exclude_none=True)
    if shape is not None:
        status, content = shape(status, body)
    return TextSafeJSONResponse(content, status_code=status, headers=headers)


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in loc)


async def _gateway_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GatewayError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    body = ErrorBody(code=exc.error_code, message=exc.message, field=exc.field, turn_id=exc.turn_id)
    return _json(exc.status, body, headers, request)


def _invalid_json(reason: str, request: Request | None = None) -> JSONResponse:
    body = ErrorBody(
        code="invalid_json",
        message=f"the request body is not JSON: {reason}",
        field="body",
        errors=[FieldError(field="body", reason=reason)],
    )
    return _json(422, body, request=request)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    raw = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in raw):
        # FastAPI reports a body it could not parse at ``body.<offset>``.
        return _invalid_json(str(raw[0].get("msg", "JSON decode error")), request)
    errors = [FieldError(field=_field(e["loc"]), reason=e["msg"]) for e in raw]
    first = errors[0] if errors else None
    message = f"{first.field}: {first.reason}" if first else "invalid request"
    code = "invalid_request"
    if raw and tuple(raw[0]["loc"]) == ("body", "message") and raw[0]["type"] == "string_too_short":
        # The same word as a message of blanks (EmptyMessageError, from the producer).
        code, message = EmptyMessageError.code, "the message is empty: send some text"
    body = ErrorBody(
        code=code,
        message=message,
        field=first.field if first else None,
        errors=errors,
    )
    return _json(422, body, request=request)


_UNAVAILABLE = {
    "redis": "Redis does not answer; retry",
    "broker": "the broker does not answer; retry",
    "database": "the state store (REACTQ_DATABASE_URL) does not answer; retry",
}
"""What a caller is told of a service the producer could not reach: which, never its
URL (the log has the whole error)."""


def unavailable_message(exc: ServiceUnavailableError) -> str:
    """What a caller is told of ``exc``: which service does not answer, never its URL."""
    return _UNAVAILABLE.get(str(exc.details.get("service")), "a service does not answer; retry")


async def _reactq_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ReactqError)
    if isinstance(exc, ServiceUnavailableError):
        logger.warning("service unavailable: %s", exc.message)
        body = ErrorBody(code="unavailable", message=unavailable_message(exc))
        return _json(503, body, request=request)
    for cls, status, field in _TURN_ERRORS:
        if isinstance(exc, cls):
            if isinstance(exc, InvalidTextError) and exc.details.get("field"):
                # The field at fault is the first part of where the text was found.
                field = "body." + re.split(r"[.\[]", str(exc.details["field"]), maxsplit=1)[0]
            errors = [FieldError(field=field, reason=exc.message)] if field else []
            turn_id = exc.details.get("turn_id") if isinstance(exc, TurnRejectedError) else None
            body = ErrorBody(
                code=exc.code, message=exc.message, field=field, errors=errors, turn_id=turn_id
            )
            return _json(status, body, request=request)
    logger.exception("unexpected reactq error", exc_info=exc)
    return _json(500, ErrorBody(code=exc.code, message="internal error"), request=request)


async def _not_implemented(request: Request, exc: Exception) -> JSONResponse:
    body = ErrorBody(code="not_implemented", message=str(exc) or "not implemented")
    return _json(501, body, request=request)


async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    logger.warning("Redis unavailable: %s", exc)
    body = ErrorBody(code="unavailable", message=_UNAVAILABLE["redis"])
    return _json(503, body, request=request)


STORE_DOWN: tuple[type[Exception], ...] = (
    OSError,
    OperationalError,
    InterfaceError,
    DisconnectionError,
    PoolTimeoutError,
)
"""What a state store that does not answer raises: the driver's connection error (a
closed port is ConnectionRefusedError from asyncpg), a timeout (TimeoutError is an
OSError), or SQLAlchemy's wrapping of either."""


@contextlib.contextmanager
def state_store_errors() -> Iterator[None]:
    """Turn a state store that does not answer into a 503 ``GatewayError``, as Redis's
    errors are (a 500 would say the gateway is broken; it is waiting on a service)."""
    try:
        yield
    except ServiceUnavailableError as exc:
        if exc.details.get("service") != "database":
            raise
        logger.warning("state store unavailable: %s", exc.message)
        raise GatewayError(_UNAVAILABLE["database"], status=503, error_code="unavailable") from exc
    except STORE_DOWN as exc:
        # The class only, no traceback: an outage, not a bug (and a message may carry
        # the database URL).
        logger.warning("state store unavailable: %s", type(exc).__name__)
        raise GatewayError(_UNAVAILABLE["database"], status=503, error_code="unavailable") from exc


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        # FastAPI's word for a body it could not decode (not UTF-8, not JSON): invalid
        # input like any other, so 422 naming the body.
        return _invalid_json(str(exc.detail), request)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    body = ErrorBody(code=code, message=str(exc.detail))
    return _json(exc.status_code, body, dict(exc.headers or {}), request)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("gateway error on %s %s", request.method, request.url.path, exc_info=exc)
    return _json(500, ErrorBody(code="internal_error", message="internal error"), request=request)


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
