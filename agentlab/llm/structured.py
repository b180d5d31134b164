"""Structured output: normalise ``response_format``, validate replies, cache schemas.

``response_format`` may be a pydantic model class, a JSON-schema dict, or an OpenAI-style
``{"type": "json_schema", "json_schema": {...}}`` dict. Schemas are computed once per model
class (AgentScope regenerated the schema on every reply).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentlab.errors import ConfigError, StructuredOutputError

__all__ = ["OutputSpec", "output_spec", "validate_schema"]


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """A normalised response format: its JSON schema, name, and pydantic model if any."""

    schema: dict[str, Any]
    name: str
    model: Any = None  # pydantic BaseModel subclass, or None for plain schemas

    def parse(self, text: str) -> Any:
        """Validate ``text`` → pydantic object (model) or plain JSON value (schema).

        Raises:
            StructuredOutputError: with ``raw`` = text and ``errors`` describing why.
        """
        if self.model is not None:
            from pydantic import ValidationError

            try:
                return self.model.model_validate_json(text)
            except ValidationError as exc:
                raise StructuredOutputError(
                    f"reply does not match {self.name}: {exc.error_count()} error(s)",
                    raw=text,
                    errors=exc.errors(include_url=False),
                ) from None
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise StructuredOutputError(
                f"reply is not valid JSON for {self.name}: {exc}", raw=text, errors=[str(exc)]
            ) from None
        errors = validate_schema(value, self.schema)
        if errors:
            raise StructuredOutputError(
                f"reply does not match {self.name}: {errors[0]}", raw=text, errors=errors
            )
        return value

    def to_openai(self) -> dict[str, Any]:
        """The ``response_format`` parameter for OpenAI-compatible providers."""
        return {
            "type": "json_schema",
            "json_schema": {"name": self.name, "schema": self.schema, "strict": False},
        }


_CACHE: dict[Any, OutputSpec] = {}


def output_spec(response_format: Any) -> OutputSpec | None:
    """Normalise a ``response_format`` argument (cached per pydantic class).

    Raises:
        ConfigError: the value is neither a pydantic model class nor a schema dict.
    """
    if response_format is None:
        return None
    if isinstance(response_format, type):
        spec = _CACHE.get(response_format)
        if spec is None:
            schema_fn = getattr(response_format, "model_json_schema", None)
            if schema_fn is None:
                raise ConfigError(
                    f"response_format={response_format!r} is a class but not a pydantic "
                    "model; pass a BaseModel subclass or a JSON-schema dict"
                )
            spec = OutputSpec(schema_fn(), response_format.__name__, response_format)
            _CACHE[response_format] = spec
        return spec
    if isinstance(response_format, dict):
        if response_format.get("type") == "json_schema" and "json_schema" in response_format:
            inner = response_format["json_schema"]
            return OutputSpec(inner.get("schema", {}), str(inner.get("name", "schema")))
        if response_format.get("type") == "json_object":
            return OutputSpec(response_format.get("schema", {"type": "object"}), "json_object")
        return OutputSpec(response_format, str(response_format.get("title", "schema")))
    raise ConfigError(
        f"response_format must be a pydantic model class or a JSON-schema dict, "
        f"got {type(response_format).__name__}"
    )


_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def validate_schema(
    value: Any, schema: dict[str, Any], root: dict[str, Any] | None = None, path: str = "$"
) -> list[str]:
    """Check ``value`` against the JSON-schema subset the simulator produces.

    Returns a list of error strings (empty when valid). Not a full JSON-schema validator:
    it covers ``$ref``, ``anyOf``/``oneOf``, ``enum``, ``const``, ``type``, ``properties``,
    ``required``, ``items``, item counts, numeric bounds and string lengths.
    """
    root = schema if root is None else root
    while isinstance(schema.get("$ref"), str):
        node: Any = root
        for part in schema["$ref"][2:].split("/"):
            node = node[part]
        schema = node
    if "const" in schema and value != schema["const"]:
        return [f"{path}: expected {schema['const']!r}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{path}: {value!r} not one of {schema['enum']!r}"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            if any(not validate_schema(value, s, root, path) for s in schema[key]):
                return []
            return [f"{path}: matches none of {key}"]
    typ = schema.get("type")
    if typ is None:
        return []
    types = typ if isinstance(typ, list) else [typ]
    if not any(_is_type(value, t) for t in types):
        return [f"{path}: expected {typ}, got {type(value).__name__}"]
    errors: list[str] = []
    if isinstance(value, dict):
        for req in schema.get("required", []):
            if req not in value:
                errors.append(f"{path}: missing required {req!r}")
        for k, sub in schema.get("properties", {}).items():
            if k in value:
                errors += validate_schema(value[k], sub, root, f"{path}.{k}")
    elif isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", 1e18):
            errors.append(f"{path}: {len(value)} items outside bounds")
        for i, item in enumerate(value):
            errors += validate_schema(item, schema.get("items", {}), root, f"{path}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > maximum {schema['maximum']}")
    elif isinstance(value, str) and not (
        schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", 1e18)
    ):
        errors.append(f"{path}: string length {len(value)} outside bounds")
    return errors


def _is_type(value: Any, t: str) -> bool:
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    py = _TYPES.get(t)
    if py is None:
        return True
    if py is dict or py is list or py is str or py is type(None):
        return isinstance(value, py)
    return isinstance(value, bool)
