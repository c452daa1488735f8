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
