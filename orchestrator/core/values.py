"""The value types every settings module shares: durations and the limits that ``off`` turns off.

They live here, below ``config`` and the feature settings (``schedule``, ``memory``, ``agents/ray``) that
``config`` imports, so each can use them without a circle. ``config_errors`` recognises the markers below
(``DURATION``, ``OFF``) to say in its one-line errors what a key expects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, GetCoreSchemaHandler, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import PydanticCustomError, core_schema

from orchestrator.core.durations import (  # noqa: F401 - part of the shared value types
    DURATION_EXPECTED,
    UNITS,
    parse_duration,
)


@dataclass(frozen=True)
class Expect:
    """What a key read by a parser of its own expects, in words, for the error wording:
    ``Annotated[tuple[int, float], BeforeValidator(parse_rate), Expect("a rate such as 20/h")]``."""

    text: str


#: marks a duration for the error wording; ``Duration`` is the type to use
DURATION = BeforeValidator(parse_duration)
Duration = Annotated[float, DURATION]


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
