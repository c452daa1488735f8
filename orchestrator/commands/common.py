"""What several commands share: the project root an invocation means, who is asking (for the records), and
printing a result as JSON or for people."""

from __future__ import annotations

import argparse
import getpass
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator import console
from orchestrator.core.errors import UsageError


def project_root(args: argparse.Namespace) -> Path:
    """The project root: ``--root``, else the current directory, except inside the workspace of the agent this runs
    in (``ORCHESTRATOR_WORKSPACE``), a git worktree whose ``memo/`` nobody watches: there, its project's root."""
    if args.root is not None:
        return Path(args.root).resolve()
    here = Path.cwd().resolve()
    workspace, root = os.environ.get("ORCHESTRATOR_WORKSPACE"), os.environ.get("ORCHESTRATOR_ROOT")
    if workspace and root and here.is_relative_to(Path(workspace).resolve()):
        return Path(root).resolve()
    return here


def stdin_text(command: str) -> str:
    """Standard input as text; bytes that are not UTF-8 are refused here, before anything is sent or written."""
    import sys

    try:
        return sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"orchestrator {command}: standard input is not UTF-8 text; nothing was sent") from None


def not_utf8(words: list[str]) -> str | None:
    """The first of ``words`` that is not UTF-8 (bytes Python read with surrogateescape), but ``--root``'s value,
    a path; None when all are."""
    for i, word in enumerate(words):
        if i and words[i - 1] == "--root":
            continue
        try:
            word.encode("utf-8")
        except UnicodeEncodeError:
            if not word.startswith("--root="):
                return word
    return None


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
