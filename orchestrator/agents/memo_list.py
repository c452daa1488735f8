"""How a batch run's memos are named to its agent: a file with one path a line, and the short forms beside it.

Linux caps one argument or variable at 128 KiB and all of them at a few MiB, so the whole list is always a file and
is in the environment and the prompt only while it fits in ``LIST_MAX``. Imports nothing of ours: the Ray wrapper
uses it on its worker.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

FILE_ENV = "ORCHESTRATOR_MEMOS_FILE"
LIST_ENV = "ORCHESTRATOR_MEMOS"
MEMO_ENV = "ORCHESTRATOR_MEMO"  # a one-memo run's memo
MEMO_KEYS = (MEMO_ENV, LIST_ENV, FILE_ENV)  # every variable that names a run's memos
FILE_NAME = "memos.txt"
LIST_MAX = 64 * 1024  # bytes: a longer list is only in the file


def list_path(state_dir: Path, run_id: int) -> Path:
    """Where a run's list of memos is written: ``.orchestrator/runs/<run_id>/memos.txt``."""
    return state_dir / "runs" / str(run_id) / FILE_NAME


def joined(paths: Sequence[Path | str]) -> str:
    return "\n".join(str(p) for p in paths)


def fits(text: str) -> bool:
    """Whether a list this long may go into the environment and the prompt whole."""
    return len(text.encode("utf-8", "surrogateescape")) <= LIST_MAX


def write_list(path: Path, paths: Sequence[Path | str]) -> None:
    """The list file, one path a line, whole or not at all (a temporary renamed into place); raises ``OSError``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = (joined(paths) + "\n").encode("utf-8", "surrogateescape") if paths else b""
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def list_environment(paths: Sequence[Path | str], file: Path | str) -> dict[str, str]:
    """``ORCHESTRATOR_MEMOS_FILE``, and ``ORCHESTRATOR_MEMOS`` when the list fits in ``LIST_MAX``."""
    env = {FILE_ENV: str(file)}
    text = joined(paths)
    if fits(text):
        env[LIST_ENV] = text
    return env


def memo_environment(batch: bool, paths: Sequence[Path | str], file: Path | str) -> dict[str, str]:
    """The variables that name a run's memos: a batch's list (``list_environment``), else its one memo."""
    return list_environment(paths, file) if batch else {MEMO_ENV: str(paths[0])}


def prompt_list(paths: Sequence[Path | str], file: Path | str | None) -> str:
    """``$memo_paths``: every path, one a line, or those that fit in ``LIST_MAX`` and where the whole list is."""
    text = joined(paths)
    if file is None or fits(text):
        return text
    shown: list[str] = []
    size = 0
    for path in paths:
        line = str(path)
        size += len(line.encode("utf-8", "surrogateescape")) + 1
        if size > LIST_MAX - 512:  # room for the last line
            break
        shown.append(line)
    rest = len(paths) - len(shown)
    return joined(shown) + (
        f"\n(and {rest} more memos, {len(paths)} in all: the whole list, one path a line, is in {file}, "
        f"which ${FILE_ENV} names)"
    )
