"""``--root`` works before the command as well as after it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


def test_a_memo_is_a_path_when_it_or_its_folder_is_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a review: tell and interrupt made an id that holds a slash (``team/B-1``) a path; a memo of the inbox
    that moved on to active/ since is still named by its path."""
    from orchestrator.commands.common import memo_arg

    (tmp_path / "memo" / "builder" / "inbox").mkdir(parents=True)
    (tmp_path / "memo" / "builder" / "active" / "x.md").parent.mkdir()
    (tmp_path / "memo" / "builder" / "active" / "x.md").write_text("x", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert memo_arg("team/B-1") == "team/B-1"
    assert memo_arg("B-1") == "B-1"
    assert memo_arg("memo/builder/inbox/x.md") == str(tmp_path / "memo" / "builder" / "inbox" / "x.md")
    assert memo_arg("./memo/builder/active/x.md") == str(tmp_path / "memo" / "builder" / "active" / "x.md")
