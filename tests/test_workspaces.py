"""Workspaces (issue 35): a ``workspace: {mode: worktree}`` role's runs each work in a git worktree of their
conversation, and each attempt is a transaction on the work. Real git repositories in ``tmp_path`` driven by the
git CLI, a real ``orchestrator up`` and a small stand-in agent (``tests/agents/workspace_agent.py``)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import Project, wait_for
from orchestrator.commands.common import project_root
from orchestrator.config import load_config
from orchestrator.core.errors import ConfigError
from orchestrator.workspaces import git as workspace_git
from orchestrator.workspaces.git import safe_name

HERE = Path(__file__).parent
AGENT = [sys.executable, str(HERE / "agents" / "workspace_agent.py")]
WORKTREE = {"mode": "worktree"}


def git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def repository(project: Project, roles: dict[str, dict[str, Any]], **top: Any) -> str:
    """The project as a git repository on ``main`` with its team committed; the commit."""
    project.configure({name: {"command": AGENT, **settings} for name, settings in roles.items()}, **top)
    (project.root / ".gitignore").write_text("memo/\n.orchestrator/\n*.jsonl\n*.out\n", encoding="utf-8")
    (project.root / "shared.txt").write_text("as on main\n", encoding="utf-8")
    git(project.root, "init", "--quiet", "--initial-branch=main")
    git(project.root, "add", "--all")
    git(project.root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "the team")
    return git(project.root, "rev-parse", "main")


def records(project: Project) -> list[dict[str, Any]]:
    path = project.root / "ws.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def start(project: Project) -> None:
    project.up(WS_RECORD=str(project.root / "ws.jsonl"))


def show(project: Project, rev: str, path: str) -> str | None:
    done = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=project.root, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


# ------------------------------------------------------------------ configuration
def test_workspace_settings_merge_from_defaults_and_ray_is_refused(tmp_path: Path) -> None:
    project = Project(tmp_path)
    project.configure({"builder": {"workspace": {"key": "memo", "copy": [".env"]}}, "reviewer": {}})
    text = (tmp_path / "roles.yaml").read_text(encoding="utf-8")
    (tmp_path / "roles.yaml").write_text(text.replace("defaults:\n", "defaults:\n  workspace: {mode: worktree}\n"))
    config = load_config(tmp_path)
    assert config.roles["builder"].workspace.mode == "worktree" and config.roles["builder"].workspace.key == "memo"
    assert config.roles["builder"].workspace.copy_files == [".env"]
    assert config.roles["reviewer"].workspace.isolated and config.roles["reviewer"].workspace.key == "conversation"
    project.configure({"builder": {"workspace": WORKTREE}}, executor={"kind": "ray"})
    with pytest.raises(ConfigError, match=r"roles\.builder\.workspace\.mode: worktree is not yet supported"):
        load_config(tmp_path)
    project.configure({"builder": {"workspace": {"mode": "copy"}}})
    with pytest.raises(ConfigError, match="workspace"):
        load_config(tmp_path)


def test_a_safe_name_is_one_path_component_and_a_branch_name(tmp_path: Path) -> None:
    assert safe_name("20260101-120000-ab12") == "20260101-120000-ab12", "a safe key is its own name"
    assert safe_name("../../etc/passwd").startswith("etc-passwd-")
    assert safe_name("a..b.lock").startswith("a.b-") and safe_name("...").startswith("workspace-")
    keys = [
        "設計",
        "テスト",
        "設計-a",
        "テスト-a",
        "fix bug #1",
        "fix bug #1!",
        "x.lock.lock",
        "x" * 80 + "1",
        "x" * 81,
    ]
    names = [safe_name(key) for key in keys]
    assert len(set(names)) == len(keys), names  # keys that clean to the same letters never share a workspace
    git(tmp_path, "init", "--quiet")
    for name in names:
        assert safe_name(name) == name and len(name) <= 80, name  # what `orchestrator send` writes names it again
        assert workspace_git.succeeds(tmp_path, "check-ref-format", f"refs/heads/orchestrator/{name}"), name


def test_a_git_command_that_hangs_is_stopped_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's end waits for its git work: a git that never returns must not hold it (nor the shutdown) for ever."""
    stuck = tmp_path / "bin" / "git"
    stuck.parent.mkdir()
    stuck.write_text("#!/bin/sh\nexec sleep 30\n", encoding="utf-8")
    stuck.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stuck.parent}:{os.environ['PATH']}")
    monkeypatch.setattr(workspace_git, "TIMEOUT", 0.3)
    with pytest.raises(workspace_git.GitError, match=r"^git add --all took longer than 0\.3s in .*; stopped$"):
        workspace_git.git(tmp_path, "add", "--all")


