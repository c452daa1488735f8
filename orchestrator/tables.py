"""Tables and long lines for people, drawn with the standard library the way rich draws them.

``orchestrator status`` is a client command: it must start without importing rich
(about 40 ms). This module lays out a table as rich's default ``Table`` does
(heavy head box, one space of padding, the title on the left, a column that is too
wide wrapped at its words and a word too long cut with ``…``) and wraps a long line
as ``Console.print`` does, so the text stays the same; only the colours of a terminal
are not drawn. ``tests/test_tables.py`` holds the two side by side.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable, Sequence

TYPE_CHECKING = False  # typing's flag without importing typing: see tests/test_client_imports.py
if TYPE_CHECKING:
    from typing import TextIO

NOT_A_TTY_WIDTH = 160  # tables piped into a file or a test keep their columns whole
_WORD = re.compile(r"\s*\S+\s*")
PADDING = 2  # one space either side of a cell


def char_width(char: str) -> int:
    """Cells a character takes on a terminal: 2 for wide East Asian ones, 0 for combining marks, else 1."""
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def cell_len(text: str) -> int:
    """Cells ``text`` takes on a terminal."""
    return len(text) if text.isascii() else sum(map(char_width, text))


def set_cell_size(text: str, width: int) -> str:
    """``text`` cut or padded with spaces to exactly ``width`` cells."""
    size = cell_len(text)
    if size <= width:
        return text + " " * (width - size)
    out, used = [], 0
    for char in text:
        w = char_width(char)
        if used + w > width:
            break
        out.append(char)
        used += w
    return "".join(out) + " " * (width - used)


def _chop(word: str, width: int) -> list[str]:
    """``word`` cut into pieces of at most ``width`` cells."""
    pieces: list[str] = []
    piece: list[str] = []
    used = 0
    for char in word:
        w = char_width(char)
        if piece and used + w > width:
            pieces.append("".join(piece))
            piece, used = [], 0
        piece.append(char)
        used += w
    pieces.append("".join(piece))
    return pieces


def _breaks(text: str, width: int, fold: bool) -> list[int]:
    """Where ``text`` breaks to fit ``width`` cells: at the start of a word that does not fit; a word wider than
    a line is folded across lines (``fold``) or left whole on its own line."""
    breaks: list[int] = []
    offset = 0
    for match in _WORD.finditer(text):
        start, word = match.start(), match.group(0)
        length = cell_len(word.rstrip())
        if width - offset >= length:
            offset += cell_len(word)
        elif length > width:
            if fold:
                pieces = _chop(word, width)
                for index, piece in enumerate(pieces):
                    if start:
                        breaks.append(start)
                    if index == len(pieces) - 1:
                        offset = cell_len(piece)
                    else:
                        start += len(piece)
            else:
                if start:
                    breaks.append(start)
                offset = cell_len(word)
        elif offset and start:
            breaks.append(start)
            offset = cell_len(word)
    return breaks


def _rstrip_end(line: str, width: int) -> str:
    """Trailing whitespace past ``width`` cells removed (whitespace within it stays)."""
    excess = len(line) - width
    if excess <= 0:
        return line
    trailing = len(line) - len(line.rstrip())
    return line[: len(line) - min(trailing, excess)] if trailing else line


def wrap(text: str, width: int, *, fold: bool = True, pad: bool = False) -> list[str]:
    """``text`` in lines of at most ``width`` cells: broken at words, a too long word folded (``fold``) or cut
    with ``…``; each line padded to ``width`` when ``pad``."""
    if text.isascii() and len(text) <= width and "\n" not in text:  # most cells: one line that fits as it is
        return [text + " " * (width - len(text)) if pad else text]
    out: list[str] = []
    for line in text.split("\n"):
        cuts = [0, *_breaks(line, width, fold), len(line)]
        for start, end in zip(cuts, cuts[1:], strict=False):
            part = _rstrip_end(line[start:end], width)
            if cell_len(part) > width:
                part = set_cell_size(part, width) if fold else set_cell_size(part, width - 1) + "…"
            elif pad:
                part = set_cell_size(part, width)
            out.append(part)
    return out


def _measure(text: str) -> tuple[int, int]:
    """The narrowest (its longest word) and widest (its longest line) a cell's text can be drawn."""
    if text.isascii() and text.isprintable():  # one line of one-cell characters: most cells
        return max(map(len, text.split()), default=len(text)), len(text)
    lines = text.splitlines()
    widest = max((cell_len(line) for line in lines), default=0)
    words = text.split()
    return (max(cell_len(w) for w in words) if words else widest), widest


