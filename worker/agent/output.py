"""Structured output: an agent's ``output_type`` as a schema the model is asked for and
the final answer is checked against.

``OutputSpec.of`` takes a pydantic model class or a JSON Schema dict (an object
schema). NATIVE mode asks the provider for it (``response_format`` json_schema,
strict when the schema meets the strict rules: every object closed with
``additionalProperties: false`` and every property required); JSON and PROSE modes
teach it in their format section. ``validate`` takes the model's final text (plain
JSON, or a JSON object inside a code fence or prose) and returns the validated object
or raises ``InvalidOutputError`` with a message the model reads on its one retry.

A pydantic model validates with pydantic (the object returned is its JSON dump, with
defaults filled in). A schema dict is checked for the keywords that decide an object's
shape: ``type``, ``properties``, ``required``, ``additionalProperties``, ``items``,
``enum``, ``const``, ``anyOf`` / ``oneOf``, ``$ref`` into ``$defs``, and the length
and range bounds; other keywords reach the model but are not checked here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from reactq.shared.errors import InvalidOutputError
from reactq.worker.agent.modes import (
    EXAMPLE_HEADING,
    JSON_OUTPUT_FORMAT,
    PROSE_OUTPUT_FORMAT,
    ModeSettings,
    ToolMode,
)
from reactq.worker.agent.parsers import find_json_object

__all__ = ["OutputSpec", "OutputType"]

OutputType = type[BaseModel] | Mapping[str, Any]
"""What ``output_type=`` takes: a pydantic model class or a JSON Schema dict."""

_NAME_RE = re.compile(r"[^A-Za-z0-9_-]+")
_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}

# Without the worked example: its final answer is text, which the schema forbids.
JSON_STRUCTURED_FORMAT = JSON_OUTPUT_FORMAT.split(EXAMPLE_HEADING)[0].replace(
    '"answer": "<your answer to the user>"',
    '"answer": {<a JSON object matching the answer schema>}',
)
PROSE_STRUCTURED_FORMAT = PROSE_OUTPUT_FORMAT.split(EXAMPLE_HEADING)[0].replace(
    "Final Answer: <your answer to the user>",
    "Final Answer: <one JSON object matching the answer schema>",
)


@dataclass(frozen=True)
class OutputSpec:
    """An ``output_type`` resolved: its schema, its name and how to validate it."""

    schema: dict[str, Any]
    """The JSON Schema (an object schema)."""
    name: str
    """Its name for ``response_format`` (``[A-Za-z0-9_-]``, at most 64)."""
    model: type[BaseModel] | None
    """The pydantic model that validates it, or None for a schema dict."""

    @classmethod
    def of(cls, output_type: object) -> OutputSpec:
        """Resolve ``output_type``; ValueError names what it must be."""
        if isinstance(output_type, type) and issubclass(output_type, BaseModel):
            return cls(output_type.model_json_schema(), _name(output_type.__name__), output_type)
        if isinstance(output_type, Mapping) and not isinstance(output_type, type):
            schema = json.loads(json.dumps(output_type))  # a JSON copy: refuses non-JSON values
            if schema.get("type") != "object":
                raise ValueError(
                    'output_type must describe a JSON object: give the schema "type": "object"'
                )
            return cls(schema, _name(str(schema.get("title") or "output")), None)
        raise ValueError(
            f"output_type must be a pydantic model class or a JSON Schema dict, got {output_type!r}"
        )

    @property
    def strict(self) -> bool:
        """True when the schema meets the provider's strict rules (closed objects, every
        property required), so ``response_format`` may ask for strict decoding."""
        return _strict(self.schema)

    def response_format(self) -> dict[str, Any]:
        """The ``response_format`` of a NATIVE request."""
        return {
            "type": "json_schema",
            "json_schema": {"name": self.name, "schema": self.schema, "strict": self.strict},
        }

    def output_format(self, mode: ModeSettings) -> str:
        """A text mode's format section, asking for the final answer as this schema."""
        base = mode.output_format
        if base == JSON_OUTPUT_FORMAT:
            base = JSON_STRUCTURED_FORMAT
        elif base == PROSE_OUTPUT_FORMAT:
            base = PROSE_STRUCTURED_FORMAT
        return f"{base}\n\n{self._schema_text()}"

    def reminder(self, error: str, mode: ToolMode) -> str:
        """The message before the one retry of an answer that did not match."""
        how = {
            ToolMode.NATIVE: "Answer again with only the JSON object.",
            ToolMode.JSON: 'Answer again with {"action": "final", "answer": {...}}.',
            ToolMode.PROSE: "Answer again with Final Answer: followed by the JSON object.",
        }[mode]
        return f"Your final answer does not match the required schema: {error}. {how}\n\n" + (
            self._schema_text()
        )

    def validate(self, text: str) -> dict[str, Any]:
        """The validated object of a final answer; InvalidOutputError says what is wrong."""
        value = _decode(text)
        if self.model is not None:
            try:
                return self.model.model_validate(value).model_dump(mode="json")
            except ValidationError as exc:
                raise InvalidOutputError(_pydantic_errors(exc)) from None
        problem = _check(value, self.schema, self.schema, "$")
        if problem is not None:
            raise InvalidOutputError(problem)
        return value

    def _schema_text(self) -> str:
        schema = json.dumps(self.schema, ensure_ascii=False, separators=(",", ":"))
        return f"Your final answer must be a JSON object matching this JSON Schema: {schema}"


