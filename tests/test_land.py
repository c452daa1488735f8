"""Landing through a queue (issue 35, item 5): ``orchestrator land`` rebases a workspace's branch onto its base, runs
``check`` there and fast-forwards the base and the root's checkout; a conflict or a failed check changes nothing and
sends a memo to the builder; a dirty root is refused; an agent needs ``may: [land]``. Real git repositories in
``tmp_path``, a real ``orchestrator up`` and the stand-in agent of ``tests/test_workspaces.py``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from test_workspaces import WORKTREE, git, records, repository, show, start

from conftest import Project, wait_for
from orchestrator.core.errors import UnknownMemoError
from orchestrator.core.events import FeatureRequested
from orchestrator.supervisor.feature_requests import Command, FeatureRequests
from orchestrator.workspaces import land_records, landing
from orchestrator.workspaces.git import IDENTITY
from orchestrator.workspaces.land import LandRequest

PASSES = [sys.executable, "-c", "import pathlib; print(pathlib.Path('new.txt').read_text())"]
FAILS = [sys.executable, "-c", "import sys; print('collected 3 items'); print('3 tests failed'); sys.exit(1)"]


def built(project: Project, memo: str, body: str, count: int = 1) -> None:
    """A builder's memo run to its end (its work committed on its branch)."""
    project.drop("builder", f"{memo}.md", {"id": memo}, body=body)
    wait_for(lambda: len(project.folder("builder", "archive")) == count, what=f"{memo} done")


def landings(project: Project) -> list[tuple[str, str]]:
    with sqlite3.connect(project.root / ".orchestrator" / "state.db") as db:
        return db.execute("SELECT name, outcome FROM workspace_landings ORDER BY seq").fetchall()