def test_up_refuses_a_worktree_role_in_a_folder_that_is_not_a_git_repository(project: Project) -> None:
    project.configure({"builder": {"workspace": WORKTREE}})
    done = project.cli("up")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "roles.builder.workspace.mode: worktree needs a git repository" in lines[0], lines
    assert "git init" in lines[0]


def test_up_refuses_a_worktree_role_whose_project_root_is_a_folder_inside_the_repository(tmp_path: Path) -> None:
    git(tmp_path, "init", "--quiet")  # the project is a folder inside a repository
    (tmp_path / "team").mkdir()
    project = Project(tmp_path / "team")
    project.configure({"builder": {"workspace": WORKTREE}})
    done = project.cli("up")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "roles.builder.workspace.mode: worktree needs the project root at the top" in lines[0]
    assert "use mode: shared" in lines[0], lines


def test_a_command_run_inside_a_workspace_acts_on_the_project_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / ".orchestrator-workspaces" / "w"
    (workspace / "sub").mkdir(parents=True)
    monkeypatch.setenv("ORCHESTRATOR_ROOT", str(tmp_path))
    monkeypatch.setenv("ORCHESTRATOR_WORKSPACE", str(workspace))
    monkeypatch.chdir(workspace / "sub")
    assert project_root(argparse.Namespace(root=None)) == tmp_path
    assert project_root(argparse.Namespace(root=workspace)) == workspace, "--root still wins"
    monkeypatch.chdir(tmp_path.parent)
    assert project_root(argparse.Namespace(root=None)) == tmp_path.parent, "elsewhere: the current directory"


# ------------------------------------------------------------------ where a run works
def test_two_builders_at_once_each_edit_the_same_file_on_their_own_branch(project: Project) -> None:
    main = repository(project, {"builder": {"workspace": WORKTREE, "max_concurrent": 2}})
    start(project)
    project.drop("builder", "a.md", {"id": "one"}, body="write shared.txt from one\nwait go.out")
    project.drop("builder", "b.md", {"id": "two"}, body="write shared.txt from two\nwait go.out")
    wait_for(lambda: len(records(project)) == 2, what="both builders at work at once")
    (project.root / "go.out").touch()
    wait_for(lambda: project.folder("builder", "archive") == ["a.md", "b.md"], what="both done")
    seen = {Path(r["cwd"]).name: r for r in records(project)}
    assert sorted(seen) == ["one", "two"]
    for name, record in seen.items():
        assert record["cwd"] == str(project.root / ".orchestrator-workspaces" / name)
        assert record["env"]["ORCHESTRATOR_WORKSPACE"] == record["cwd"]
        assert record["env"]["ORCHESTRATOR_BRANCH"] == f"orchestrator/{name}"
        assert record["env"]["ORCHESTRATOR_BASE"] == "main"
        assert record["env"]["ORCHESTRATOR_MEMO"].startswith(str(project.root / "memo" / "builder")), "the root's"
    assert show(project, "orchestrator/one", "shared.txt") == "from one"
    assert show(project, "orchestrator/two", "shared.txt") == "from two"
    log = git(project.root, "log", "-1", "--format=%s", "orchestrator/one")
    assert log.startswith("builder: ") and "(memo one, run " in log, log
    assert (project.root / "shared.txt").read_text(encoding="utf-8") == "as on main\n", "the root is untouched"
    assert git(project.root, "rev-parse", "main") == main, "main is untouched"
    assert git(project.root, "status", "--porcelain") == ""
    assert project.procs[0].stop() == 0


