"""``roles.yaml`` as a JSON Schema for editors, generated from its pydantic models (``config.TeamFile``), and
a loaded configuration as its effective values.

The models describe what a key holds after validation; a key whose validator takes something else (a
duration written ``30m``, a rate ``20/h``, ``off``) says what a person may write in ``INPUTS``, keyed by the
validator function's name, so the schema never rejects a file the orchestrator accepts. A test fails for
any before- or wrap-validator of the models that ``INPUTS`` does not name.

The repository keeps the schema at ``roles.schema.json``; regenerate it with ``make schema``
(``orchestrator config schema > roles.schema.json``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from orchestrator.config import ROLE_NAME, Config, TeamFile
from orchestrator.config.notify import url_shown

DIALECT = "https://json-schema.org/draft/2020-12/schema"
DURATION_PATTERN = r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*$"
RATE_PATTERN = r"^\s*\d+\s*/\s*(\d+(\.\d+)?)?\s*(ms|s|m|h|d)\s*$"
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _duration(inner: JsonSchemaValue) -> JsonSchemaValue:
    number = dict(inner)
    if "minimum" not in number and "exclusiveMinimum" not in number:
        number["minimum"] = 0
    text = {
        "type": "string",
        "pattern": DURATION_PATTERN,
        "description": "a duration: a number with a unit, such as 500ms, 5s, 30m, 1h or 1d (no unit: seconds)",
    }
    return {"anyOf": [number, text]}


def _rate(inner: JsonSchemaValue) -> JsonSchemaValue:
    text = {"type": "string", "pattern": RATE_PATTERN, "description": "memos per window, such as 20/h or 5/30m"}
    return {"anyOf": [text, {"const": "off"}, {"const": False}, {"type": "null"}]}


def _rate_text(value: Any) -> Any:
    """A default rate as a person writes it: (20, 3600.0) is ``20/h``."""
    if not (isinstance(value, tuple) and len(value) == 2):
        return value
    count, window = value
    unit = next((name for name, seconds in _UNIT_SECONDS.items() if seconds == window), None)
    return f"{count}/{unit}" if unit else f"{count}/{window:g}s"


@dataclass(frozen=True)
class Input:
    """What a person may write for a key whose validator reads more than its type: the schema built from the
    type's own, and how its default is written."""

    schema: Callable[[JsonSchemaValue], JsonSchemaValue]
    default: Callable[[Any], Any] = lambda value: value


def _off(inner: JsonSchemaValue) -> JsonSchemaValue:
    text = {"type": "string", "pattern": r"^\s*[oO][fF][fF]\s*$", "description": "off turns it off"}
    return {"anyOf": [inner, text, {"const": False}, {"type": "null"}]}


def _first(inner: JsonSchemaValue) -> JsonSchemaValue:
    return {"enum": ["now", "next"], "description": "when a task never done is first due (default: now)"}


def _keep(inner: JsonSchemaValue) -> JsonSchemaValue:
    return {"anyOf": [_duration({"type": "number", "exclusiveMinimum": 0}), {"const": "keep"}, {"type": "null"}]}


def _stall(inner: JsonSchemaValue) -> JsonSchemaValue:
    return _off(_duration({"type": "number"}))


INPUTS: dict[str, Input] = {
    "orchestrator.config.retention.parse_keep": Input(_keep, lambda value: "keep" if value is None else value),
    "orchestrator.core.durations.parse_duration": Input(_duration),
    "orchestrator.core.units._off_or": Input(_off, _rate_text),  # pair_rate: OFF wraps parse_rate
    "orchestrator.core.units.parse_rate": Input(_rate, _rate_text),
    "orchestrator.config.parse_stall": Input(_stall),  # stall_timeout: a duration or off
    "orchestrator.config.schedule._first": Input(_first),
}


def validator_name(function: Any) -> str:
    """``module.qualname`` of a validator function, the key of ``INPUTS``."""
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', repr(function))}"


def _input_of(schema: Any) -> Input | None:
    if isinstance(schema, dict) and schema.get("type") in ("function-before", "function-wrap", "function-plain"):
        return INPUTS.get(validator_name(schema["function"]["function"]))
    return None


class _RolesSchema(GenerateJsonSchema):
    """pydantic's generator, with the inputs of ``INPUTS`` in place of the validated types."""

    def function_before_schema(self, schema: core_schema.BeforeValidatorFunctionSchema) -> JsonSchemaValue:
        return self._as_written(schema, super().function_before_schema(schema))

    def function_wrap_schema(self, schema: core_schema.WrapValidatorFunctionSchema) -> JsonSchemaValue:
        return self._as_written(schema, super().function_wrap_schema(schema))

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        generated = super().default_schema(schema)
        found = _input_of(schema["schema"])
        if found is not None and "default" in generated:
            generated["default"] = found.default(schema.get("default"))
        return generated

    def _as_written(self, schema: Any, generated: JsonSchemaValue) -> JsonSchemaValue:
        found = _input_of(schema)
        return generated if found is None else found.schema(generated)


def roles_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``roles.yaml``."""
    generated = TeamFile.model_json_schema(schema_generator=_RolesSchema)
    generated["title"] = "orchestrator roles.yaml"
    generated["description"] = (
        "The team: which roles exist and how their agents run (docs/configuration.md has every key)."
    )
    generated["properties"]["roles"]["propertyNames"] = {"pattern": ROLE_NAME.pattern}
    return {"$schema": DIALECT, **generated}


def schema_text() -> str:
    """``roles_schema()`` as the file ``roles.schema.json`` holds it."""
    return json.dumps(roles_schema(), indent=2, ensure_ascii=False) + "\n"


def effective(config: Config) -> dict[str, Any]:
    """The configuration in force: defaults merged into every role, durations in seconds, rates as
    [count, window in seconds], ``null`` where a key is off or unset; a webhook's ``url`` as its scheme and host
    only (its path may hold a token)."""
    from orchestrator.agents.backends import stall_seconds

    values = config.model_dump(mode="json", by_alias=True)  # the keys as roles.yaml writes them (``copy``)
    for name, role in config.roles.items():  # in force: its backend's default when unset, null when off
        values["roles"][name]["stall_timeout"] = stall_seconds(role)
    for shown in values.get("notifications", []):
        if shown.get("url"):
            shown["url"] = url_shown(shown["url"])
    return values
