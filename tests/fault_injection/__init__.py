"""Test-only fault injection into a real ``orchestrator up``: the one fault is in ``sitecustomize.py`` beside this."""

from __future__ import annotations

import os
from pathlib import Path

FOLDER = Path(__file__).parent


def fault_injection(**faults: str) -> dict[str, str]:
    """Environment for ``Project.up``: this folder first on PYTHONPATH, and the fault variables given."""
    paths = [str(FOLDER), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {"PYTHONPATH": os.pathsep.join(paths), **faults}
