"""pydantic's validation errors of ``roles.yaml`` in the house wording.

One line per problem: ``FILE: full.key.path: expected WHAT, got FOUND``. What a key expects is read from the
model's own declaration (its type, bounds, ``Duration``, ``OFF``, a ``Shaped`` mapping), not from pydantic's
message, so no pydantic wording ("Input should be ...") ever reaches a person, and every error of one key
says the same thing whatever went wrong with it. What was found is the value as written in the file.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from orchestrator.core.units import DURATION, DURATION_EXPECTED, OFF, Expect, Shaped

_SCALARS: dict[type, tuple[str, str]] = {
    bool: ("true or false", "true or false values"),
    int: ("a whole number", "whole numbers"),
    float: ("a number", "numbers"),
    str: ("a string", "strings"),
}

# what a key expects when its declaration cannot be found: by pydantic's error type
_BY_ERROR_TYPE = {
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list",
    "dict_type": "a mapping of keys",
    "model_type": "a mapping of keys",
    "model_attributes_type": "a mapping of keys",
}
_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


class _Place:
    """Where an error's ``loc`` leads in the model: the key path a person wrote, and the declaration there."""

    def __init__(self, model: type[BaseModel], loc: Sequence[str | int]) -> None:
        self.keys: list[str | int] = []
        self.annotation: Any = model
        self.metadata: list[Any] = []
        self._union: tuple[Any, list[Any], int] | None = None  # the last union a member name chose from
        for part in loc:
            if isinstance(part, str) and part.startswith("function-"):  # a validator's name, not a key
                continue
            self._step(part)

    def _step(self, part: str | int) -> None:
        annotation, metadata = _unwrap(self.annotation, self.metadata)
        members = _union_members(annotation)
        if members:
            chosen = next((m for m in members if _tag(m) == part), None)
            if chosen is not None:  # pydantic names the member of a union it tried; it is no key of the file
                self._union = (annotation, metadata, len(self.keys))
                self.annotation, self.metadata = chosen, []
                return
        shape = next((m.shape for m in metadata if isinstance(m, Shaped)), None)
        self.keys.append(part)
        self.annotation, self.metadata = _inside(shape or annotation, part), []

    def expected(self) -> str | None:
        """What the key expects, in words; None when its declaration is unknown."""
        union = self._union
        if union is not None and union[2] == len(self.keys):  # the error is about the union as a whole
            return _describe(union[0], union[1])
        return _describe(self.annotation, self.metadata)


def _unwrap(annotation: Any, metadata: list[Any]) -> tuple[Any, list[Any]]:
    """Strip ``Annotated`` (keeping its metadata) and ``X | None``."""
    metadata = list(metadata)
    while True:
        if get_origin(annotation) is Annotated:
            annotation, *extra = get_args(annotation)
            for item in extra:
                metadata.extend(item.metadata if isinstance(item, FieldInfo) else [item])
            continue
        members = _union_members(annotation, keep_single=True)
        if members is not None and len(members) == 1:
            annotation = members[0]
            continue
        return annotation, metadata


def _union_members(annotation: Any, keep_single: bool = False) -> list[Any] | None:
    if get_origin(annotation) not in (Union, types.UnionType):
        return None
    members = [m for m in get_args(annotation) if m is not type(None)]
    return members if keep_single or len(members) > 1 else None


def _tag(member: Any) -> str:
    """The name pydantic gives a member of a union in an error's ``loc``."""
    if isinstance(member, type):
        return member.__name__
    origin = get_origin(member)
    if origin is not None and origin is not Annotated:
        inner = ",".join(_tag(arg) for arg in get_args(member))
        return f"{getattr(origin, '__name__', origin)}[{inner}]"
    return str(member)