def test_a_cancelled_run_leaves_its_file_only_in_an_attempt_ref(project: Project) -> None:
    repository(project, {"builder": {"workspace": WORKTREE}})
    start(project)
    project.drop("builder", "c.md", {"id": "cut"}, body="write half.txt half done\nwait never")
    wait_for(lambda: records(project), what="the builder at work")
    done = project.cli("cancel", "cut")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: project.folder("builder", "cancelled") == ["c.md"], what="the run cancelled")
    refs = git(project.root, "for-each-ref", "--format=%(refname)", "refs/orchestrator/attempts/cut/")
    assert len(refs.splitlines()) == 1 and refs.endswith("-1"), refs
    assert show(project, refs, "half.txt") == "half done"
    assert show(project, "orchestrator/cut", "half.txt") is None, "not on the branch"
    assert not (project.root / "half.txt").exists(), "not in the root"
    assert not (project.root / ".orchestrator-workspaces" / "cut" / "half.txt").exists(), "the workspace reset"
    assert "half.txt" in project.cli("diff", "cut", "--stat").stdout
    assert project.procs[0].stop() == 0


def attempts(project: Project) -> list[tuple[int, int, str | None, str | None]]:
    with sqlite3.connect(project.root / ".orchestrator" / "state.db") as db:
        return db.execute("SELECT run_id, attempt, outcome, ref FROM workspace_attempts ORDER BY run_id").fetchall()


def test_a_git_error_names_the_file_git_names_and_what_to_do(tmp_path: Path) -> None:
    git(tmp_path, "init", "--quiet")
    (tmp_path / ".git" / "index.lock").write_text("", encoding="utf-8")
    with pytest.raises(workspace_git.GitError) as caught:
        workspace_git.git(tmp_path, "add", "--all")
    said = str(caught.value)
    assert "index.lock': File exists" in said and "remove the file manually" in said and "\n" not in said, said


def test_a_failed_runs_work_its_end_could_not_settle_is_set_aside_at_the_next_start(project: Project) -> None:
    main = repository(project, {"builder": {"workspace": WORKTREE, "retry": {"max": 0}}})
    start(project)
    body = "write x.txt failed work\ncommit\nwrite ../../.git/worktrees/w/index.lock x\nexit 1"
    project.drop("builder", "a.md", {"id": "a", "workspace": "w"}, body=body)
    wait_for(lambda: project.folder("builder", "failed") == ["a.md"], what="a failed")
    wait_for(lambda: "index.lock': File exists" in project.procs[0].output, what="the error naming the lock")
    project.procs[0].wait_output("was not settled")
    assert show(project, "orchestrator/w", "x.txt") == "failed work", "its own commit left on the branch"
    (project.root / ".git" / "worktrees" / "w" / "index.lock").unlink()  # a person removes the lock
    project.drop("builder", "b.md", {"id": "b", "workspace": "w"}, body="see x.txt")
    wait_for(lambda: project.folder("builder", "archive") == ["b.md"], what="b done")
    assert records(project)[-1]["seen"] == {"x.txt": None}, "the next run starts where the failed one began"
    assert git(project.root, "rev-parse", "orchestrator/w") == main, "the failed run's branch put back"
    ref = git(project.root, "for-each-ref", "--format=%(refname)", "refs/orchestrator/attempts/w/")
    assert ref.endswith("-1") and show(project, ref, "x.txt") == "failed work", ref
    assert [row[2] for row in attempts(project)] == ["set aside", "unchanged"], attempts(project)
    assert project.procs[0].stop() == 0


def test_a_cancelled_waiting_memo_sets_its_work_aside_and_puts_the_branch_back(project: Project) -> None:
    main = repository(project, {"builder": {"workspace": WORKTREE}})
    start(project)
    body = "write c.txt committed\ncommit\nwrite u.txt uncommitted\nask-unless answered.flag Which?"
    project.drop("builder", "a.md", {"id": "a", "workspace": "w"}, body=body)
    wait_for((project.root / "memo/builder/waiting/a.question").exists, what="a.md waiting for a person")
    cancelled = project.cli("cancel", "a.md")
    assert cancelled.returncode == 0 and "(builder, was waiting): its question is withdrawn" in cancelled.stdout
    assert "it never ran" not in cancelled.stdout, cancelled.stdout  # it ran, and its work is set aside
    wait_for(lambda: project.folder("builder", "cancelled") == ["a.md"], what="a.md cancelled")
    ref = wait_for(
        lambda: git(project.root, "for-each-ref", "--format=%(refname)", "refs/orchestrator/attempts/w/"),
        what="its work set aside",
    )
    assert ref.endswith("-1") and show(project, ref, "c.txt") == "committed" and show(project, ref, "u.txt")
    assert git(project.root, "rev-parse", "orchestrator/w") == main, "the branch as it was"
    workspace = project.root / ".orchestrator-workspaces" / "w"
    assert git(workspace, "status", "--porcelain") == "" and not (workspace / "u.txt").exists()
    assert attempts(project)[0][2] == "set aside", attempts(project)
    assert project.procs[0].stop() == 0


