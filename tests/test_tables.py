"""`status` draws its tables and long lines without rich: the text must be rich's, cell for cell.

Each case is drawn twice, by ``orchestrator.tables`` and by rich (which the live view still uses), at the
widths of a pipe and of small and large terminals; cells mix short words, long words that are cut with an
ellipsis, runs of spaces and wide characters (not combining marks: rich pads a cell holding one a column too
wide, which is not worth copying).
"""

from __future__ import annotations

import io
import random

import pytest
from rich.console import Console as RichConsole
from rich.table import Table as RichTable

from orchestrator import tables
from orchestrator.control import status_view

WORDS = ["a", "bb", "builder", "B-031", "running", "x" * 40, "y" * 200, "three articles", "", "0.0123"]
WORDS += ["exit code 3", "Bash | Read", "  spaced  out ", "ü", "日本語テキスト"]


def rich_text(part: str | tables.Table, width: int) -> str:
    out = io.StringIO()
    if isinstance(part, tables.Table):
        table = RichTable(title=part.title, title_justify="left")
        for header in part.columns:
            table.add_column(header)
        for row in part.rows:
            table.add_row(*row)
        RichConsole(file=out, width=width).print(table)
    else:
        RichConsole(file=out, width=width).print(part)
    return out.getvalue()


def plain_text(part: str | tables.Table, width: int) -> str:
    return "".join(line + "\n" for line in tables.render([part], width))


@pytest.mark.parametrize("seed", range(2))
def test_tables_and_lines_are_drawn_as_rich_draws_them(seed: int) -> None:
    rng = random.Random(seed)

    def cell() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4)))

    for _ in range(100):
        width = rng.choice([12, 20, 40, 80, 120, 160])
        table = tables.Table(rng.choice(["current runs", "recent", "a long title " * 5]))
        for _ in range(rng.randint(1, 9)):
            table.add_column(rng.choice(["run", "role", "memo", "elapsed / next", "subject / activity", "cost $"]))
        for _ in range(rng.randint(1, 4)):
            table.add_row(*(cell() for _ in table.columns))
        line = " ".join(cell() for _ in range(rng.randint(0, 40)))
        for part in (table, line):
            assert plain_text(part, width) == rich_text(part, width), (width, part)


def test_the_status_view_is_the_text_rich_drew() -> None:
    run = {"run_id": 7, "role": "builder", "memo": "b.md", "memo_id": "B-1", "memos": ["b.md"], "state": "running"}
    run |= {"subject": "three articles " * 12, "pid": 4242, "attempt": 1, "elapsed": 12.4, "activity": "Bash"}
    failed = {"run_id": 3, "role": "pm", "memo": "a.md", "state": "failed", "exit_code": 3, "input_tokens": 10}
    failed |= {"ended_at": "2026-11-30T09:10:01.000+01:00", "reason": "exit code 3", "log_pruned_at": "2026-12-01"}
    snap = {"running": True, "pid": 99, "root": "/team", "ending": "graceful", "runs": [run], "recent": [failed]}
    snap |= {"queued": {f"role{n}": n for n in range(40)}, "held": {"pm": 2}, "memory": {"unavailable": "locked"}}
    parts = status_view.status_view(snap)
    assert [type(p) for p in parts].count(tables.Table) == 2
    for width in (60, 160):
        assert "".join(plain_text(p, width) for p in parts) == "".join(rich_text(p, width) for p in parts)
    out = io.StringIO()
    status_view.print_status(snap, out)  # not a terminal: 160 wide
    assert out.getvalue() == "".join(rich_text(p, 160) for p in parts)
    assert out.getvalue().splitlines()[0] == "orchestrator running for /team (pid 99), ENDING (graceful)"
