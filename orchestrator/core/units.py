"""The ground floor of every settings model: the strict base model, durations, rates and limits that ``off``
turns off.

It imports nothing of the project, so ``config``, the feature settings it is built from (``schedule``, ``memory``,
``retention``, ``agents/ray``, ``agents/sdk``) and the wire models can all stand on it without a circle.
``config.errors`` recognises the markers below (``DURATION``, ``OFF``, ``Expect``) to say in its one-line errors
what a key expects.
"""

from __future__ import annotations

import re
import types
from collections.abc import Collection
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    create_model,
)
from pydantic_core import PydanticCustomError, core_schema

from orchestrator.core.durations import (  # noqa: F401 - the durations are part of the units
    DURATION_EXPECTED,
    UNITS,
    parse_duration,
)


class Strict(BaseModel):
    """A settings or wire model: an unknown key is an error (a typo never passes silently), and a value once
    validated never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Expect:
    """What a key read by a parser of its own expects, in words, for the error wording:
    ``Annotated[tuple[int, float], BeforeValidator(parse_rate), Expect("a rate such as 20/h")]``."""

    text: str


#: marks a duration for the error wording; ``Duration`` is the type to use
DURATION = BeforeValidator(parse_duration)
Duration = Annotated[float, DURATION]

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*(ms|s|m|h|d)\s*$")
RATE_EXPECTED = "a rate such as 20/h or 5/30m (memos per window)"


def parse_rate(value: Any) -> tuple[int, float]:
    """``20/h`` or ``5/30m`` as (count, window in seconds)."""
    if isinstance(value, str):
        match = _RATE.match(value)
        if match and int(match.group(1)) >= 1:
            window = float(match.group(2) or 1) * UNITS[match.group(3)]
            if window > 0:
                return int(match.group(1)), window
    raise ValueError(f"expected {RATE_EXPECTED}, or off, got {value!r}")


def is_off(value: Any) -> bool:
    """``off`` as a person writes it in YAML: bare (read as false), quoted (``"off"``, any case) or null."""
    return value is None or value is False or (isinstance(value, str) and value.strip().lower() == "off")


def _off_or(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    if value is True:  # `on` or `yes` is no value for a limit (pydantic would read it as 1)
        raise PydanticCustomError("not_a_limit", "true is not a limit")
    return None if is_off(value) else handler(value)


#: a limit that ``off`` (or null) turns off: ``Annotated[int | None, OFF]``; the value is then None
OFF = WrapValidator(_off_or)


@dataclass(frozen=True)
class Shaped:
    """A mapping checked against ``shape`` where it is written, and kept as written (to be merged with defaults
    key by key later): ``Annotated[dict[str, Any] | None, Shaped(RetryPolicy)]``. An error names the inner key."""

    shape: type[BaseModel]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def _check(self, value: Any) -> Any:
        if value is not None:
            self.shape.model_validate(value)
        return value

    def __get_pydantic_json_schema__(self, _schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> Any:
        """In the JSON Schema, the shape's own keys (an editor completes and checks them), not any mapping."""
        return {"anyOf": [handler(self.shape.__pydantic_core_schema__), {"type": "null"}]}


def _admits_none(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(annotation)


def partial(
    model: type[BaseModel], name: str, doc: str, *, omit: Collection[str] = (), by_key: Collection[str] = ()
) -> type[Strict]:
    """``model`` with every key optional and None when not given: settings written in layers (a role over the
    team's ``defaults``) are checked where written and validated against ``model`` once merged.

    Each key keeps its declaration (bounds, parsers, ``Expect``), so a bad value is refused in the layer it is
    written in, with the same words. A key named in ``by_key`` whose type is a model is kept as the mapping
    written (checked against that model, ``Shaped``), so the layers can merge it key by key."""
    fields: dict[str, Any] = {}
    for key, info in model.model_fields.items():
        if key in omit:
            continue
        shape = info.annotation
        if key in by_key and isinstance(shape, type) and issubclass(shape, BaseModel):
            fields[key] = (Annotated[dict[str, Any] | None, Shaped(shape)], None)
            continue
        declared: Any = Annotated[(shape, *info.metadata)] if info.metadata else shape
        fields[key] = (declared if _admits_none(shape) else declared | None, None)
    made: type[Strict] = create_model(name, __base__=Strict, __doc__=doc, __module__=model.__module__, **fields)
    return made
