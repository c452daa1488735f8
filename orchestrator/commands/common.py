"""What several commands share: the project root an invocation means, who is asking (for the records), and
printing a result as JSON or for people."""

from __future__ import annotations

import argparse
import getpass
import os
from collections.abc import Callable

from orchestrator import console
from orchestrator.core.errors import UsageError
from orchestrator.core.text import printable

TYPE_CHECKING = False  # typing's flag without importing typing: see tests/test_client_imports.py
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


def root_dir(args: argparse.Namespace) -> str:
    """The project root: ``--root``, else the current directory, except inside the workspace of the agent this runs
    in (``ORCHESTRATOR_WORKSPACE``), a git worktree whose ``memo/`` nobody watches: there, its project's root.

    A path text, resolved: the client commands' root (pathlib is no part of their start-up)."""
    if args.root is not None:
        return os.path.realpath(args.root)
    here = os.path.realpath(os.getcwd())
    workspace, root = os.environ.get("ORCHESTRATOR_WORKSPACE"), os.environ.get("ORCHESTRATOR_ROOT")
    if workspace and root:
        inside = os.path.realpath(workspace)
        if os.path.commonpath([here, inside]) == inside:
            return os.path.realpath(root)
    return here


def memo_arg(memo: str) -> str:
    """A memo as named on the command line, as the orchestrator looks it up: a path made absolute from here and
    resolved; an id or a file name as it is. A path holds a separator and it, or its folder, is here (a memo of the
    inbox may have moved on to active/ meanwhile); an id may hold a slash too (``team/B-1``)."""
    if os.sep in memo and (os.path.lexists(memo) or os.path.isdir(os.path.dirname(memo))):
        return os.path.realpath(memo)
    return memo


def project_root(args: argparse.Namespace) -> Path:
    """``root_dir`` as a ``Path``, for every other command."""
    from pathlib import Path

    return Path(root_dir(args))


def stdin_text(command: str) -> str:
    """Standard input as text; bytes that are not UTF-8 are refused here, before anything is sent or written."""
    import sys

    try:
        return sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"orchestrator {command}: standard input is not UTF-8 text; nothing was sent") from None


def utf8_only(args: argparse.Namespace) -> argparse.Namespace:
    """``args``, unless a text in them is not UTF-8 (bytes Python read with surrogateescape): refused in one line
    before anything is sent or written, as no record (SQLite, a memo's YAML) can hold it. Paths (``--root``, and
    ``init DIR``, a ``Path``) are not texts: a folder's name may be any bytes."""
    for name, value in vars(args).items():
        if name == "root":
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and printable(item) != item:
                shown = name.replace("_", "-")
                raise UsageError(
                    f"{shown}: '{printable(item)}' is not UTF-8 text (names and texts are); nothing was done"
                )
    return args


def who() -> str:
    """The user and process asking, as the orchestrator records a request's origin."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name is no reason to fail
        user = str(os.getuid())
    return f"{user} (pid {os.getpid()})"


def show(as_json: bool, result: Any, human: Callable[[Any], None]) -> int:
    """Print ``result`` as JSON (``--json``) or with its printer for people; the command's exit status, 0."""
    if as_json:
        console.print_json(result)
    else:
        human(result)
    return 0
