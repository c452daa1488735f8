"""``orchestrator status``: live state through the control channel, else what the database recorded.

The live answer needs only the client and a count of held memos, both standard library: the
running orchestrator's snapshot already carries each run as ``RunView.to_json``. What was recorded
(``status_records``: the database's rows, the memory database, ``roles.yaml``) is read only when no
orchestrator answers.
"""

from __future__ import annotations

from orchestrator.control import client
from orchestrator.core.errors import NotRunningError, UnreachableError
from orchestrator.intake.names import held_counts

TYPE_CHECKING = False  # typing's flag without importing typing: see tests/test_client_imports.py
if TYPE_CHECKING:
    from typing import Any


def live(root: str) -> dict[str, Any]:
    """The running orchestrator's status of ``root``, with the held memos counted; ``NotRunningError`` if none."""
    snap = client.call(root, "status", timeout=10)
    snap["held"] = held_counts(root)
    return snap


def collect(root: str) -> dict[str, Any]:
    """The status of ``root`` as the JSON of ``status --json``; every run in it has the keys of ``RunView.to_json``."""
    try:
        return live(root)
    except UnreachableError:  # another user's (or a sandbox's): its records are no more ours to read than its socket
        raise
    except NotRunningError:
        pass
    # the record layer, loaded only now: no orchestrator runs, so the database and roles.yaml are what there is
    from pathlib import Path

    from orchestrator.control.status_records import recorded

    return recorded(Path(root))
