"""What a turn carries beside its message: metadata, context and overrides, checked.

The producer checks them before anything is enqueued; the worker checks overrides
again against the agent it actually runs (a registry announcement may be older than
the worker's code), so a turn never runs with a knob its agent does not allow.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic import NonNegativeInt, PositiveFloat, PositiveInt, TypeAdapter, ValidationError
from pydantic_core import to_json

from reactq.shared.errors import (
    ContextTooLargeError,
    InvalidContextError,
    InvalidMetadataError,
    InvalidOverrideError,
    InvalidTextError,
    OverrideNotAllowedError,
)
from reactq.shared.text_checks import MAX_JSON_DEPTH, nesting_over, unencodable_at

__all__ = ["OVERRIDABLE", "check_context", "check_metadata", "check_overrides", "check_text"]

OVERRIDABLE: dict[str, TypeAdapter[Any]] = {
    "model": TypeAdapter(str),
    "temperature": TypeAdapter(float | None),
    "max_tokens": TypeAdapter(PositiveInt | None),
    "reasoning_effort": TypeAdapter(str | None),
    "max_iterations": TypeAdapter(PositiveInt),
    "max_total_tokens": TypeAdapter(PositiveInt | None),
    "max_cost": TypeAdapter(PositiveFloat | None),
    "tool_timeout": TypeAdapter(PositiveFloat | None),
    "max_parallel_tools": TypeAdapter(PositiveInt),
    "repeat_call_limit": TypeAdapter(NonNegativeInt | None),
}
"""The loop knobs an agent may let a turn override (``Agent(overridable=...)``), each
with the shape of value it takes. The loop's own checks (a temperature in [0, 2], a
price for ``max_cost``'s model) run when the worker applies them."""


def _json_object(
    value: object, what: str, error: type[InvalidMetadataError | InvalidContextError]
) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise error(f"{what} must be a JSON object: a dict with string keys")
    try:
        # pydantic's serialiser refuses what UTF-8 cannot carry (a lone surrogate), a value
        # JSON has no form for and a reference cycle. The turn's own model_dump_json would
        # write a lone surrogate in a key as invalid UTF-8 that no worker can read.
        to_json(value)
    except ValueError as exc:
        reason = str(exc).removeprefix("Error serializing to JSON: ")[:300]
        raise error(f"{what} cannot be sent as JSON: {reason}") from None
    if nesting_over(value):
        # Within what pydantic serialises, but a listing showing it nests deeper still.
        raise error(f"{what} nests deeper than {MAX_JSON_DEPTH} levels: flatten it")
    return value


def check_text(value: object, what: str) -> None:
    """Refuse ``value`` (any JSON value: its str keys and values, however deep) when it
    holds text UTF-8 cannot carry: InvalidTextError, ``field`` naming where
    (``what.tags[2]``). Such text stored would fail every reader later (a listing, the
    next request to the model)."""
    where = unencodable_at(value, what)
    if where is not None:
        raise InvalidTextError(
            f"{where} holds a lone surrogate, which UTF-8 cannot carry: send valid Unicode text",
            field=where,
        )


def check_metadata(metadata: object) -> dict[str, Any]:
    """The turn's metadata (``{}`` for None) if it travels as JSON, else
    InvalidMetadataError."""
    return _json_object(metadata, "metadata", InvalidMetadataError)


def check_context(context: object, max_bytes: int) -> dict[str, Any]:
    """The turn's context (``{}`` for None) if it travels as JSON within ``max_bytes``,
    else InvalidContextError / ContextTooLargeError."""
    found = _json_object(context, "context", InvalidContextError)
    size = len(to_json(found))
    if size > max_bytes:
        raise ContextTooLargeError(
            f"the context is {size} bytes as JSON, over the limit of {max_bytes} "
            "(REACTQ_MAX_CONTEXT_BYTES): pass ids and look the rest up in the tool",
            size=size,
            limit=max_bytes,
        )
    return found


def check_overrides(overrides: object, allowed: Collection[str], agent: str) -> dict[str, Any]:
    """The turn's overrides (``{}`` for None), each a field ``allowed`` lists with a value
    of its shape; else OverrideNotAllowedError or InvalidOverrideError naming the field."""
    if overrides is None:
        return {}
    if not isinstance(overrides, dict) or not all(isinstance(key, str) for key in overrides):
        raise InvalidOverrideError("overrides must be a dict of field names to values")
    out: dict[str, Any] = {}
    for name, value in overrides.items():
        if name not in allowed:
            shown = ", ".join(sorted(allowed)) or "none"
            raise OverrideNotAllowedError(
                f"agent {agent!r} does not allow a turn to override {name!r} "
                f"(it allows: {shown}); list it in Agent(overridable=...)",
                field=name,
                agent=agent,
            )
        adapter = OVERRIDABLE.get(name)
        if adapter is None:
            raise OverrideNotAllowedError(
                f"{name!r} cannot be overridden per turn; overridable fields: "
                f"{', '.join(sorted(OVERRIDABLE))}",
                field=name,
                agent=agent,
            )
        try:
            out[name] = adapter.validate_python(value, strict=False)
        except ValidationError as exc:
            reason = exc.errors(include_url=False)[0]["msg"]
            raise InvalidOverrideError(
                f"override {name!r} = {value!r:.60}: {reason}", field=name, agent=agent
            ) from None
    return out
