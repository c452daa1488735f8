"""What a new workspace is given besides the checkout (issue 35): ``copy`` (files from the project root, only what
git ignores there) and ``ports`` (a block of ports per live workspace). Real git repositories in ``tmp_path``, a
real ``orchestrator up`` and the stand-in agent of ``tests/test_workspaces.py``."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from test_workspaces import WORKTREE, git, records, repository, show, start

from conftest import Project, wait_for
from orchestrator.config import load_config
from orchestrator.core.errors import ConfigError
from orchestrator.workspaces import ports


def test_copy_brings_ignored_files_and_globs_into_a_new_workspace_and_never_onto_the_branch(project: Project) -> None:
    copy = {**WORKTREE, "copy": [".env", "config/*.local", "missing.txt"]}
    repository(project, {"builder": {"workspace": copy}})
    with (project.root / ".gitignore").open("a", encoding="utf-8") as ignore:
        ignore.write(".env\n*.local\n")
    git(project.root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-am", "ignore secrets")
    (project.root / ".env").write_text("TOKEN=secret\n", encoding="utf-8")
    (project.root / "config").mkdir()
    (project.root / "config" / "db.local").write_text("local db\n", encoding="utf-8")
    start(project)
    project.drop("builder", "a.md", {"id": "cp"}, body="see .env\nsee config/db.local\nwrite out.txt done")
    wait_for(lambda: project.folder("builder", "archive") == ["a.md"], what="the run done")
    assert records(project)[0]["seen"] == {".env": "TOKEN=secret", "config/db.local": "local db"}
    assert show(project, "orchestrator/cp", "out.txt") == "done"
    assert show(project, "orchestrator/cp", ".env") is None, "a copied secret is never committed"
    assert project.procs[0].stop() == 0


def test_a_copy_git_would_see_fails_the_attempt_with_one_line_and_is_undone(project: Project) -> None:
    repository(project, {"builder": {"workspace": {**WORKTREE, "copy": ["notes.txt"]}}})
    (project.root / "notes.txt").write_text("not ignored\n", encoding="utf-8")
    start(project)
    project.drop("builder", "a.md", {"id": "seen"}, body="write out.txt done")
    wait_for(lambda: project.folder("builder", "failed") == ["a.md"], what="the attempt failed")
    project.procs[0].wait_output("copy: notes.txt is not ignored by git in the workspace")
    assert records(project) == [], "no agent started"
    assert not (project.root / ".orchestrator-workspaces" / "seen" / "notes.txt").exists()
    refs = git(project.root, "for-each-ref", "refs/orchestrator/attempts/")
    assert refs == "", "nothing set aside: the copy was undone before the attempt ended"
    assert project.procs[0].stop() == 0


def test_copy_refuses_a_path_outside_the_root(tmp_path: Path) -> None:
    project = Project(tmp_path)
    project.configure({"builder": {"workspace": {**WORKTREE, "copy": ["../secrets"]}}})
    with pytest.raises(ConfigError, match=r"copy.*outside the project root"):
        load_config(tmp_path)


def test_each_live_workspace_has_its_own_block_of_ports_kept_across_its_runs(project: Project) -> None:
    repository(project, {"builder": {"workspace": {**WORKTREE, "ports": 3}, "max_concurrent": 2}})
    start(project)
    project.drop("builder", "a.md", {"id": "one"}, body="wait go.out")
    project.drop("builder", "b.md", {"id": "two"}, body="wait go.out")
    wait_for(lambda: len(records(project)) == 2, what="both at work at once")
    (project.root / "go.out").touch()
    wait_for(lambda: project.folder("builder", "archive") == ["a.md", "b.md"], what="both done")
    project.drop("builder", "c.md", {"id": "three", "workspace": "one"}, body="see x")
    wait_for(lambda: project.folder("builder", "archive") == ["a.md", "b.md", "c.md"], what="the next run in one")
    seen = [(Path(r["cwd"]).name, r["env"]) for r in records(project)]
    blocks = {name: (int(env["ORCHESTRATOR_PORT"]), int(env["ORCHESTRATOR_PORT_COUNT"])) for name, env in seen}
    assert sorted(blocks) == ["one", "two"] and all(count == 3 for _first, count in blocks.values())
    (a, _), (b, _) = blocks["one"], blocks["two"]
    assert abs(a - b) >= 3, f"the blocks overlap: {blocks}"
    assert [env["ORCHESTRATOR_PORT"] for name, env in seen if name == "one"] == [str(a), str(a)], "kept"
    assert project.procs[0].stop() == 0


def test_a_block_skips_busy_ports_and_a_deleted_workspace_gives_its_block_back(tmp_path: Path) -> None:
    db = sqlite3.connect(":memory:")
    ports.ensure(db)
    live, gone = tmp_path / "live", tmp_path / "gone"
    live.mkdir()
    gone.mkdir()
    busy = {ports.LOWEST + 1}
    assert ports.block(db, "live", str(live), 2, lambda port: port not in busy) == (ports.LOWEST + 2, 2)
    assert ports.block(db, "gone", str(gone), 2, lambda port: True) == (ports.LOWEST, 2), "below, where it fits"
    assert ports.block(db, "third", str(tmp_path), 2, lambda port: True) == (ports.LOWEST + 4, 2)
    assert ports.block(db, "live", str(live), 2, lambda port: False) == (ports.LOWEST + 2, 2), "its own, kept"
    shutil.rmtree(gone)
    assert ports.block(db, "fourth", str(tmp_path), 2, lambda port: True) == (ports.LOWEST, 2), "given back"
    with pytest.raises(ports.NoPortsError, match="no block of 5 free ports"):
        ports.block(db, "fifth", str(tmp_path), 5, lambda port: False)