def _name(text: str) -> str:
    return _NAME_RE.sub("_", text).strip("_")[:64] or "output"


def _decode(text: str) -> dict[str, Any]:
    stripped = text.strip()
    try:
        value = json.loads(stripped)
    except ValueError:
        value = find_json_object(stripped)
    if not isinstance(value, dict):
        raise InvalidOutputError("the answer is not a JSON object")
    return value


def _pydantic_errors(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "the object"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def _strict(schema: Any) -> bool:
    if isinstance(schema, list):
        return all(_strict(s) for s in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return False
        if set(schema.get("required", ())) != set(properties):
            return False
    return all(_strict(v) for k, v in schema.items() if k not in ("enum", "const", "default"))


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part, {}) if isinstance(target, dict) else {}
    return target if isinstance(target, dict) else {}


def _check(value: Any, schema: Any, root: dict[str, Any], path: str) -> str | None:
    """The first way ``value`` breaks ``schema`` (at ``path``), or None."""
    if not isinstance(schema, dict):
        return None
    schema = _resolve(schema, root)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            if all(_check(value, option, root, path) is not None for option in options):
                return f"{path} matches none of the allowed schemas"
    if "const" in schema and value != schema["const"]:
        return f"{path} must be {schema['const']!r}"
    if isinstance(schema.get("enum"), list) and value not in schema["enum"]:
        return f"{path} must be one of {schema['enum']!r}"
    kinds = schema.get("type")
    if kinds is not None:
        names = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is(value, str(n)) for n in names):
            return f"{path} must be of type {' or '.join(str(n) for n in names)}"
    if isinstance(value, dict):
        return _check_object(value, schema, root, path)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            return f"{path} must have at least {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"{path} must have at most {schema['maxItems']} items"
        for index, item in enumerate(value):
            problem = _check(item, schema.get("items"), root, f"{path}[{index}]")
            if problem is not None:
                return problem
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return f"{path} must be at least {schema['minLength']} characters"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{path} must be at most {schema['maxLength']} characters"
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{path} must be >= {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{path} must be <= {schema['maximum']}"
    return None


def _check_object(
    value: dict[str, Any], schema: dict[str, Any], root: dict[str, Any], path: str
) -> str | None:
    properties = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            return f"{path}.{name} is required"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            problem = _check(item, properties[name], root, f"{path}.{name}")
        elif extra is False:
            problem = f"{path}.{name} is not allowed"
        else:
            problem = _check(item, extra, root, f"{path}.{name}")
        if problem is not None:
            return problem
    return None


def _is(value: Any, kind: str) -> bool:
    expected = _TYPES.get(kind)
    if expected is None:
        return True
    if isinstance(value, bool) and kind not in ("boolean",):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, expected)
