"""Text that every UTF-8 stream and SQLite accept, from names that may not be UTF-8; numbers SQLite accepts."""

from __future__ import annotations

# C0 and C1 controls (ESC, CSI, NEL, ...) but tab and line feed, and the Unicode line and paragraph separators
_ESCAPED = [c for c in [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029] if c not in (0x09, 0x0A)]
_CONTROL = str.maketrans({c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _ESCAPED})


def one_event(text: str) -> str:
    """A log line's text that reads as one event: control characters written ``\\x1b`` (a name cannot move the
    terminal's cursor or colour it), and a line break followed by an indent, so what a memo's name or an agent's
    words hold after it never starts a line of its own that looks like an event."""
    return text.translate(_CONTROL).replace("\n", "\n    ")


def printable(text: str) -> str:
    """``text`` as valid UTF-8: the bytes of a file name that are not UTF-8 written ``\\xff``.

    The same name always gives the same text, so a name's database rows are found again by the name.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate no file name holds: shown as its code point
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


SQLITE_MIN, SQLITE_MAX = -(2**63), 2**63 - 1  # SQLite's INTEGER: beyond, binding it raises OverflowError


def whole_number(text: str) -> int:
    """A command line's whole number (argparse's ``type``) that a query can take; a larger one is refused there, in
    argparse's one line, instead of by SQLite deep inside."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not SQLITE_MIN <= value <= SQLITE_MAX:
        raise argparse.ArgumentTypeError(f"{text} is out of range ({SQLITE_MIN} to {SQLITE_MAX})")
    return value