def test_a_failed_attempts_file_is_not_seen_by_its_retry_and_a_success_is_committed(project: Project) -> None:
    repository(project, {"builder": {"workspace": WORKTREE, "retry": {"max": 1, "backoff": ["0.1s"]}}})
    start(project)
    body = "see junk.txt\nwrite junk.txt left by attempt 1\nfail-first\nwrite good.txt done"
    project.drop("builder", "f.md", {"id": "again", "subject": "do it twice"}, body=body)
    wait_for(lambda: project.folder("builder", "archive") == ["f.md"], what="the retry's success")
    first, second = records(project)
    assert first["seen"] == {"junk.txt": None} and second["seen"] == {"junk.txt": None}, "the retry starts clean"
    assert show(project, "orchestrator/again", "good.txt") == "done"
    assert show(project, "orchestrator/again", "junk.txt") == "left by attempt 1", "the retry wrote it again"
    subject = git(project.root, "log", "-1", "--format=%s", "orchestrator/again")
    assert subject.startswith("builder: do it twice (memo again, run "), subject
    kept = git(project.root, "for-each-ref", "--format=%(refname)", "refs/orchestrator/attempts/again/")
    assert kept.endswith("-1") and show(project, kept, "junk.txt") == "left by attempt 1"
    assert "good.txt" in project.cli("diff", "again", "--stat").stdout
    first_diff = project.cli("diff", "again", "--attempt", "1")
    assert "+left by attempt 1" in first_diff.stdout and "good.txt" not in first_diff.stdout
    assert project.procs[0].stop() == 0


