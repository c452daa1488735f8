"""Old workspaces go, work never does (issue 35): the retention pass (``gc``, and ``up``'s daily pass) removes the
worktree of an ended conversation that landed or was idle for ``retention.workspaces``, keeps its unmerged branch
and attempt refs, and keeps any workspace with work that exists nowhere else. Real git repositories, a real
``orchestrator up`` with the stand-in agent of ``tests/test_workspaces.py``; the pass's moment is injected."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from test_workspaces import WORKTREE, git, records, repository, show, start

from conftest import Project, wait_for
from orchestrator.config.retention import RetentionSettings
from orchestrator.retention import sweep

RULES = RetentionSettings.model_validate({"workspaces": "14d"})


def folder(project: Project, name: str) -> Path:
    return project.root / ".orchestrator-workspaces" / name


def run_to_end(project: Project, memo_id: str, body: str, done: str = "archive") -> None:
    name = f"{memo_id}.md"
    project.drop("builder", name, {"id": memo_id}, body=body)
    wait_for(lambda: name in project.folder("builder", done), what=f"{name} in {done}/")


def collect(project: Project, days: float, dry_run: bool = False) -> dict[str, Any]:
    moment = datetime.now().astimezone() + timedelta(days=days)
    return sweep.collect(project.root, RULES, moment, dry_run=dry_run)["workspaces"]  # type: ignore[no-any-return]


def test_an_idle_ended_workspace_goes_and_busy_dirty_or_recent_ones_stay_saying_why(project: Project) -> None:
    repository(
        project, {"builder": {"workspace": WORKTREE, "max_concurrent": 2, "retry": {"max": 1, "backoff": ["0.1s"]}}}
    )
    start(project)
    run_to_end(project, "old", "write junk.txt x\nfail-first\nwrite a.txt done")
    run_to_end(project, "dirty", "write b.txt done")
    (folder(project, "dirty") / "mine.txt").write_text("by hand, in no commit\n", encoding="utf-8")
    project.drop("builder", "busy.md", {"id": "busy"}, body="wait go.out")
    wait_for(lambda: len(records(project)) == 4, what="the busy run at work")
    run_to_end(project, "waits", "write w.txt done")
    project.drop("project-manager", "q.md", {"id": "queued", "workspace": "waits"}, body="for a role not running")

    shown = project.cli("gc", "--dry-run")
    assert shown.returncode == 0, shown.stderr
    assert "workspaces (workspaces: 14d): would remove nothing" in shown.stdout, shown.stdout
    assert "kept old: not landed, idle 0d" in shown.stdout

    planned = collect(project, 15, dry_run=True)
    assert [item["name"] for item in planned["items"]] == ["old"], planned
    assert (
        "idle 15d" in planned["items"][0]["why"]
        and "branch orchestrator/old kept (not merged into main)" in (planned["items"][0]["why"])
    )
    assert planned["kept"]["dirty"].startswith("changes in its folder that no commit holds")
    assert planned["kept"]["waits"] == "a memo in an inbox is for it"
    assert planned["kept"]["busy"].startswith("run ") and planned["kept"]["busy"].endswith(" works there")
    assert folder(project, "old").is_dir(), "a dry run removes nothing"

    done = collect(project, 15)
    assert done["count"] == 1 and done["bytes"] > 0
    assert not folder(project, "old").exists()
    assert str(folder(project, "old")) not in git(project.root, "worktree", "list")
    assert show(project, "orchestrator/old", "a.txt") == "done", "its unmerged branch is kept"
    kept = git(project.root, "for-each-ref", "--format=%(refname)", "refs/orchestrator/attempts/old/")
    assert kept and show(project, kept, "junk.txt") == "x", "and its attempt's ref"
    assert (folder(project, "dirty") / "mine.txt").exists() and folder(project, "busy").is_dir()
    (project.root / "go.out").touch()
    assert project.procs[0].stop() == 0


def test_a_landed_workspace_goes_at_once_with_its_merged_branch(project: Project) -> None:
    repository(project, {"builder": {"workspace": WORKTREE}})
    start(project)
    run_to_end(project, "shipped", "write s.txt shipped")
    assert collect(project, 0)["count"] == 0, "not landed, not idle: kept"
    landed = project.cli("land", "shipped")
    assert landed.returncode == 0, landed.stderr
    assert project.procs[0].stop() == 0
    done = collect(project, 0)
    assert [item["name"] for item in done["items"]] == ["shipped"]
    assert done["items"][0]["why"].startswith("landed, and its conversation has ended")
    assert not folder(project, "shipped").exists()
    assert git(project.root, "branch", "--list", "orchestrator/shipped") == "", "merged into main: deleted"
    assert (project.root / "s.txt").read_text(encoding="utf-8") == "shipped\n", "main has it"


def test_a_workspace_a_memo_came_for_after_the_plan_is_kept(project: Project) -> None:
    """A pass plans, then removes old logs for a while, and ``gc`` runs beside ``up``: what it removes is read
    again just before, so a conversation that came back meanwhile keeps its workspace."""
    from orchestrator.store import Store
    from orchestrator.workspaces import land_records, retire

    repository(project, {"builder": {"workspace": WORKTREE}})
    start(project)
    run_to_end(project, "shipped", "write s.txt shipped")
    assert project.cli("land", "shipped").returncode == 0
    assert project.procs[0].stop() == 0
    store = Store(project.root / ".orchestrator" / "state.db")
    try:
        # in an inbox, or claimed by a run whose attempt is not on record yet
        for where in ("memo/builder/inbox", "memo/builder/active"):
            todo = retire.plan(project.root, store.db, RULES.workspaces, datetime.now().astimezone())
            assert [item.name for item in todo.retired] == ["shipped"]
            memo = project.root / where / "again.md"
            memo.write_text("---\nid: again\nworkspace: shipped\n---\nwrite t.txt more\n", encoding="utf-8")
            retire.carry_out(project.root, store.db, todo)
            assert folder(project, "shipped").is_dir(), f"kept: a memo in {where} is for it"
            assert git(project.root, "branch", "--list", "orchestrator/shipped") != "", "its branch too"
            memo.unlink()
        todo = retire.plan(project.root, store.db, RULES.workspaces, datetime.now().astimezone())
        land_records.asked(store.db, "shipped", "orchestrator/shipped", None, "2026-12-04T00:00:00+00:00", "a person")
        retire.carry_out(project.root, store.db, todo)  # its landing asked for meanwhile: it may be checking there
        assert folder(project, "shipped").is_dir(), "kept: a landing of it waits"
    finally:
        store.close()


def test_a_folder_deleted_by_hand_is_repaired_and_status_and_doctor_count_the_workspaces(project: Project) -> None:
    repository(project, {"builder": {"workspace": WORKTREE}})
    start(project)
    run_to_end(project, "gone", "write g.txt x")
    run_to_end(project, "here", "write h.txt x")
    assert project.procs[0].stop() == 0
    shutil.rmtree(folder(project, "gone"))
    doctor = json.loads(project.cli("doctor", "--json").stdout)
    finding = next(f for f in doctor if f["check"] == "workspaces")
    assert "1 workspace(s)" in finding["detail"] and "1 registration(s) whose folder is gone" in finding["detail"]
    planned = collect(project, 0, dry_run=True)
    assert planned["stale"] == ["gone"]
    assert "would prune 1 registration(s) whose folder is gone: gone" in "\n".join(
        sweep.render(sweep.collect(project.root, RULES, datetime.now().astimezone(), dry_run=True))
    )
    collect(project, 0)
    assert "gone" not in git(project.root, "worktree", "list")
    start(project)
    wait_for(lambda: (project.status().get("workspaces") or {}).get("count") == 1, what="status's count")
    assert project.status()["workspaces"]["bytes"] > 0
    status = project.cli("status")
    assert "workspaces: 1 (" in status.stdout, status.stdout
    project.drop("builder", "again.md", {"id": "again", "workspace": "gone"}, body="write g2.txt y")
    wait_for(lambda: "again.md" in project.folder("builder", "archive"), what="a run in it makes it again")
    assert show(project, "orchestrator/gone", "g2.txt") == "y"
    assert project.procs[-1].stop() == 0


def test_a_workspace_whose_run_waits_for_a_person_is_kept(project: Project) -> None:
    repository(project, {"builder": {"workspace": WORKTREE}})
    start(project)
    project.drop("builder", "a.md", {"id": "asks"}, body="write half.txt begun\nask-unless answered.flag Which?")
    wait_for((project.root / "memo/builder/waiting/a.question").exists, what="a.md waiting for a person")
    assert project.procs[0].stop() == 0
    done = collect(project, 30)
    assert done["count"] == 0 and folder(project, "asks").is_dir(), done
    assert collect(project, 30, dry_run=True)["kept"]["asks"] == "a memo in waiting/ (for a person) is for it"
