"""The names of a project's attempts on a cluster: ``orch-<project>-<run id>-<attempt>``, in one namespace.

``<project>`` is a digest of the project root and of a random key kept in its state folder (``KEY_FILE``): two
projects at the same path on two machines (each container's ``/app``) share a cluster without sharing names, so one
never halts or takes over the other's attempts. Actors named before the key existed were named from the root alone:
see ``Names`` for when such a name is still looked for.
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
    """This project's actor names: the one an attempt gets, and the ones an earlier head may have given it.

    Its key file (``KEY_FILE``) holds the key, then which names of before the key may still be this project's: all of
    them (``old: *``) until a start has halted those it did not take back, then the attempts it took back under such a
    name (``old: RUN-ATTEMPT``), which later starts may have to take back again. Any other actor named so may be
    another project's at the same path, and is left alone."""

    def __init__(self, root: str, state_dir: Path) -> None:
        self.path = state_dir / KEY_FILE
        self.key, lines = _project_key(state_dir)  # carried in its agents' environment too (proc_table.KEY_ENV)
        self.current, self.before = prefix(root, self.key), prefix(root, "")
        self.all_before = OLD_ALL in lines
        self.old = {found for line in lines if (found := _attempt(line.removeprefix(OLD))) is not None}
        self.taken_back: set[tuple[int, int]] = set()  # taken back under a name of before the key, this start

    def actor(self, run_id: int, attempt: int) -> str:
        """The name of one attempt's actor."""
        return f"{self.current}{run_id}-{attempt}"

    def candidates(self, run_id: int, attempt: int) -> list[str]:
        """The names an earlier head may have given an attempt of this project's record, newest scheme first."""
        old = self.all_before or (run_id, attempt) in self.old
        return [f"{start}{run_id}-{attempt}" for start in (self.current, *((self.before,) if old else ()))]

    def took_back(self, name: str, run_id: int, attempt: int) -> None:
        """The attempt was taken back under ``name``: one of before the key is looked for again at the next start."""
        if not name.startswith(self.current):
            self.taken_back.add((run_id, attempt))

    def parse(self, name: str) -> tuple[int, int] | None:
        """(run id, attempt) of one of this project's actor names (of before the key only until a start halted
        them); None for any other name."""
        for start in (self.current, self.before) if self.all_before else (self.current,):
            found = _attempt(name.removeprefix(start)) if name.startswith(start) else None
            if found is not None:
                return found
        return None

    def settle(self) -> None:
        """The start has halted what it did not take back: from now on only the attempts it took back under a name of
        before the key are looked for under it. Raises ``OSError``."""
        if not self.all_before and self.taken_back == self.old:
            return
        old = [f"{OLD}{run}-{attempt}" for run, attempt in sorted(self.taken_back)]
        _write(self.path, [self.key, *old])
        self.all_before, self.old = False, set(self.taken_back)


OLD = "old: "
OLD_ALL = OLD + "*"


def _attempt(text: str) -> tuple[int, int] | None:
    run_id, _, attempt = text.strip().partition("-")
    return (int(run_id), int(attempt)) if run_id.isdigit() and attempt.isdigit() else None


def _write(path: Path, lines: list[str]) -> None:
    partial = path.with_name(KEY_FILE + ".partial")
    partial.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.replace(partial, path)


def _project_key(state_dir: Path) -> tuple[str, list[str]]:
    """This project's key and the lines after it, made now when there is none (``old: *``: every actor named before
    the key may be this project's); ``ConfigError`` when it can be neither read nor kept."""
    path = state_dir / KEY_FILE
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except FileNotFoundError:
        lines = None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read this project's key on the cluster: {exc}") from None
    if lines is not None:
        if not lines or not lines[0]:
            raise ConfigError(f"{path}: empty; remove it (with no run under way on the cluster) to make a new key")
        return lines[0], lines[1:]
    key = secrets.token_hex(8)
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        _write(path, [key, OLD_ALL])
    except OSError as exc:
        raise ConfigError(f"{path}: cannot keep this project's key on the cluster: {exc.strerror or exc}") from None
    return key, [OLD_ALL]
