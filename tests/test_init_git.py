"""``orchestrator init`` and git (issue 35): the builder of the default team works in worktrees, so init makes a
repository with a first commit where there is none, keeps ``.orchestrator/`` ignored, and where git is missing
writes ``mode: shared`` saying why: the default team always starts."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import yaml
from test_workspaces import AGENT, git, show

from conftest import Project, wait_for


def builder_workspace(root: Path) -> dict[str, str]:
    team = yaml.safe_load((root / "roles.yaml").read_text(encoding="utf-8"))
    return team["roles"]["builder"]["workspace"]


def test_init_in_a_plain_folder_makes_a_repository_commits_and_the_builder_works_in_a_worktree(
    project: Project,
) -> None:
    made = project.cli("init", str(project.root))
    assert made.returncode == 0, made.stderr
    assert builder_workspace(project.root) == {"mode": "worktree"}
    assert f"made a git repository in {project.root}" in made.stdout
    assert "committed what it wrote (" in made.stdout
    committed = git(project.root, "show", "--name-only", "--format=%s", "HEAD").splitlines()
    assert committed[0] == "orchestrator init: the default team"
    assert {"roles.yaml", ".gitignore", "prompts/builder.md", "roles.schema.json"} <= set(committed)
    assert (project.root / ".gitignore").read_text(encoding="utf-8") == ".orchestrator/\n"
    orchestrator = project.up(ORCHESTRATOR_SPAWN_CMD=shlex.join(AGENT), WS_RECORD=str(project.root / "ws.out"))
    project.drop("builder", "task.md", {"id": "T-1", "subject": "build it"}, body="write built.txt yes")
    wait_for(lambda: project.folder("builder", "archive") == ["task.md"], 60, "the builder's memo archived")
    assert show(project, "orchestrator/T-1", "built.txt") == "yes", "its work on its branch"
    assert not (project.root / "built.txt").exists(), "not in the root"
    assert git(project.root, "status", "--porcelain", "--untracked-files=no") == ""
    assert orchestrator.stop() == 0


def test_init_in_a_repository_adds_the_ignore_line_and_commits_nothing(project: Project) -> None:
    git(project.root, "init", "--quiet")
    (project.root / ".gitignore").write_text("*.pyc", encoding="utf-8")
    git(project.root, "add", ".gitignore")
    git(project.root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "mine")
    made = project.cli("init", str(project.root))
    assert made.returncode == 0, made.stderr
    assert "made a git repository" not in made.stdout and "committed" not in made.stdout
    assert f"added .orchestrator/ to {project.root / '.gitignore'}" in made.stdout
    assert (project.root / ".gitignore").read_text(encoding="utf-8") == "*.pyc\n.orchestrator/\n"
    assert git(project.root, "log", "--format=%s") == "mine"
    again = project.cli("init", str(project.root))
    assert "added" not in again.stdout, "once only"


def test_init_where_git_is_not_installed_writes_mode_shared_saying_why_and_the_team_starts(
    project: Project, tmp_path: Path
) -> None:
    bare = tmp_path / "bin-without-git"
    bare.mkdir()
    made = project.cli("init", str(project.root), PATH=str(bare))
    assert made.returncode == 0, made.stderr
    assert "git is not installed here: the builder works in the project folder" in made.stdout
    text = (project.root / "roles.yaml").read_text(encoding="utf-8")
    assert "# git is not installed here, so the builder works in the project folder" in text
    assert builder_workspace(project.root) == {"mode": "shared"}
    assert not (project.root / ".git").exists()
    orchestrator = project.up(
        ORCHESTRATOR_SPAWN_CMD=shlex.join(AGENT), WS_RECORD=str(project.root / "ws.out"), PATH=str(bare)
    )
    project.drop("builder", "task.md", {"id": "T-1"}, body="write built.txt yes")
    wait_for(lambda: project.folder("builder", "archive") == ["task.md"], 60, "the builder's memo archived")
    assert (project.root / "built.txt").read_text(encoding="utf-8") == "yes\n", "in the shared folder"
    assert orchestrator.stop() == 0


def test_init_in_a_folder_inside_a_repository_writes_mode_shared_saying_why_and_the_team_starts(
    project: Project,
) -> None:
    """A worktree is a checkout of the whole repository: the team in a folder inside one works in its folder."""
    git(project.root, "init", "--quiet")
    git(project.root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "--allow-empty", "-m", "mine")
    team = project.root / "team"
    made = project.cli("init", str(team))
    assert made.returncode == 0, made.stderr
    why = f"{team} is a folder inside the git repository {project.root}"
    assert f"{why}: the builder works in the project folder (workspace: {{mode: shared}})" in made.stdout
    text = (team / "roles.yaml").read_text(encoding="utf-8")
    assert f"# {why}, so the builder works in the project folder; keep the team at its top," in text
    assert builder_workspace(team) == {"mode": "shared"}
    assert (team / ".gitignore").read_text(encoding="utf-8") == ".orchestrator/\n"
    assert git(project.root, "log", "--format=%s") == "mine", "nothing committed to the person's repository"
    checked = subprocess.run(
        [*project.command, "config", "check", "--root", str(team)],
        capture_output=True,
        text=True,
        env=project.env(ORCHESTRATOR_SPAWN_CMD=shlex.join(AGENT)),
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