def _reduce(total: int, ratios: list[int], maximums: list[int], values: list[int]) -> list[int]:
    """``values`` less ``total`` shared out by ``ratios``, each taking at most its maximum (rich's ratio_reduce)."""
    ratios = [ratio if most else 0 for ratio, most in zip(ratios, maximums, strict=True)]
    total_ratio = sum(ratios)
    if not total_ratio:
        return values[:]
    left = total
    out = []
    for ratio, most, value in zip(ratios, maximums, values, strict=True):
        if ratio and total_ratio > 0:
            taken = min(most, round(ratio * left / total_ratio))
            out.append(value - taken)
            left -= taken
            total_ratio -= ratio
        else:
            out.append(value)
    return out


def _collapse(widths: list[int], max_width: int) -> list[int]:
    """The widest columns narrowed, step by step down to the next widest, until the table fits ``max_width``."""
    excess = sum(widths) - max_width
    while sum(widths) and excess > 0:
        widest = max(widths)
        second = max((w for w in widths if w != widest), default=0)
        ratios = [1 if w == widest else 0 for w in widths]
        if not widest - second:
            break
        widths = _reduce(excess, ratios, [min(excess, widest - second)] * len(widths), widths)
        excess = sum(widths) - max_width
    return widths


class Table:
    """A table of text cells with a title, drawn as rich's default ``Table(title=..., title_justify="left")``."""

    def __init__(self, title: str = "") -> None:
        self.title = title
        self.columns: list[str] = []
        self.rows: list[list[str]] = []

    def add_column(self, header: str) -> None:
        self.columns.append(header)

    def add_row(self, *cells: str) -> None:
        self.rows.append([*cells, *[""] * (len(self.columns) - len(cells))])

    def _widths(self, max_width: int) -> list[int]:
        """Each column's width, padding included, borders not; together at most ``max_width`` where they can be."""
        cells = [[header, *(row[i] for row in self.rows)] for i, header in enumerate(self.columns)]
        widths = [min(max(_measure(c)[1] for c in column) + PADDING, max_width) or 1 for column in cells]
        if sum(widths) > max_width:
            widths = _collapse(widths, max_width)
            if sum(widths) > max_width:
                widths = _reduce(sum(widths) - max_width, [1] * len(widths), widths, widths)
        return widths

    def lines(self, width: int) -> list[str]:
        """The table drawn in at most ``width`` cells (wider only when even one cell a column cannot fit)."""
        widths = self._widths(width - len(self.columns) - 1)
        table_width = sum(widths) + len(self.columns) + 1
        out = wrap(self.title, table_width, pad=True) if self.title else []
        out.append("┏" + "┳".join("━" * w for w in widths) + "┓")
        out += self._row(self.columns, widths, "┃", bottom=True)
        out.append("┡" + "╇".join("━" * w for w in widths) + "┩")
        for row in self.rows:
            out += self._row(row, widths, "│")
        out.append("└" + "┴".join("─" * w for w in widths) + "┘")
        return out

    @staticmethod
    def _row(cells: Sequence[str], widths: Sequence[int], bar: str, bottom: bool = False) -> list[str]:
        """One row's lines; a cell shorter than the row is filled below (a header cell, ``bottom``: above)."""
        inner = [max(w - PADDING, 0) for w in widths]
        wrapped = [wrap(cell, w, fold=False, pad=True) if w > 0 else [""] for cell, w in zip(cells, inner, strict=True)]
        height = max(len(lines) for lines in wrapped)
        if bottom:
            wrapped = [[" " * w] * (height - len(lines)) + lines for lines, w in zip(wrapped, inner, strict=True)]
        return [
            bar
            + bar.join(
                f" {lines[i] if i < len(lines) else ' ' * w} "[: w + PADDING] if w else " " * outer
                for lines, w, outer in zip(wrapped, inner, widths, strict=True)
            )
            + bar
            for i in range(height)
        ]


def width_of(stream: TextIO, is_tty: bool) -> int:
    """How wide to draw for ``stream``: a terminal's width (``$COLUMNS`` first, as rich), else ``NOT_A_TTY_WIDTH``."""
    if not is_tty:
        return NOT_A_TTY_WIDTH
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 80


def render(parts: Iterable[str | Table], width: int) -> list[str]:
    """The lines of ``parts``: each string wrapped at ``width`` as ``Console.print`` wraps it, each table drawn."""
    out: list[str] = []
    for part in parts:
        out += part.lines(width) if isinstance(part, Table) else wrap(part, width)
    return out