def _inside(annotation: Any, part: str | int) -> Any:
    """The declaration one key (or list index) further in; None when it cannot be known."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(str(part))
        if field is None:
            return None
        return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin in (list, set, frozenset) and args:
        return args[0]
    if origin is tuple and args:
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
        return args[part] if isinstance(part, int) and part < len(args) else None
    return None


def _describe(annotation: Any, metadata: list[Any], plural: bool = False) -> str | None:
    annotation, metadata = _unwrap(annotation, metadata)
    shape = next((m.shape for m in metadata if isinstance(m, Shaped)), None)
    if shape is not None:
        annotation = shape
    own = next((m.text for m in metadata if isinstance(m, Expect)), None)
    least = next((m.min_length for m in metadata if isinstance(m, annotated_types.MinLen)), 0)
    if own is not None:
        text: str | None = own
    elif DURATION in metadata:
        bounds = _bounds(metadata, duration=True)
        text = "durations such as 5s, 500ms, 30m or numbers of seconds" if plural else DURATION_EXPECTED
        text = f"a duration{bounds} (such as 5s, 500ms, 30m or a number of seconds)" if bounds and not plural else text
    elif annotation in _SCALARS:
        text = _SCALARS[annotation][plural] + ("" if plural or annotation in (bool, str) else _bounds(metadata))
    elif get_origin(annotation) is Literal:
        choices = [str(choice) for choice in get_args(annotation)]
        text = choices[0] if len(choices) == 1 else ", ".join(choices[:-1]) + " or " + choices[-1]
    elif _union_members(annotation):
        parts = [_describe(m, [], plural) for m in _union_members(annotation) or []]
        text = None if None in parts else " or ".join(p for p in parts if p)
    elif (isinstance(annotation, type) and issubclass(annotation, BaseModel)) or get_origin(annotation) is dict:
        text = "mappings of keys" if plural else "a mapping of keys"
        text = ("non-empty " if plural else "a non-empty ") + text.removeprefix("a ") if least else text
    elif get_origin(annotation) in (list, tuple, set, frozenset):
        items = _describe(_inside(annotation, 0), [], plural=True)
        kind = (
            ("non-empty lists" if plural else "a non-empty list") if least == 1 else ("lists" if plural else "a list")
        )
        text = kind + (f" of at least {least} items" if least > 1 else "") + (f" of {items}" if items else "")
    else:
        return None
    if text is not None and OFF in metadata:
        text += ", or off"
    return text


def _bounds(metadata: list[Any], duration: bool = False) -> str:
    """`` >= 1``, `` from 0 to 20``; for a duration `` longer than 0``."""
    low = next((m for m in metadata if isinstance(m, (annotated_types.Gt, annotated_types.Ge))), None)
    high = next((m for m in metadata if isinstance(m, (annotated_types.Lt, annotated_types.Le))), None)
    if duration:
        words = []
        if low is not None:
            words.append(
                f"longer than {_number(low.gt)}"
                if isinstance(low, annotated_types.Gt)
                else f"of {_number(low.ge)}s or more"
            )
        if high is not None:
            limit = high.lt if isinstance(high, annotated_types.Lt) else high.le
            words.append(f"of at most {_number(limit)}s")
        return (" " + " and ".join(words)) if words else ""
    if isinstance(low, annotated_types.Ge) and isinstance(high, annotated_types.Le):
        return f" from {_number(low.ge)} to {_number(high.le)}"
    text = ""
    if low is not None:
        text += f" > {_number(low.gt)}" if isinstance(low, annotated_types.Gt) else f" >= {_number(low.ge)}"
    if high is not None:
        text += (" and" if text else "") + (
            f" < {_number(high.lt)}" if isinstance(high, annotated_types.Lt) else f" <= {_number(high.le)}"
        )
    return text


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def found(value: Any) -> str:
    """A value as a person wrote it, short: ``true``, ``null``, ``'5 minutes'``, ``[]``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _written(raw: Any, keys: Sequence[str | int]) -> tuple[bool, Any]:
    """The value at ``keys`` in the data as read from the file, if it is there."""
    for key in keys:
        if isinstance(raw, dict) and key in raw:
            raw = raw[key]
        elif isinstance(raw, list) and isinstance(key, int) and 0 <= key < len(raw):
            raw = raw[key]
        else:
            return False, None
    return True, raw


def _quoted(value: Any, message: str) -> bool:
    """Whether a validator's message already quotes what was written (or a word of it)."""
    return isinstance(value, str) and any(repr(word) in message for word in [value, *value.split()])


def _fallback(item: Any) -> str:
    """What was expected, from pydantic's error type alone (a declaration this module cannot read)."""
    kind, ctx = item["type"], item.get("ctx") or {}
    if kind in _BY_ERROR_TYPE:
        return _BY_ERROR_TYPE[kind]
    if kind in _BOUNDS:
        bound = next(iter(ctx.values()), "?")
        return f"{'a number' if isinstance(bound, float) else 'a whole number'} {_BOUNDS[kind]} {_number(bound)}"
    if kind == "literal_error":
        return f"one of {ctx.get('expected', '?')}"
    if kind == "too_short":
        return f"at least {ctx.get('min_length', 1)} item(s)"
    if kind == "too_long":
        return f"at most {ctx.get('max_length', '?')} item(s)"
    return "a value of another kind (see docs/configuration.md for this key)"


def describe_validation_error(
    path: Path | str, error: ValidationError, model: type[BaseModel], raw: Any, prefix: tuple[str, ...] = ()
) -> str:
    """One line per problem: ``path: key.path: expected ..., got ...``; ``raw`` is the data ``model`` was given."""
    lines: list[tuple[str, str]] = []
    for item in error.errors():
        place = _Place(model, typing.cast(Sequence[str | int], item["loc"]))
        key = ".".join(str(p) for p in (*prefix, *place.keys)) or "(top level)"
        kind = item["type"]
        if kind == "extra_forbidden":
            message = "unknown key; check its spelling against the list of keys in docs/configuration.md"
        elif kind == "missing":
            message = "required key is missing"
        else:
            there, value = _written(raw, place.keys)
            written = found(value if there else item.get("input"))
            if kind in ("value_error", "assertion_error"):  # our own validators' words
                message = item["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
                if "got " not in message and not _quoted(value, message):
                    message += f", got {written}"
            else:
                message = f"expected {place.expected() or _fallback(item)}, got {written}"
        entry = (key, f"{path}: {key}: {message}")
        if entry not in lines:
            lines.append(entry)
    # a union (such as system_prompt: a string or a mapping) fails once per member: keep the deepest, once per key
    keys = [key for key, _ in lines]
    kept: list[str] = []
    seen: set[str] = set()
    for key, line in lines:
        if key in seen or any(other.startswith(key + ".") for other in keys):
            continue
        seen.add(key)
        kept.append(line)
    return "\n".join(kept)