def test_an_attempt_that_ends_mid_rebase_fails_its_work_set_aside_and_its_retry_starts_on_the_branch(
    project: Project,
) -> None:
    """A rebase stopped at a conflict leaves HEAD detached and conflict markers in the files: committing that put a
    commit on no branch while the log said "committed on orchestrator/...". It is a failed attempt now, its work
    kept under its attempt's ref, the rebase undone, and the retry works on the branch."""
    repository(project, {"builder": {"workspace": WORKTREE, "retry": {"max": 1, "backoff": ["0.1s"]}}})
    git(project.root, "checkout", "--quiet", "-b", "other")
    (project.root / "shared.txt").write_text("as on other\n", encoding="utf-8")
    git(project.root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-am", "other's line")
    git(project.root, "checkout", "--quiet", "main")
    start(project)
    body = "see shared.txt\nwrite shared.txt the builder's line\ncommit\nrebase-first other\nwrite done.txt done"
    project.drop("builder", "r.md", {"id": "clash"}, body=body)
    wait_for(lambda: project.folder("builder", "archive") == ["r.md"], what="the retry's success")
    out = project.procs[0].output
    assert "it left its workspace clash in the middle of a rebase: nothing was committed on orchestrator/clash" in out
    first, second = records(project)
    assert second["seen"] == {"shared.txt": "as on main"}, "the retry starts on the branch, the rebase undone"
    (kept,) = git(project.root, "for-each-ref", "--format=%(refname)", "refs/orchestrator/attempts/clash/").split()
    assert "<<<<<<<" in (show(project, kept, "shared.txt") or ""), "the attempt's work, conflict and all, is kept"
    assert show(project, "orchestrator/clash", "done.txt") == "done"
    assert show(project, "orchestrator/clash", "shared.txt") == "the builder's line"
    folder = Path(second["cwd"])
    assert git(folder, "status", "--porcelain") == "" and git(folder, "rev-parse", "--abbrev-ref", "HEAD") == (
        "orchestrator/clash"
    )
    assert project.procs[0].stop() == 0


def test_an_agent_that_committed_its_work_itself_gets_no_second_commit(project: Project) -> None:
    repository(project, {"builder": {"workspace": WORKTREE}})
    start(project)
    project.drop("builder", "s.md", {"id": "self"}, body="write own.txt mine\ncommit")
    wait_for(lambda: project.folder("builder", "archive") == ["s.md"], what="the run done")
    assert git(project.root, "log", "-1", "--format=%s", "orchestrator/self") == "the agent's own commit"
    assert project.procs[0].stop() == 0


def test_a_builders_send_takes_the_reviewer_into_the_same_workspace(project: Project) -> None:
    repository(project, {"builder": {"workspace": WORKTREE}, "reviewer": {"workspace": WORKTREE}})
    start(project)
    project.drop("builder", "h.md", {"id": "hand"}, body="write work.txt built\nsend reviewer see work.txt")
    wait_for(lambda: len(records(project)) == 2, what="the reviewer's run")
    builder, reviewer = records(project)
    assert builder["sent"] == 0
    assert reviewer["cwd"] == builder["cwd"] == str(project.root / ".orchestrator-workspaces" / "hand")
    assert reviewer["seen"] == {"work.txt": "built"}
    sent = project.folder("reviewer", "archive") or project.folder("reviewer", "active")
    text = (
        project.root
        / "memo"
        / "reviewer"
        / ("archive" if project.folder("reviewer", "archive") else "active")
        / sent[0]
    ).read_text()
    assert "workspace: hand" in text, "the memo carries its workspace"
    assert not list((project.root / ".orchestrator-workspaces" / "hand").glob("memo")), "sent to the root"
    assert project.procs[0].stop() == 0


def test_a_second_memo_for_a_busy_workspace_waits_for_its_run(project: Project) -> None:
    repository(project, {"builder": {"workspace": WORKTREE, "max_concurrent": 2}})
    start(project)
    project.drop("builder", "a.md", {"id": "busy"}, body="write x.txt from a\nwait go.out")
    wait_for(lambda: records(project), what="the first run at work")
    project.drop("builder", "b.md", {"id": "later", "workspace": "busy"}, body="see x.txt")
    wait_for(lambda: "waits for workspace busy" in project.procs[0].output, what="the second memo waiting")
    assert len(records(project)) == 1 and project.folder("builder", "inbox") == ["b.md"], "it waits in the inbox"
    (project.root / "go.out").touch()
    wait_for(lambda: project.folder("builder", "archive") == ["a.md", "b.md"], what="both done, one after the other")
    first, second = records(project)[0], records(project)[-1]
    assert second["cwd"] == first["cwd"] and second["seen"] == {"x.txt": "from a"}
    assert project.procs[0].stop() == 0


def test_memos_for_another_workspace_pass_the_memos_that_wait_for_a_busy_one(project: Project) -> None:
    """A memo for a workspace a run works in waits in the inbox, holding no slot; the role's memo for another
    workspace behind it starts meanwhile (before, the wait was in order and held it too), and the memos for the busy
    workspace keep their order: when its run ends, one pass starts the next there and leaves the one after queued."""
    repository(project, {"builder": {"workspace": WORKTREE, "max_concurrent": 3}})
    start(project)
    project.drop("builder", "a.md", {"id": "busy"}, body="write x.txt from a\nwait go1.out")
    wait_for(lambda: records(project), what="the first run at work")
    project.drop("builder", "b.md", {"id": "b", "workspace": "busy"}, body="wait go2.out")
    project.drop("builder", "c.md", {"id": "free"}, body="write y.txt y")
    project.drop("builder", "d.md", {"id": "d", "workspace": "busy"}, body="see x.txt")
    wait_for(lambda: "c.md" in project.folder("builder", "archive"), what="the other workspace's memo run meanwhile")
    assert project.folder("builder", "inbox") == ["b.md", "d.md"], "the busy workspace's memos wait in the inbox"
    wait_for(lambda: "waits for workspace busy" in project.procs[0].output, what="the role held for them")
    snap = project.status()
    assert [(r["memo"], r["state"]) for r in snap["runs"]] == [("a.md", "running")]
    assert [(w["memo"], w["reason"]) for w in snap["memo_waits"]] == [
        (name, "waits for workspace busy (run 1)") for name in ("b.md", "d.md")
    ]
    assert "in the inbox: builder/b.md waits for workspace busy (run 1)" in project.cli("status").stdout
    (project.root / "go1.out").touch()
    wait_for(
        lambda: [(r["memo"], r["state"]) for r in project.status()["runs"]] == [("b.md", "running")],
        what="the next memo of the workspace at work",
    )
    assert project.folder("builder", "inbox") == ["d.md"], "the one after it waits in the inbox, holding no slot"
    (project.root / "go2.out").touch()
    wait_for(lambda: project.folder("builder", "archive") == ["a.md", "b.md", "c.md", "d.md"], what="all done")
    last = records(project)[-1]
    assert last["memo"] == "d.md" and last["cwd"] == records(project)[0]["cwd"]
    assert records(project)[1]["memo"] == "c.md" and records(project)[1]["cwd"] != records(project)[0]["cwd"]
    assert project.procs[0].stop() == 0


def test_a_reply_to_a_reply_that_waits_in_the_inbox_is_in_its_conversation_and_waits_behind_it(
    project: Project,
) -> None:
    """The memo index knows a memo once it is claimed, so c (reply_to b, b waiting in the inbox for a's workspace)
    was named after b, a free workspace, and ran at once, before b and without a's work (found by a review)."""
    repository(project, {"builder": {"workspace": WORKTREE, "max_concurrent": 3}})
    start(project)
    project.drop("builder", "a.md", {"id": "a"}, body="write x.txt from-a\nwait go1.out")
    wait_for(lambda: records(project), what="a at work")
    project.drop("builder", "b.md", {"id": "b", "reply_to": "a"}, body="see x.txt\nwrite y.txt from-b")
    project.drop("builder", "c.md", {"id": "c", "reply_to": "b"}, body="see y.txt")
    wait_for(
        lambda: len(records(project)) > 1 or len(project.status().get("memo_waits") or ()) == 2,
        what="c waiting or started",
    )
    assert project.folder("builder", "inbox") == ["b.md", "c.md"], "c waits for its conversation's workspace"
    (project.root / "go1.out").touch()
    wait_for(lambda: len(project.folder("builder", "archive")) == 3, what="all done")
    first, second, third = records(project)
    assert [second["memo"], third["memo"]] == ["b.md", "c.md"]
    assert third["cwd"] == first["cwd"] and third["seen"] == {"y.txt": "from-b"}
    assert project.procs[0].stop() == 0


def test_a_retry_is_not_held_by_the_memos_that_wait_for_its_own_workspace(project: Project) -> None:
    """A run waiting for its retry keeps its workspace, so the role's next memo for it waits; the retry itself
    starts (before, the role was held for that memo, and the retry waited for the run it belongs to)."""
    repository(project, {"builder": {"workspace": WORKTREE, "retry": {"max": 1, "backoff": ["0.1s"]}}})
    start(project)
    project.drop("builder", "f.md", {"id": "again"}, body="wait go.out\nfail-first\nwrite z.txt done")
    wait_for(lambda: records(project), what="the first attempt at work")
    project.drop("builder", "g.md", {"id": "next", "workspace": "again"}, body="see z.txt")
    wait_for(lambda: "waits for workspace again" in project.procs[0].output, what="the follow-up waiting")
    (project.root / "go.out").touch()
    wait_for(lambda: project.folder("builder", "archive") == ["f.md", "g.md"], what="the retry, then the follow-up")
    assert records(project)[-1]["seen"] == {"z.txt": "done"}, "the follow-up saw the retry's work"
    assert project.procs[0].stop() == 0


def test_a_run_waiting_for_its_retry_across_a_kill_of_up_keeps_its_workspace(project: Project) -> None:
    """Found by a review: taken back after a restart, a run waiting for its retry no longer owned its workspace, so
    the conversation's next memo ran there during the pause and the retry's start reset the branch under it."""
    repository(project, {"builder": {"workspace": WORKTREE, "retry": {"max": 1, "backoff": ["3s"]}}})
    start(project)
    project.drop("builder", "a.md", {"id": "again"}, body="fail-first\nwrite a.txt from the retry")
    wait_for(lambda: any(r["state"] == "retry_wait" for r in project.status()["runs"]), what="a waiting for its retry")
    project.procs[0].kill()
    start(project)
    project.drop("builder", "b.md", {"id": "next", "workspace": "again"}, body="see a.txt\nwrite b.txt from b")
    wait_for(lambda: project.folder("builder", "archive") == ["a.md", "b.md"], what="the retry, then b")
    first, retry, after = records(project)
    assert (retry["memo"], after["memo"]) == ("a.md", "b.md") and after["seen"] == {"a.txt": "from the retry"}
    assert show(project, "orchestrator/again", "b.txt") == "from b" and show(project, "orchestrator/again", "a.txt")
    assert project.procs[-1].stop() == 0


def test_a_forced_stop_sets_the_attempts_work_aside(project: Project) -> None:
    repository(project, {"builder": {"workspace": WORKTREE}})
    orchestrator = project.up(WS_RECORD=str(project.root / "ws.jsonl"))
    project.drop("builder", "s.md", {"id": "stopped"}, body="write part.txt part\nwait never.out")
    wait_for(lambda: records(project), what="the builder at work")
    assert project.cli("stop", "--force").returncode == 0
    orchestrator.wait()
    assert project.folder("builder", "inbox") == ["s.md"], "its memo back in the inbox"
    refs = git(project.root, "for-each-ref", "--format=%(refname)", "refs/orchestrator/attempts/stopped/")
    assert show(project, refs, "part.txt") == "part"
    assert not (project.root / ".orchestrator-workspaces" / "stopped" / "part.txt").exists()
    assert show(project, "orchestrator/stopped", "part.txt") is None


@pytest.mark.os_level
def test_after_a_crash_an_adopted_run_commits_and_a_run_found_dead_is_set_aside(project: Project) -> None:
    import os
    import signal

    repository(project, {"builder": {"workspace": WORKTREE, "max_concurrent": 2}})
    orchestrator = project.up(WS_RECORD=str(project.root / "ws.jsonl"))
    project.drop("builder", "k.md", {"id": "kept"}, body="write done.txt finished\nwait go.out")
    project.drop("builder", "d.md", {"id": "dead"}, body="write half.txt half done\nwait never.out")
    agents = wait_for(lambda: len(records(project)) == 2 and records(project), what="both builders at work")
    orchestrator.signal(signal.SIGKILL)
    orchestrator.wait()
    dead = next(r for r in agents if r["memo"] == "d.md")
    os.kill(dead["pid"], signal.SIGKILL)  # its agent dies while no orchestrator runs
    wait_for(lambda: not Path(f"/proc/{dead['pid']}").exists() or _zombie(dead["pid"]), what="the agent gone")
    again = project.up(WS_RECORD=str(project.root / "ws.jsonl"))
    again.wait_output("orchestrator up:")
    wait_for(lambda: project.folder("builder", "failed") == ["d.md"], what="the dead run failed")
    refs = git(project.root, "for-each-ref", "--format=%(refname)", "refs/orchestrator/attempts/dead/")
    assert len(refs.splitlines()) == 1, refs
    assert show(project, refs, "half.txt") == "half done", "its work kept under an attempt ref"
    assert show(project, "orchestrator/dead", "half.txt") is None, "not on the branch"
    assert not (project.root / ".orchestrator-workspaces" / "dead" / "half.txt").exists(), "the workspace reset"
    (project.root / "go.out").touch()
    wait_for(lambda: project.folder("builder", "archive") == ["k.md"], what="the adopted run's success")
    assert show(project, "orchestrator/kept", "done.txt") == "finished", "the adopted run's work committed"
    assert git(project.root, "status", "--porcelain") == ""
    assert again.stop() == 0


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


SETUP = """
import pathlib, sys
count = pathlib.Path.cwd().parents[1] / "setup-count.out"
runs = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(runs))
if runs == 1:
    sys.exit("npm said no")
"""


def test_a_failed_setup_fails_the_attempt_and_runs_again_then_never_more(project: Project) -> None:
    setup = [sys.executable, "-c", SETUP]
    repository(
        project, {"builder": {"workspace": {**WORKTREE, "setup": setup}, "retry": {"max": 1, "backoff": ["0.1s"]}}}
    )
    start(project)
    project.drop("builder", "a.md", {"id": "set"}, body="write a.txt x")
    wait_for(lambda: project.folder("builder", "archive") == ["a.md"], what="the second attempt's success")
    assert (
        "attempt 1 failed: could not prepare the start: workspace set: setup" in project.procs[0].output
        and "npm said no" in project.procs[0].output
    )
    project.drop("builder", "b.md", {"id": "again", "workspace": "set"}, body="see a.txt")
    wait_for(lambda: project.folder("builder", "archive") == ["a.md", "b.md"], what="the next memo done")
    assert (project.root / "setup-count.out").read_text() == "2", "set up again after its failure, then reused"
    assert records(project)[-1]["seen"] == {"a.txt": "x"}
    assert project.procs[0].stop() == 0


SLOW_SETUP = """
import os, pathlib, time
root = pathlib.Path.cwd().parents[1]
with open(root / "setup-pids.out", "a") as out:
    out.write(f"{os.getpid()}\\n")
end = time.monotonic() + 30
while not (root / "setup-go.out").exists() and time.monotonic() < end:
    time.sleep(0.02)
"""


def test_a_setup_left_running_by_a_killed_orchestrator_is_stopped_before_the_next_one(
    project: Project,
) -> None:
    """Found by a user-view review: after a SIGKILL of `up` during a workspace's setup, the restart ran the setup
    again beside the one left running, in the same worktree."""
    setup = [sys.executable, "-c", SLOW_SETUP]
    repository(
        project, {"builder": {"workspace": {**WORKTREE, "setup": setup}, "retry": {"max": 1, "backoff": ["0.1s"]}}}
    )
    start(project)
    pids = project.root / "setup-pids.out"
    project.drop("builder", "a.md", {"id": "set"}, body="write a.txt x")
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 1, what="the setup under way")
    project.procs[0].kill()
    start(project)
    wait_for(lambda: len(pids.read_text().split()) == 2, what="the setup made again")
    first = int(pids.read_text().split()[0])
    wait_for(lambda: _zombie(first), what="the setup left behind stopped")
    (project.root / "setup-go.out").touch()
    wait_for(lambda: project.folder("builder", "archive") == ["a.md"], what="the memo done")
    (record,) = records(project)
    assert record["env"]["ORCHESTRATOR_ATTEMPT"] == "2", "the attempt being started counts (a crash loop ends)"
    assert project.procs[-1].stop() == 0


