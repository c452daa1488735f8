"""``orchestrator status`` without a running orchestrator: the runs the database has as live and the recent ones
(the memory part is the command's to add: memory is a layer above this one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.core.states import UNFINISHED
from orchestrator.core.view import RunView
from orchestrator.intake.names import WAITING, held_counts
from orchestrator.store import Store

RECENT_RUNS = 20


def recorded(root: Path) -> dict[str, Any]:
    """The status of ``root`` as last recorded, in the shape of a live one (``running`` false, no pid)."""
    db = root / ".orchestrator" / "state.db"
    snap: dict[str, Any] = {
        "running": False,
        "pid": None,
        "root": str(root),
        "runs": [],
        "recent": [],
        "held": held_counts(root),
        "waiting": held_counts(root, WAITING),  # the questions themselves are the running orchestrator's to say
    }
    if db.exists():
        store = Store(db, readonly=True)
        try:
            snap["runs"] = [RunView.from_row(r).to_json() for r in store.runs_in_states(s.value for s in UNFINISHED)]
            snap["recent"] = [RunView.from_row(r).to_json() for r in store.recent_runs(RECENT_RUNS)]
        finally:
            store.close()
    return snap
