"""The names of a project's attempts on a cluster: ``orch-<project>-<run id>-<attempt>``, in one namespace.

``<project>`` is a digest of the project root and of a random key kept in its state folder (``KEY_FILE``): two
projects at the same path on two machines (each container's ``/app``) share a cluster without sharing names, so one
never halts or takes over the other's attempts. Actors named before the key existed were named from the root alone:
a run of its own record is taken back under that name at any start (``candidates``), and the start that makes the
key also halts the others named so (``parse``), which later may as well be another project's at the same path.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

from orchestrator.core.errors import ConfigError

NAMESPACE = "orchestrator"
KEY_FILE = "ray-project-key"  # under the state folder (.orchestrator/)


def prefix(root: str, key: str) -> str:
    """The first part of the names of the project at ``root`` with ``key`` ("": named from the root alone)."""
    seed = f"{root}\0{key}" if key else root
    return "orch-" + hashlib.sha256(seed.encode("utf-8")).hexdigest()[:16] + "-"


class Names:
    """This project's actor names: the one an attempt gets, and the ones an earlier head may have given it."""

    def __init__(self, root: str, state_dir: Path) -> None:
        self.key, self.made = _project_key(state_dir)  # carried in its agents' environment too (proc_table.KEY_ENV)
        self.current, self.before = prefix(root, self.key), prefix(root, "")

    def actor(self, run_id: int, attempt: int) -> str:
        """The name of one attempt's actor."""
        return f"{self.current}{run_id}-{attempt}"

    def candidates(self, run_id: int, attempt: int) -> list[str]:
        """The names an earlier head may have given an attempt of this project's record, newest scheme first."""
        return [f"{start}{run_id}-{attempt}" for start in (self.current, self.before)]

    def parse(self, name: str) -> tuple[int, int] | None:
        """(run id, attempt) of one of this project's actor names (of before the key only at the start that made
        it); None for any other name."""
        for start in (self.current, self.before) if self.made else (self.current,):
            run_id, _, attempt = name.removeprefix(start).partition("-")
            if name.startswith(start) and run_id.isdigit() and attempt.isdigit():
                return int(run_id), int(attempt)
        return None


def _project_key(state_dir: Path) -> tuple[str, bool]:
    """This project's key, and whether it was made now; ``ConfigError`` when it can be neither read nor kept."""
    path = state_dir / KEY_FILE
    try:
        key = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        key = None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read this project's key on the cluster: {exc}") from None
    if key == "":
        raise ConfigError(f"{path}: empty; remove it (with no run under way on the cluster) to make a new key")
    if key is not None:
        return key, False
    key = secrets.token_hex(8)
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(KEY_FILE + ".partial")
        partial.write_text(key + "\n", encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot keep this project's key on the cluster: {exc.strerror or exc}") from None
    return key, True
