"""``orchestrator status``: live state through the control channel, else what the database recorded."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.control import channel as control
from orchestrator.core.errors import NotRunningError
from orchestrator.core.states import UNFINISHED
from orchestrator.core.view import RunView
from orchestrator.intake.catalog import held_counts
from orchestrator.memory import status as memory_status
from orchestrator.store import Store

RECENT_RUNS = 20


def _recent(data: Mapping[str, Any]) -> RunView:
    """A finished run of a live snapshot: a database row (``memo_ids``, ``log_path``) or already a view's JSON."""
    return RunView.from_row(data) if "memo_ids" in data else RunView.of(data)


def collect(root: Path) -> dict[str, Any]:
    """The status of ``root`` as the JSON of ``status --json``; every run in it has the keys of ``RunView.to_json``."""
    try:
        snap = control.call(root, "status", timeout=10)
        snap["runs"] = [RunView.of(r).to_json() for r in snap.get("runs", [])]
        snap["recent"] = [_recent(r).to_json() for r in snap.get("recent", [])]
        snap["held"] = held_counts(root)
        return snap
    except NotRunningError:
        pass
    db = root / ".orchestrator" / "state.db"
    snap = {"running": False, "pid": None, "root": str(root), "runs": [], "recent": [], "held": held_counts(root)}
    if db.exists():
        store = Store(db, readonly=True)
        try:
            snap["runs"] = [RunView.from_row(r).to_json() for r in store.runs_in_states(s.value for s in UNFINISHED)]
            snap["recent"] = [RunView.from_row(r).to_json() for r in store.recent_runs(RECENT_RUNS)]
        finally:
            store.close()
    snap["memory"] = memory_status.offline(root)
    return snap
