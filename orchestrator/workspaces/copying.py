"""What a fresh checkout lacks, given to a new workspace once (``provision``): ``workspace.copy``, files from the
project root copied in (``.env``, ``node_modules``), then ``workspace.setup``, a command run there. A copied file
reaches the agent, secrets included.

Only what git ignores in the workspace may be copied: anything else would be work like the agent's, committed on
the branch with its first success (a ``.env`` on a branch that lands). So a copy git would see is undone and
refused with one line, before the agent starts.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
from pathlib import Path

from orchestrator.agents.proc_table import ProcRef
from orchestrator.agents.spec import SpawnError
from orchestrator.config.workspace import WorkspaceSettings
from orchestrator.intake.notices import log_tail
from orchestrator.workspaces import git

SETUP_DONE = "orchestrator-setup-done"  # in the worktree's own git folder: its setup passed
SETUP_RUNNING = "orchestrator-setup-running"  # there while its setup runs: its pid and start time
SETUP_OUTPUT = "orchestrator-setup-output"  # what its last setup wrote
SKIPPED = (".git", ".orchestrator")  # never copied: the repository itself, the orchestrator's state and worktrees


class CopyError(Exception):
    """A copy that cannot be made, or would be committed; the message says which file and what to do."""


def matches(root: Path, patterns: list[str]) -> list[Path]:
    """The paths under ``root`` the patterns name (a pattern with ``*``, ``?`` or ``[`` is a glob, ``**`` goes
    down folders), relative, in order and once each; a pattern that matches nothing names nothing."""
    found: dict[Path, None] = {}
    for pattern in patterns:
        if glob.has_magic(pattern):
            hits = sorted(root.glob(pattern))
        else:
            hits = [root / pattern] if os.path.lexists(root / pattern) else []
        for hit in hits:
            relative = hit.relative_to(root)
            if relative.parts and relative.parts[0] not in SKIPPED:
                found[relative] = None
    return list(found)


def copy_in(root: Path, folder: Path, patterns: list[str]) -> list[Path]:
    """Copy what ``patterns`` name from ``root`` into the workspace ``folder`` (folders whole, links as links);
    the paths copied. ``CopyError`` when git in the workspace would see one of them (the copies undone)."""
    copied = matches(root, patterns)
    for relative in copied:
        source, target = root / relative, folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target, follow_symlinks=False)
    if not copied:
        return copied
    seen = git.git(folder, "status", "--porcelain", "--untracked-files=all", "--", *map(str, copied))
    if seen:
        git.reset(folder, git.git(folder, "rev-parse", "HEAD"))  # a new workspace: nothing else to lose
        first = seen.splitlines()[0][3:].strip().strip('"')
        raise CopyError(
            f"copy: {first} is not ignored by git in the workspace, so the run's commit would take it; add it to "
            ".gitignore, or remove it from workspace.copy"
        )
    return copied


def provision(root: Path, settings: WorkspaceSettings, folder: Path) -> None:
    """The role's ``copy`` and ``setup`` once per workspace; a failure fails the attempt, and the next one does
    both again."""
    if not settings.setup and not settings.copy_files:
        return
    own = Path(git.git(folder, "rev-parse", "--absolute-git-dir"))
    marker = own / SETUP_DONE
    if marker.exists():
        return
    copy_in(root, folder, settings.copy_files)
    if not settings.setup:
        marker.write_text("", encoding="utf-8")
        return
    running = own / SETUP_RUNNING
    stop_left_behind(running)
    said = own / SETUP_OUTPUT  # a file, not a pipe: a process it leaves behind holding its output holds no one
    try:
        with open(said, "wb") as output:
            setup = subprocess.Popen(  # noqa: S603 - the role's argv, never a shell
                settings.setup,
                cwd=folder,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stopped whole at its timeout, or at the next start after a kill
            )
    except OSError as exc:
        raise SpawnError(f"setup {settings.setup[0]!r} could not start: {exc.strerror or exc}") from None
    ref = ProcRef.of(setup.pid)
    running.write_text(f"{setup.pid} {ref.create_time if ref else 0}\n", encoding="utf-8")
    try:
        setup.wait(timeout=settings.setup_timeout)
    except subprocess.TimeoutExpired:
        _kill_group(setup.pid)
        setup.wait()
        raise SpawnError(f"setup {settings.setup[0]!r} took longer than {settings.setup_timeout:g}s") from None
    finally:
        running.unlink(missing_ok=True)
    if setup.returncode != 0:
        tail = " ".join("\n".join(log_tail(said)).strip().splitlines()[-3:])[-300:]
        raise SpawnError(f"setup {settings.setup[0]!r} exited {setup.returncode}: {tail}")
    marker.write_text("", encoding="utf-8")


def stop_left_behind(running: Path) -> None:
    """The setup an orchestrator killed mid-way left running in this workspace (its group, by the pid and start
    time it wrote), stopped before another begins there."""
    try:
        pid, created = running.read_text(encoding="utf-8").split()
        ref = ProcRef(int(pid), float(created))
    except (OSError, ValueError):
        return
    if ref.alive():
        _kill_group(ref.pid)
    running.unlink(missing_ok=True)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
