"""Durations as people write them (``500ms``, ``5s``, ``30m``, ``1h``, ``2d``), parsed with the standard library.

Apart from the pydantic types of ``units`` (which takes them from here) so that a client command (``stop --timeout 5m``) reads a
duration without loading pydantic.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing's flag without importing typing: see tests/test_client_imports.py
if TYPE_CHECKING:
    from typing import Any

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
DURATION_EXPECTED = "a duration such as 5s, 500ms, 30m or a number of seconds"
LONGEST = 36500 * 86400.0  # 100 years


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string with a unit (``500ms``, ``5s``, ``30m``, ``1h``), at most ``LONGEST``."""
    if isinstance(value, bool):
        raise ValueError(f"expected {DURATION_EXPECTED}, got {str(value).lower()}")
    if isinstance(value, (int, float)):
        if value != value:  # YAML's .nan: no comparison holds, so every timer would fire at once
            raise ValueError(f"expected {DURATION_EXPECTED}, got .nan")
        if value < 0:
            raise ValueError(f"expected a duration that is not negative, got {value!r}")
        return _bounded(float(value), value)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return _bounded(float(match.group(1)) * UNITS[match.group(2) or "s"], value)
    raise ValueError(f"expected {DURATION_EXPECTED}, got {value!r}")


def _bounded(seconds: float, given: Any) -> float:
    """``seconds``, unless beyond ``LONGEST`` (``.inf`` included): a time that far overflows the dates it is added to,
    at the first retry or wake, long after the file was checked."""
    if seconds > LONGEST:
        raise ValueError(f"expected a duration of at most 100 years (36500d), got {given!r}")
    return seconds


def duration_argument(text: str) -> float:
    """A command line's duration (argparse's ``type``): ``900``, ``15m``; refused in argparse's one line."""
    import argparse

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
