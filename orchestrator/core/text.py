"""Text that every UTF-8 stream and SQLite accept, from names that may not be UTF-8."""

from __future__ import annotations


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