def test_a_setup_past_its_timeout_is_stopped_with_its_children_and_one_that_cannot_start_says_so(
    tmp_path: Path,
) -> None:
    from orchestrator.agents.spec import SpawnError
    from orchestrator.config.workspace import WorkspaceSettings
    from orchestrator.workspaces.copying import provision

    git(tmp_path, "init", "--quiet")
    child, daemon = tmp_path / "child.pid", tmp_path / "daemon.pid"
    spawner = (
        "import subprocess, time; p = subprocess.Popen(['sleep', '30']); "
        "d = subprocess.Popen(['sleep', '30'], start_new_session=True); "  # holds the setup's output, in no group of it
        f"open({str(daemon)!r}, 'w').write(str(d.pid)); open({str(child)!r}, 'w').write(str(p.pid)); time.sleep(30)"
    )
    slow = WorkspaceSettings.model_validate(
        {"mode": "worktree", "setup": [sys.executable, "-c", spawner], "setup_timeout": "1s"}
    )
    with pytest.raises(SpawnError, match=r"took longer than 1s"):
        provision(tmp_path, slow, tmp_path)
    assert not _zombie(int(daemon.read_text())), "given up at its timeout, not when what it left behind ended"
    os.kill(int(daemon.read_text()), signal.SIGKILL)
    wait_for(lambda: _zombie(int(child.read_text())), what="the setup's child stopped with it")
    missing = WorkspaceSettings.model_validate({"mode": "worktree", "setup": ["no-such-program-here"]})
    with pytest.raises(SpawnError, match=r"^setup 'no-such-program-here' could not start: No such file or directory$"):
        provision(tmp_path, missing, tmp_path)


def test_six_ends_at_once_beside_new_starts_all_commit(project: Project) -> None:
    repository(project, {"builder": {"workspace": WORKTREE, "max_concurrent": 6}}, max_concurrent=8)
    start(project)
    names = [f"w{i}" for i in range(6)]
    for name in names:
        project.drop("builder", f"{name}.md", {"id": name}, body=f"write made.txt by {name}\nwait go.out")
    wait_for(lambda: len(records(project)) == 6, what="six builders at work at once")
    (project.root / "go.out").touch()  # all six end together, their commits in parallel
    late = [f"z{i}" for i in range(4)]
    for name in late:  # while new workspaces are made beside them
        project.drop("builder", f"{name}.md", {"id": name}, body=f"write made.txt by {name}")
    everyone = sorted(f"{n}.md" for n in names + late)
    wait_for(lambda: project.folder("builder", "archive") == everyone, what="all ten done")
    for name in names + late:
        assert show(project, f"orchestrator/{name}", "made.txt") == f"by {name}", name
    assert "not settled" not in project.procs[0].output and "set aside" not in project.procs[0].output
    assert project.procs[0].stop() == 0
