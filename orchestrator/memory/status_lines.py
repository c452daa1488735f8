"""The lines ``orchestrator status`` prints about memory, from the counts in its snapshot.

Apart from ``memory.status`` (which opens the memory database) so that the client
command prints them with the standard library alone.
"""

from __future__ import annotations

from typing import Any


def summary_of(layer: str) -> str:
    """The layer whose summary a waiting entry of ``layer`` needs."""
    return "weekly" if layer == "daily" else "monthly"


def lines(memory: dict[str, Any] | None) -> list[str]:
    """The text status's lines about memory (none when nothing waits)."""
    if not memory:
        return []
    if "unavailable" in memory:
        return [f"memory: unavailable: {memory['unavailable']}"]
    out = []
    for key, count in (memory.get("waiting_for_summary") or {}).items():
        layer, period = key.split(" ", 1)
        out.append(f"memory: {count} {layer} entries past retention wait for a {summary_of(layer)} summary of {period}")
    return out