def commit_on_main(project: Project, path: str, text: str) -> str:
    (project.root / path).write_text(text, encoding="utf-8")
    git(project.root, "add", path)
    git(project.root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", f"main: {path}")
    return git(project.root, "rev-parse", "main")


def test_land_lands_a_clean_branch_into_main_and_the_roots_checkout(project: Project) -> None:
    old = repository(project, {"builder": {"workspace": {**WORKTREE, "check": PASSES}}})
    start(project)
    built(project, "one", "write new.txt built")
    elsewhere = commit_on_main(project, "other.txt", "from main\n")  # main moved on: the branch is rebased onto it
    done = project.cli("land", "one")
    assert done.returncode == 0, done.stderr
    assert "landed orchestrator/one into main: 1 commit(s)" in done.stdout, done.stdout
    main = git(project.root, "rev-parse", "main")
    assert main not in (old, elsewhere) and git(project.root, "rev-parse", "orchestrator/one") == main
    assert git(project.root, "rev-parse", "main~1") == elsewhere, "rebased onto main, then fast-forwarded"
    assert (project.root / "new.txt").read_text(encoding="utf-8") == "built\n", "the root's checkout updated"
    assert git(project.root, "status", "--porcelain", "--untracked-files=no") == ""
    assert landings(project) == [("one", "landed")], "marked landed"
    again = project.cli("land", "one")
    assert again.returncode == 1 and "nothing to land" in again.stderr, again.stderr
    assert project.procs[0].stop() == 0


def test_a_conflicting_land_leaves_main_where_it_was_and_tells_the_builder(project: Project) -> None:
    repository(project, {"builder": {"workspace": WORKTREE}})
    start(project)
    built(project, "clash", "write shared.txt from the builder")
    branch = git(project.root, "rev-parse", "orchestrator/clash")
    main = commit_on_main(project, "shared.txt", "from main\n")
    done = project.cli("land", "clash")
    assert done.returncode == 1, done.stdout
    line = done.stderr.strip().splitlines()
    assert len(line) == 1 and "conflicts with main in shared.txt" in line[0] and "a memo" in line[0], line
    assert git(project.root, "rev-parse", "main") == main, "main where it was"
    assert git(project.root, "rev-parse", "orchestrator/clash") == branch, "the rebase undone"
    workspace = project.root / ".orchestrator-workspaces" / "clash"
    assert git(workspace, "status", "--porcelain") == "" and not (workspace / ".git").is_dir()
    wait_for(lambda: len(project.folder("builder", "archive")) == 2, what="the memo about the conflict, worked on")
    memo = next(n for n in project.folder("builder", "archive") if n != "clash.md")
    text = (project.root / "memo" / "builder" / "archive" / memo).read_text(encoding="utf-8")
    assert "workspace: clash" in text and "from: orchestrator" in text and "- shared.txt" in text
    assert "Rebase onto main and resolve" in text
    assert records(project)[-1]["cwd"] == str(workspace), "the builder works on it in the same workspace"
    assert landings(project) == [("clash", "conflict")]
    assert project.procs[0].stop() == 0


def test_a_failed_check_leaves_main_where_it_was_with_the_checks_tail(project: Project) -> None:
    main = repository(project, {"builder": {"workspace": {**WORKTREE, "check": FAILS}}})
    start(project)
    built(project, "red", "write new.txt built")
    branch = git(project.root, "rev-parse", "orchestrator/red")
    done = project.cli("land", "red.md")  # named by its memo's file name
    assert done.returncode == 1
    assert "the check" in done.stderr and "exited 1" in done.stderr and "3 tests failed" in done.stderr, done.stderr
    assert (
        git(project.root, "rev-parse", "main") == main and git(project.root, "rev-parse", "orchestrator/red") == branch
    )
    assert not (project.root / "new.txt").exists()
    wait_for(lambda: len(project.folder("builder", "archive")) == 2, what="the memo about the check")
    memo = next(n for n in project.folder("builder", "archive") if n != "red.md")
    text = (project.root / "memo" / "builder" / "archive" / memo).read_text(encoding="utf-8")
    assert "3 tests failed" in text and "workspace: red" in text and "the check failed" in text
    assert project.procs[0].stop() == 0


def test_a_dirty_root_refuses_the_landing_in_one_line(project: Project) -> None:
    main = repository(project, {"builder": {"workspace": WORKTREE}})
    start(project)
    built(project, "tidy", "write new.txt built")
    (project.root / "shared.txt").write_text("edited by a person\n", encoding="utf-8")
    done = project.cli("land", "tidy")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "the project root has uncommitted changes (shared.txt)" in lines[0], lines
    assert (project.root / "shared.txt").read_text(encoding="utf-8") == "edited by a person\n", "not touched"
    assert git(project.root, "rev-parse", "main") == main and not (project.root / "new.txt").exists()
    assert project.folder("builder", "inbox") == [], "a refusal sends no memo"
    git(project.root, "checkout", "--", "shared.txt")
    (project.root / "new.txt").write_text("a person's own\n", encoding="utf-8")
    branch = git(project.root, "rev-parse", "orchestrator/tidy")
    done = project.cli("land", "tidy")
    assert done.returncode == 1 and "untracked files in the project root are in the way (new.txt)" in done.stderr
    assert (project.root / "new.txt").read_text(encoding="utf-8") == "a person's own\n"
    assert (
        git(project.root, "rev-parse", "main") == main and git(project.root, "rev-parse", "orchestrator/tidy") == branch
    )
    (project.root / "new.txt").unlink()
    assert project.cli("land", "tidy").returncode == 0
    assert (project.root / "new.txt").read_text(encoding="utf-8") == "built\n"
    assert project.procs[0].stop() == 0


def test_an_agent_lands_only_with_may_land(project: Project) -> None:
    main = repository(project, {"builder": {"workspace": WORKTREE}, "reviewer": {}, "manager": {"may": ["land"]}})
    start(project)
    built(project, "pm", "write new.txt built")
    project.drop("reviewer", "r.md", {"id": "r"}, body="land pm")
    wait_for(lambda: project.folder("reviewer", "archive"), what="the reviewer's try")
    refused = next(r for r in records(project) if r["memo"] == "r.md")["land"]
    assert refused["code"] == 13 and "may: [land]" in refused["err"], refused
    assert git(project.root, "rev-parse", "main") == main
    project.drop("manager", "m.md", {"id": "m"}, body="land pm")
    wait_for(lambda: project.folder("manager", "archive"), what="the manager's landing")
    landed = next(r for r in records(project) if r["memo"] == "m.md")["land"]
    assert landed["code"] == 0, landed
    assert git(project.root, "rev-parse", "main") == git(project.root, "rev-parse", "orchestrator/pm") != main
    assert show(project, "main", "new.txt") == "built"
    assert project.procs[0].stop() == 0


HELD = """
import os, pathlib, time
root = pathlib.Path(os.environ["ORCHESTRATOR_WORKSPACE"]).parents[1]
end = time.monotonic() + 30
while not (root / "checked.out").exists() and time.monotonic() < end:
    time.sleep(0.02)
"""


def test_a_landing_waits_for_the_run_working_in_its_workspace_past_the_commands_deadline(project: Project) -> None:
    check = [sys.executable, "-c", HELD]
    main = repository(project, {"builder": {"workspace": {**WORKTREE, "check": check}}})
    start(project)
    built(project, "slow", "write a.txt first")
    project.drop("builder", "more.md", {"id": "more", "workspace": "slow"}, body="wait go.out\nwrite b.txt second")
    wait_for(lambda: len(records(project)) == 2, what="the second run at work")
    done = project.cli("land", "slow", "--wait", "1")
    assert done.returncode == 11, done.stderr
    assert (
        "landing slow: still waiting for run" in done.stderr
        and "it goes on" in done.stderr
        and "orchestrator status" in done.stderr
    ), done.stderr
    shown = project.cli("status").stdout
    assert "landing: slow into its base: queued, waits for run" in shown, shown
    assert "landing slow waits for run" in project.procs[0].output
    assert git(project.root, "rev-parse", "main") == main, "not landed while the run works"
    project.drop("builder", "late.md", {"id": "late", "workspace": "slow"}, body="write c.txt third")
    (project.root / "go.out").touch()
    wait_for(lambda: "more.md" in project.folder("builder", "archive"), what="the run in the workspace ended")
    wait_for(
        lambda: "waits for workspace slow (being landed)" in json.dumps(project.status()), what="the next memo held"
    )
    assert project.folder("builder", "inbox") == ["late.md"] and len(records(project)) == 2, "no run while it lands"
    (project.root / "checked.out").touch()
    wait_for(lambda: show(project, "main", "b.txt") == "second", what="the landing, once the run ended")
    assert show(project, "main", "a.txt") == "first" and (project.root / "b.txt").exists()
    wait_for(lambda: landings(project) == [("slow", "landed")], what="the landing on record")
    wait_for(lambda: "late.md" in project.folder("builder", "archive"), what="the memo that waited for the landing")
    assert show(project, "orchestrator/slow", "c.txt") == "third" and show(project, "main", "c.txt") is None, (
        "the next memo for the workspace waited for the landing asked before it"
    )
    assert project.procs[0].stop() == 0


def test_a_feature_request_answers_later_through_an_awaitable() -> None:
    async def scenario() -> None:
        features = FeatureRequests()
        later: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

        async def answer(_request: LandRequest) -> dict[str, Any]:
            return await later

        features.add("test", [Command(LandRequest, lambda request: answer(request))])
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        features.handle(FeatureRequested(LandRequest(target="x"), reply))
        await asyncio.sleep(0)
        assert not reply.done(), "answered only when the awaitable is done"
        later.set_result({"landed": True})
        assert await asyncio.wait_for(reply, 5) == {"landed": True}
        failing: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        later = asyncio.get_running_loop().create_future()
        features.handle(FeatureRequested(LandRequest(target="y"), failing))
        later.set_exception(UnknownMemoError("no such workspace"))
        with pytest.raises(UnknownMemoError, match="no such workspace"):
            await asyncio.wait_for(failing, 5)

    asyncio.run(scenario())


def test_the_dashboards_land_action_answers_with_the_receipt(project: Project) -> None:
    from web_harness import start as start_web

    main = repository(project, {"builder": {"workspace": WORKTREE}, "planner": {}})
    dash = start_web(project, "--web", "127.0.0.1:0", WS_RECORD=str(project.root / "ws.jsonl"))
    try:
        built(project, "web", "write new.txt built")
        with sqlite3.connect(project.root / ".orchestrator" / "state.db") as db:
            (run_id,) = db.execute("SELECT run_id FROM runs WHERE role = 'builder'").fetchone()
        page = dash.get(f"/runs/{run_id}").text
        assert 'data-action="land" data-target="web"' in page and 'data-action="cancel"' not in page
        answer = dash.post("/api/v1/requests/land", {"target": "web"})
        assert answer.status_code == 200, answer.text
        receipt = answer.json()
        assert receipt["landed"] is True and receipt["workspace"] == "web" and receipt["into"] == "main", receipt
        assert receipt["commit"] == git(project.root, "rev-parse", "main") != main
        assert (project.root / "new.txt").exists()
        again = dash.post("/api/v1/requests/land", {"target": "web"}).json()
        assert again["landed"] is False and "nothing to land" in again["reason"], again
        project.drop("planner", "p.md", {"id": "p"}, body="plan")
        wait_for(lambda: project.folder("planner", "archive"), what="the planner's run")
        with sqlite3.connect(project.root / ".orchestrator" / "state.db") as db:
            (other,) = db.execute("SELECT run_id FROM runs WHERE role = 'planner'").fetchone()
        assert 'data-action="land"' not in dash.get(f"/runs/{other}").text, "a shared role's run has no workspace"
    finally:
        dash.close()
    assert dash.orch.stop() == 0


ORDERED = """
import os, pathlib, time
name = os.environ["ORCHESTRATOR_WORKSPACE"].rsplit("/", 1)[-1]
log = pathlib.Path(os.environ["ORCHESTRATOR_WORKSPACE"]).parents[1] / "order.out"
with log.open("a") as out:
    out.write(f"start {name}\\n")
end = time.monotonic() + 30
while not (log.parent / "go.out").exists() and time.monotonic() < end:
    time.sleep(0.02)
with log.open("a") as out:
    out.write(f"end {name}\\n")
"""


def test_a_graceful_stop_calls_off_a_queued_landing_instead_of_starting_it_when_the_run_ends(project: Project) -> None:
    """Nothing new starts once `up` ends: a landing queued behind a run was begun when the run ended, its check
    killed a moment later (found by a user-view review)."""
    repository(project, {"builder": {"workspace": {**WORKTREE, "check": [sys.executable, "-c", HELD]}}})
    start(project)
    built(project, "slow", "write a.txt first")
    project.drop("builder", "more.md", {"id": "more", "workspace": "slow"}, body="wait go.out\nwrite b.txt second")
    wait_for(lambda: len(records(project)) == 2, what="the second run at work")
    asked = subprocess.Popen(
        [*project.command, "land", "slow", "--root", str(project.root)],
        env=project.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: "landing slow waits for run" in project.procs[0].output, what="the landing queued")
        assert project.cli("stop").returncode == 0
        late = project.cli("land", "slow", timeout=20)  # asked while `up` ends: refused, not queued to be called off
        assert late.returncode == 1 and "the orchestrator is ending; ask again" in late.stderr, late.stderr
        (project.root / "go.out").touch()
        _, said = asked.communicate(timeout=60)
    finally:
        if asked.poll() is None:
            asked.kill()
            asked.communicate()
    assert asked.returncode == 1 and "called off: the orchestrator is ending" in said, said
    assert project.procs[0].wait() == 0
    assert "landing slow: the check" not in project.procs[0].output, "the landing was begun"
    assert landings(project) == [("slow", "refused")]


def test_landings_go_one_at_a_time_oldest_first_each_onto_the_last(project: Project) -> None:
    check = [sys.executable, "-c", ORDERED]
    repository(project, {"builder": {"workspace": {**WORKTREE, "check": check}, "max_concurrent": 3}})
    start(project)
    for count, name in enumerate(("a", "b", "c"), 1):
        built(project, name, f"write {name}.txt from {name}", count)
    order = project.root / "order.out"
    asked = []
    try:
        for number, name in enumerate(("a", "b", "c")):
            asked.append(
                subprocess.Popen(
                    [*project.command, "land", name, "--root", str(project.root)],
                    env=project.env(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
            if number == 0:
                wait_for(lambda: order.exists() and "start a" in order.read_text(), what="a's check under way")
            else:
                wait_for(lambda n=number: len(project.status().get("landings", [])) == n + 1, what="queued")
        assert order.read_text() == "start a\n", "one at a time"
        (project.root / "go.out").touch()
        answers = [proc.communicate(timeout=60) for proc in asked]
    finally:
        for proc in asked:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    assert [proc.returncode for proc in asked] == [0, 0, 0], answers
    assert order.read_text().split("\n")[:-1] == ["start a", "end a", "start b", "end b", "start c", "end c"]
    log = git(project.root, "log", "--format=%s", "main").splitlines()
    assert log[:3] == [f"builder: {name} (memo {name}, run {run})" for name, run in (("c", 3), ("b", 2), ("a", 1))]
    for name in ("a", "b", "c"):
        assert (project.root / f"{name}.txt").exists()
    assert project.procs[0].stop() == 0


def test_one_landing_into_a_branch_checked_out_nowhere_and_a_check_that_runs_too_long(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "--quiet", "--initial-branch=main")
    (root / "a.txt").write_text("a\n", encoding="utf-8")
    git(root, "add", "a.txt")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "first")
    git(root, "branch", "release")
    folder = tmp_path / "ws"
    git(root, "worktree", "add", "--quiet", "-b", "orchestrator/ws", str(folder), "main")
    (folder / "b.txt").write_text("b\n", encoding="utf-8")
    git(folder, "add", "b.txt")
    git(folder, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "work")
    plan = landing.Plan(root, "ws", folder, "orchestrator/ws", "release", identity=dict(IDENTITY))
    slow = dataclasses.replace(plan, check=(sys.executable, "-c", "import time; time.sleep(30)"), check_timeout=0.3)
    result = landing.land(slow)
    assert result.outcome == "check failed" and "took longer than 0.3s" in result.reason, result
    assert git(root, "rev-parse", "release") == git(root, "rev-parse", "main")
    missing = landing.land(dataclasses.replace(plan, check=("no-such-check-here",)))
    assert missing.outcome == "refused" and "could not start" in missing.reason and "roles.yaml" in missing.reason
    assert git(folder, "status", "--porcelain") == "" and git(folder, "log", "-1", "--format=%s") == "work"
    done = landing.land(plan)
    assert done.landed and git(root, "rev-parse", "release") == git(root, "rev-parse", "orchestrator/ws"), done
    assert not (root / "b.txt").exists(), "the root has main checked out: its files are not touched"
    into_the_worktree = dataclasses.replace(plan, into="orchestrator/ws", branch="orchestrator/ws")
    refused = landing.land(into_the_worktree)
    assert refused.outcome == "refused" and f"is checked out in {folder}" in refused.reason, refused


def test_a_landing_asked_while_a_run_waits_for_a_person_waits_for_its_answered_memo_then_lands(
    project: Project,
) -> None:
    main = repository(project, {"builder": {"workspace": WORKTREE}})
    start(project)
    body = "write half.txt begun\nask-unless answered.flag Which one?\nwrite done.txt done"
    project.drop("builder", "a.md", {"id": "asks"}, body=body)
    wait_for((project.root / "memo/builder/waiting/a.question").exists, what="a.md waiting for a person")
    done = project.cli("land", "asks", "--wait", "1")
    assert done.returncode == 11, done.stderr
    assert "landing asks: still waiting for a run waiting for a person" in done.stderr, done.stderr
    assert "landing asks waits for a run waiting for a person" in project.procs[0].output
    assert "run 0" not in project.procs[0].output
    shown = project.cli("status").stdout
    assert "landing: asks into its base: queued, waits for a run waiting for a person" in shown, shown
    assert git(project.root, "rev-parse", "main") == main, "not landed while the run waits"
    (project.root / "answered.flag").touch()
    assert project.cli("answer", "asks", "the first").returncode == 0
    wait_for(lambda: project.folder("builder", "archive") == ["a.md"], what="the answered memo ran, not held")
    wait_for(lambda: landings(project) == [("asks", "landed")], what="the landing, once the answered run ended")
    assert show(project, "main", "half.txt") == "begun" and show(project, "main", "done.txt") == "done"
    assert project.procs[0].stop() == 0


def test_a_landing_killed_while_its_check_runs_is_put_back_at_the_next_start(project: Project) -> None:
    waits = (  # a long check that says nothing: its orchestrator's death does not end it
        "import os, pathlib, sys, time\n"
        "pathlib.Path('checked.txt').write_text('left by the check')\n"
        "root, end = pathlib.Path(sys.argv[1]), time.monotonic() + 60\n"
        "(root / 'checking.out').write_text(str(os.getpid()))\n"
        "while not (root / 'go.out').exists() and time.monotonic() < end:\n"
        "    time.sleep(0.02)\n"
    )
    check = [sys.executable, "-c", waits, str(project.root)]
    repository(project, {"builder": {"workspace": {**WORKTREE, "check": check}}})
    up = project.up(WS_RECORD=str(project.root / "ws.jsonl"))
    built(project, "one", "write new.txt built")
    branch = git(project.root, "rev-parse", "orchestrator/one")
    main = commit_on_main(project, "other.txt", "from main\n")  # the rebase moves the branch
    asking = subprocess.Popen(
        [*project.command, "land", "one", "--root", str(project.root)], env=project.env(), stdout=subprocess.DEVNULL
    )
    workspace = project.root / ".orchestrator-workspaces" / "one"
    wait_for((project.root / "checking.out").exists, what="the landing's check at work")
    up.proc.kill()  # SIGKILL: no end of its own
    up.proc.wait(20)
    asking.wait(20)
    assert git(project.root, "rev-parse", "orchestrator/one") != branch, "rebased when it was killed"
    assert (workspace / "checked.txt").exists()
    check_pid = int((project.root / "checking.out").read_text(encoding="utf-8"))
    assert psutil.pid_exists(check_pid), "the check outlived its orchestrator"
    again = project.up(WS_RECORD=str(project.root / "ws.jsonl"))
    again.wait_output("orchestrator up:")  # (the killed one's socket is left: not a sign of this one's start)
    assert f"land it again; its check, still running, was stopped (pid {check_pid})" in again.output
    wait_for(lambda: not psutil.pid_exists(check_pid) or psutil.Process(check_pid).status() == "zombie", 10, "gone")
    assert git(project.root, "rev-parse", "orchestrator/one") == branch, "the branch where the landing found it"
    assert git(workspace, "symbolic-ref", "--short", "HEAD") == "orchestrator/one"
    assert git(workspace, "status", "--porcelain") == "" and not (workspace / "checked.txt").exists()
    again.wait_output("landing one into main was under way when the orchestrator ended: its rebase undone")
    assert git(project.root, "rev-parse", "main") == main, "main untouched"
    assert landings(project) == [("one", "refused")]
    project.drop("builder", "next.md", {"id": "next", "workspace": "one"}, body="write more.txt more")
    wait_for(lambda: "next.md" in project.folder("builder", "archive"), what="the next run in the workspace")
    assert git(project.root, "log", "-1", "--format=%s", "orchestrator/one").startswith("builder: next (memo next")
    assert git(project.root, "rev-parse", "orchestrator/one~1") == branch, (
        "committed on its branch, not a detached head"
    )
    (project.root / "go.out").touch()
    assert project.cli("land", "one").returncode == 0
    assert show(project, "main", "more.txt") == "more" and show(project, "main", "other.txt") == "from main"
    assert again.stop() == 0


def test_a_landing_killed_while_its_rebase_stopped_on_a_conflict_is_aborted_and_put_back(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "--quiet", "--initial-branch=main")
    (root / "a.txt").write_text("a\n", encoding="utf-8")
    git(root, "add", "a.txt")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "first")
    folder = tmp_path / "ws"
    git(root, "worktree", "add", "--quiet", "-b", "orchestrator/ws", str(folder), "main")
    for where, text in ((folder, "from the branch\n"), (root, "from main\n")):
        (where / "a.txt").write_text(text, encoding="utf-8")
        git(where, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-am", "edit")
    start = git(folder, "rev-parse", "HEAD")
    stopped = subprocess.run(["git", "rebase", "main"], cwd=folder, capture_output=True, text=True)
    assert stopped.returncode != 0 and not git(folder, "branch", "--show-current"), "stopped on the conflict"
    result = landing.interrupted(root, "ws", folder, "orchestrator/ws", "main", start)
    assert result.outcome == "refused" and "its rebase undone, orchestrator/ws put back at" in result.reason, result
    assert git(folder, "branch", "--show-current") == "orchestrator/ws" and git(folder, "rev-parse", "HEAD") == start
    assert git(folder, "status", "--porcelain") == ""
    untouched = landing.interrupted(root, "ws", folder, "orchestrator/ws", "main", start)
    assert "before it changed anything" in untouched.reason and git(folder, "rev-parse", "HEAD") == start


def scratch_workspace(tmp_path: Path) -> tuple[Path, Path, str]:
    """A repository with main, and a worktree on orchestrator/ws one commit ahead: (root, its folder, that commit)."""
    root, folder = tmp_path / "repo", tmp_path / "ws"
    root.mkdir()
    git(root, "init", "--quiet", "--initial-branch=main")
    (root / "a.txt").write_text("a\n", encoding="utf-8")
    git(root, "add", "a.txt")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "first")
    git(root, "worktree", "add", "--quiet", "-b", "orchestrator/ws", str(folder), "main")
    (folder / "b.txt").write_text("from the branch\n", encoding="utf-8")
    git(folder, "add", "b.txt")
    git(folder, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "work")
    return root, folder, git(folder, "rev-parse", "HEAD")


def test_a_landing_killed_after_its_target_moved_is_found_landed_and_left_as_it_is(tmp_path: Path) -> None:
    root, folder, landed = scratch_workspace(tmp_path)  # its one commit stands for the rebased work
    start = git(folder, "rev-parse", "HEAD~1")
    git(root, "branch", "release", start)
    git(root, "update-ref", "refs/heads/release", landed)  # fast-forwarded, then the kill before its record
    result = landing.interrupted(root, "ws", folder, "orchestrator/ws", "release", start)
    assert result.outcome == "landed" and result.commit == landed, result
    assert git(folder, "rev-parse", "HEAD") == landed and (folder / "b.txt").exists(), "not put back"


def test_a_landing_killed_after_a_fast_forward_with_nothing_to_rebase_is_found_landed(tmp_path: Path) -> None:
    """Its target had not moved: the rebase left the branch where it was, so the target holding it says it landed."""
    root, folder, start = scratch_workspace(tmp_path)
    git(root, "merge", "--quiet", "--ff-only", "orchestrator/ws")  # the fast-forward, then the kill
    result = landing.interrupted(root, "ws", folder, "orchestrator/ws", "main", start)
    assert result.outcome == "landed", result
    assert git(folder, "rev-parse", "HEAD") == start


def test_a_landing_put_back_at_a_restart_keeps_what_a_person_did_in_the_workspace_meanwhile(tmp_path: Path) -> None:
    root, folder, start = scratch_workspace(tmp_path)
    (folder / "p.txt").write_text("a person's commit\n", encoding="utf-8")
    git(folder, "add", "p.txt")
    git(folder, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "mine")
    (folder / "untracked.txt").write_text("in no commit\n", encoding="utf-8")
    result = landing.interrupted(root, "ws", folder, "orchestrator/ws", "main", start)
    assert result.outcome == "refused" and git(folder, "rev-parse", "HEAD") == start, result
    ref = result.reason.split("(what was there kept as ")[1].split(")")[0]
    assert git(root, "show", f"{ref}:p.txt") == "a person's commit"
    assert git(root, "show", f"{ref}:untracked.txt") == "in no commit" and not (folder / "untracked.txt").exists()


def test_a_person_commit_alone_in_a_workspace_put_back_at_a_restart_is_kept(tmp_path: Path) -> None:
    root, folder, start = scratch_workspace(tmp_path)
    (folder / "p.txt").write_text("a person's commit\n", encoding="utf-8")
    git(folder, "add", "p.txt")
    git(folder, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "mine")
    result = landing.interrupted(root, "ws", folder, "orchestrator/ws", "main", start)
    ref = result.reason.split("(what was there kept as ")[1].split(")")[0]
    assert git(root, "show", f"{ref}:p.txt") == "a person's commit" and git(folder, "rev-parse", "HEAD") == start


def test_a_landing_asked_before_the_start_has_put_back_what_a_kill_left_waits_for_it(tmp_path: Path) -> None:
    """`up`'s socket listens before its features open: a landing asked then must not start (nor be taken for one a
    killed orchestrator left) before the put-back is done."""
    from orchestrator.workspaces.extension import Workspaces
    from orchestrator.workspaces.land import Job

    async def scenario() -> None:
        from replay import Replay

        r = Replay(tmp_path, {"builder": {"workspace": {"mode": "worktree"}}})
        queue = r.sup.extension(Workspaces).landings
        plan = landing.Plan(tmp_path, "ws", tmp_path / "ws", "orchestrator/ws", None)
        done: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
        seq = land_records.asked(r.sup.store.db, "ws", "orchestrator/ws", None, "2026-12-04T00:00:00+00:00", "tester")
        job = Job(seq, plan, [], None, done)
        queue.jobs.append(job)
        queue.pump()
        assert job.state == "queued", "nothing lands before the put-back"
        await queue.recover()
        assert job.state == "landing", "then it lands"
        assert [row.seq for row in land_records.unfinished(r.sup.store.db)] == [job.seq], "not closed as a leftover"
        if job.task is not None:
            await asyncio.wait_for(job.task, 30)
        r.close()

    asyncio.run(scenario())
