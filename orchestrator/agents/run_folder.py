"""A run's folder under ``.orchestrator/runs/``: what the agents layer leaves there for one run, removed when it ends.

Its keepers' exit records, an SDK runner's sockets, the tells kept for a turn's end and a batch's memo list are
spent once the run has ended; an SDK run's transcript, event logs and result files stay (``retention`` removes
them), and with them the folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.agents import memo_list, told

SPENT_SUFFIXES = (".exit", ".sock", told.SUFFIX, told.SUFFIX + told.PARTIAL)


def remove_spent(folder: Path) -> None:
    """The run's spent files, then its folder unless something else (a transcript) lives there; never raises."""
    try:
        for name in os.listdir(folder):
            if name.endswith(SPENT_SUFFIXES) or name == memo_list.FILE_NAME:
                (folder / name).unlink(missing_ok=True)
        os.rmdir(folder)
    except OSError:
        pass  # not there, or it holds a transcript
