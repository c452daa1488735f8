"""Tells kept for the end of a turn, on disk beside the attempt's keeper record, so a restart of ``up`` finds them.

A program agent that runs one process a turn (Codex's ``exec``) takes a tell as a promise: its receipt says it is
queued for the end of the turn. The promise outlives the orchestrator: the list is written (whole, then renamed
into place) before the receipt is given, read back when the run is taken back after a restart, and removed just
before the next turn that carries it on starts; whatever is left when the run ends goes with the run's folder under
``.orchestrator/runs/`` (``run_folder``).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from orchestrator.agents.local import record_path
from orchestrator.agents.spec import LaunchSpec

SUFFIX = ".told"
PARTIAL = ".partial"  # a list being written, renamed into place once whole


def told_path(spec: LaunchSpec) -> Path:
    """Where the tells kept for this attempt's running turn are, beside its keeper's exit record."""
    return record_path(spec).with_suffix(SUFFIX)


def write(spec: LaunchSpec, told: list[str]) -> None:
    """Keep ``told`` for this attempt (none: the file is removed); raises ``OSError`` when it cannot be written,
    leaving what was kept before as it was."""
    path = told_path(spec)
    if not told:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    partial = path.with_name(path.name + PARTIAL)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(told, ensure_ascii=False), encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise


def read(spec: LaunchSpec) -> list[str]:
    """The tells kept for this attempt by an orchestrator before this one (none when there are none, or when what
    is there is not a list of texts: a file half-written by a crash is never put in place)."""
    try:
        told = json.loads(told_path(spec).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [text for text in told if isinstance(text, str)] if isinstance(told, list) else []
