"""What ``status`` and the live view show of a running orchestrator: one typed snapshot, JSON on the wire.

The supervisor assembles it from its own parts (the runs, the queues, the limits, holds and pauses) plus each
extension's ``snapshot`` (``features``: the top-level keys a feature adds, such as ``wakes``); the live view
draws it and ``status --json`` prints ``to_json``. The light snapshot (``recent`` and ``longest_stop`` left
out) never touches the database: the live view takes one several times a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.view import RunView


@dataclass(frozen=True)
class Snapshot:
    """A running orchestrator at one moment."""

    pid: int
    root: str
    started_at: str
    ending: str | None
    recovery: dict[str, Any] | None
    runs: list[RunView]
    nodes: dict[str, str]  # run id -> the node its agent runs on (agents that run elsewhere: executor ray)
    queued: dict[str, int]
    queued_memos: dict[str, list[str]]
    pending: int
    max_concurrent: int
    running: int
    crash_counts: dict[str, int]
    budget_blocks: dict[str, str]
    holds: dict[str, dict[str, str]]
    paused: dict[str, Any]
    events: list[str]
    features: dict[str, Any] = field(default_factory=dict)  # the extensions' own keys
    recent: list[RunView] | None = None  # the recent finished runs (full snapshot only)
    longest_stop: float | None = None  # the longest a graceful ending can take, for ``stop --wait`` (full only)

    def to_json(self) -> dict[str, Any]:
        """The snapshot as ``status --json`` prints it."""
        out: dict[str, Any] = {
            "running": True,
            "pid": self.pid,
            "root": self.root,
            "started_at": self.started_at,
            "ending": self.ending,
            "recovery": self.recovery,
            "runs": [run.to_json() for run in self.runs],
            "nodes": self.nodes,
            "queued": self.queued,
            "queued_memos": self.queued_memos,
            "pending": self.pending,
            "limits": {"max_concurrent": self.max_concurrent, "running": self.running},
            "crash_counts": self.crash_counts,
            "budget_blocks": self.budget_blocks,
            "holds": self.holds,
            "paused": self.paused,
            **self.features,
            "events": self.events,
        }
        if self.recent is not None:
            out["recent"] = [run.to_json() for run in self.recent]
        if self.longest_stop is not None:
            out["longest_stop"] = self.longest_stop
        return out
