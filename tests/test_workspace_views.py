"""Each run's workspace and branch where people look (issue 35): ``status``, ``status --json`` and ``history``.
A real ``orchestrator up`` in a real git repository, with the stand-in agent of ``tests/test_workspaces.py``."""

from __future__ import annotations

import json
import sys

from test_workspaces import WORKTREE, records, repository, start

from conftest import Project, wait_for


def test_status_and_history_show_each_runs_workspace_and_branch(project: Project) -> None:
    repository(project, {"builder": {"workspace": WORKTREE}, "reviewer": {}})
    start(project)
    project.drop("builder", "a.md", {"id": "shown"}, body="write a.txt x\nwait go.out")
    project.drop("reviewer", "r.md", {"id": "shared-one"}, body="body")
    wait_for(lambda: records(project), what="the builder at work")
    live = project.status()
    run_id = next(str(run["run_id"]) for run in live["runs"] if run["memo"] == "a.md")
    assert live["run_workspaces"][run_id] == {"workspace": "shown", "branch": "orchestrator/shown"}
    assert "[orchestrator/shown]" in project.cli("status").stdout
    (project.root / "go.out").touch()
    wait_for(lambda: project.folder("builder", "archive") == ["a.md"], what="the run done")
    wait_for(lambda: project.folder("reviewer", "archive") == ["r.md"], what="the shared run done")
    idle = project.status()
    assert idle["run_workspaces"] == {}, "there when no run works in one, as nodes is (a script needs no guard)"
    recent = {run["memo"]: run for run in idle["recent"]}
    assert (recent["a.md"]["workspace"], recent["a.md"]["branch"]) == ("shown", "orchestrator/shown")
    assert recent["r.md"]["workspace"] is None and recent["r.md"]["branch"] is None, "a shared role's run"
    history = json.loads(project.cli("history", "--json").stdout)["runs"]
    row = next(run for run in history if run["memo"] == "a.md")
    assert (row["workspace"], row["branch"]) == ("shown", "orchestrator/shown")
    text = project.cli("history").stdout
    assert "branch" in text and "orchestrator/shown" in text, text
    assert project.procs[0].stop() == 0


def test_the_dashboard_shows_a_runs_changes_and_the_workspaces(project: Project) -> None:
    from web_harness import start as start_web

    repository(project, {"builder": {"workspace": WORKTREE}})
    board = start_web(project, WS_RECORD=str(project.root / "ws.jsonl"))
    try:
        project.drop("builder", "a.md", {"id": "dash"}, body="write a.txt one\nwrite b.txt two")
        wait_for(lambda: project.folder("builder", "archive") == ["a.md"], what="the run done")
        run_id = json.loads(project.cli("history", "--json").stdout)["runs"][-1]["run_id"]
        found = board.get(f"/api/v1/runs/{run_id}").json()["workspace"]
        assert (found["branch"], found["outcome"]) == ("orchestrator/dash", "committed")
        assert sorted(f["path"] for f in found["files"]) == ["a.txt", "b.txt"]
        page = board.get(f"/runs/{run_id}").text
        assert "orchestrator/dash" in page and "2 files changed" in page and "<code>b.txt</code>" in page
        listed = board.get("/api/v1/workspaces").json()["workspaces"]
        assert [(w["name"], w["ahead"], w["behind"], w["landed"]) for w in listed] == [("dash", 1, 0, False)]
        assert listed[0]["bytes"] > 0 and listed[0]["last_run"] == run_id
        page = board.get("/workspaces").text
        assert "<code>orchestrator/dash</code>" in page and f'href="/runs/{run_id}"' in page
    finally:
        board.close()


def test_the_prompt_tells_the_agent_where_it_works(project: Project) -> None:
    from conftest import STAND_IN

    repository(project, {"builder": {"workspace": WORKTREE, "command": [sys.executable, str(STAND_IN)]}})
    start(project)
    project.drop("builder", "a.md", {"id": "told"}, body="body")
    wait_for(lambda: project.folder("builder", "archive") == ["a.md"], what="the run done")
    prompt = project.records()[0]["prompt"]
    folder = project.root / ".orchestrator-workspaces" / "told"
    assert prompt.startswith(f"You work in a git worktree of your own: {folder} (branch orchestrator/told)"), prompt
    assert f"never in the project root ({project.root})" in prompt
    assert project.procs[0].stop() == 0


def test_diff_shows_a_working_and_a_waiting_runs_new_and_changed_files_without_touching_them(project: Project) -> None:
    from test_workspaces import git

    from orchestrator.workspaces.overview import run_changes

    main = repository(project, {"builder": {"workspace": WORKTREE}})
    start(project)
    body = "write shared.txt changed\nwrite new.txt brand new\nwait go.out\nask-unless answered.flag Which?"
    project.drop("builder", "a.md", {"id": "live"}, body=body)
    wait_for(lambda: records(project), what="the builder at work")
    workspace = project.root / ".orchestrator-workspaces" / "live"
    untouched = git(workspace, "status", "--porcelain")
    assert untouched == "M shared.txt\n?? new.txt", untouched
    run_id = project.status()["runs"][0]["run_id"]
    for what in ("at work", "waiting for a person"):
        patch = project.cli("diff", "live")
        assert patch.returncode == 0, patch.stderr
        assert "+brand new" in patch.stdout and "+changed" in patch.stdout, (what, patch.stdout)
        stat = project.cli("diff", "live", "--stat").stdout
        assert "new.txt" in stat and "2 files changed" in stat, (what, stat)
        shown = run_changes(project.root, project.root / ".orchestrator" / "state.db", run_id)
        assert shown is not None and "2 files changed" in shown["stat"], (what, shown)
        assert sorted((f["status"], f["path"]) for f in shown["files"]) == [("A", "new.txt"), ("M", "shared.txt")]
        assert git(workspace, "status", "--porcelain") == untouched, "its index and files as they were"
        assert git(workspace, "rev-parse", "HEAD") == main and git(workspace, "symbolic-ref", "HEAD").endswith("/live")
        (project.root / "go.out").touch()
        wait_for((project.root / "memo/builder/waiting/a.question").exists, what="a.md waiting for a person")
    assert project.procs[0].stop() == 0
