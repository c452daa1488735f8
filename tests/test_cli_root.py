"""``--root`` works before the command as well as after it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import Project


def test_root_before_the_command_is_kept(project: Project, tmp_path: Path) -> None:
    project.configure()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for args in (["history", "--json"], ["memory", "list"]):
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", "--root", str(project.root), *args],
            capture_output=True,
            text=True,
            cwd=elsewhere,
            env=project.env(),
            timeout=60,
        )
        assert done.returncode == 0, (args, done.stderr)
        assert "roles.yaml" not in done.stderr


def test_an_empty_root_is_the_current_directory_for_send_too(project: Project, tmp_path: Path) -> None:
    """Found by a user-view hunt: `send --root ""` (a script's empty variable) wrote into $ORCHESTRATOR_ROOT's
    project instead of the current directory's, as every other command takes it."""
    project.configure()
    other = tmp_path / "other"
    other.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "send", "--root", "", "--to", "builder", "hello there"],
        capture_output=True,
        text=True,
        cwd=project.root,
        env={**project.env(), "ORCHESTRATOR_ROOT": str(other)},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).parent == project.root / "memo" / "builder" / "inbox"


def test_a_root_that_is_a_symlink_loop_is_one_line_naming_it(project: Project, tmp_path: Path) -> None:
    """Found by a user-view hunt: it was "Too many levels of symbolic links (at client.py:70; the traceback is in
    ...)", naming no path."""
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "status", "--root", str(tmp_path / "loop1")],
        capture_output=True,
        text=True,
        env=project.env(),
        timeout=60,
    )
    assert done.returncode == 4, done.stderr
    assert done.stderr == (
        f"orchestrator: no orchestrator can be reached at {tmp_path / 'loop1'}/.orchestrator/control.sock: "
        "Too many levels of symbolic links\n"
    )
