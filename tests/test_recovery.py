"""Start-up reconciliation (``recovery.recover``) with a real lifecycle over a database and folders left by a dead orchestrator.

The supervisor is replaced by the few attributes ``recover`` reads; the processes are
real (small ``sys.executable`` children carrying the ORCHESTRATOR_* variables an agent has).
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from conftest import Project, pid_alive, wait_for
from orchestrator.agents.proc_table import KEY_ENV
from orchestrator.config import load_config
from orchestrator.console import Console
from orchestrator.core.clock import SystemClock
from orchestrator.store import Store
from orchestrator.supervisor.announce import Announcer
from orchestrator.supervisor.lifecycle import Lifecycle
from orchestrator.supervisor.recovery import recover
from orchestrator.supervisor.slots import Slots

# an "agent": starts a grandchild in its own group, reports the grandchild's pid, then sleeps
AGENT = "import subprocess, time; c = subprocess.Popen(['sleep', '300']); print(c.pid, flush=True); time.sleep(300)"


class Rig:
    """A project root, its database and a stand-in for the supervisor, as ``recover`` sees them."""

    def __init__(self, project: Project) -> None:
        project.configure({"builder": {"grace": "0.5s"}, "pm": {}})
        self.project = project
        self.root = project.root
        self.config = load_config(self.root)
        self.store = Store(self.config.state_dir / "state.db")
        self.out = io.StringIO()
        self.console = Console(None, stream=self.out, live=False)
        clock = SystemClock()
        slots = Slots({name: role.limit for name, role in self.config.roles.items()}, self.config.max_concurrent)
        self.lifecycle = Lifecycle(
            self.config,
            self.store,
            self.console,
            clock,
            slots,
            Announcer(self.config, self.store, self.console, clock),
            post=lambda _event: None,
        )
        self.children: list[subprocess.Popen[str]] = []
        self.grandchildren: list[int] = []

    def memo(self, role: str, folder: str, name: str) -> Path:
        path = self.config.role_dir(role) / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\nid: {name}\n---\nbody\n", encoding="utf-8")
        return path

    def run(self, role: str, state: str, memos: list[str], attempt: int = 1) -> int:
        return self.store.insert_run(role=role, memos=memos, memo_ids=[None] * len(memos), state=state, attempt=attempt)

    def agent(self, run_id: int, root: Path | None = None, key: str | None = None) -> tuple[int, int]:
        """A live agent of ``run_id`` (in its own session, like ours) and its grandchild: (pid, grandchild); with a
        ``key``, a Ray agent of the project of that key."""
        env = {**os.environ, "ORCHESTRATOR_ROOT": str(root or self.config.root), "ORCHESTRATOR_RUN_ID": str(run_id)}
        env.update({KEY_ENV: key} if key else {})
        proc = subprocess.Popen(
            [sys.executable, "-c", AGENT], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        self.children.append(proc)
        assert proc.stdout is not None
        grandchild = int(proc.stdout.readline())
        self.grandchildren.append(grandchild)
        return proc.pid, grandchild

    def bystander(self) -> int:
        """A process that is none of the orchestrator's business."""
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
        self.children.append(proc)
        return proc.pid

    def recover(self) -> str:
        asyncio.run(recover(self.config, self.store, self.console, self.lifecycle))
        return self.out.getvalue()

    def folder(self, role: str, folder: str) -> list[str]:
        return self.project.folder(role, folder)

    def close(self) -> None:
        for pid in self.grandchildren:  # a test may leave some alive on purpose (another project's)
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
        for proc in self.children:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(5)
            except ChildProcessError:
                pass
            if proc.stdout is not None:
                proc.stdout.close()
        self.store.close()


@pytest.fixture
def rig(project):
    rig = Rig(project)
    yield rig
    rig.close()


@pytest.mark.os_level
def test_a_live_agent_is_stopped_with_its_tree_and_its_memo_returned(rig):
    rig.memo("builder", "active", "a.md")
    run_id = rig.run("builder", "running", ["a.md"], attempt=2)
    pid, grandchild = rig.agent(run_id)
    rig.store.update_run(run_id, pid=pid, create_time=psutil.Process(pid).create_time())

    out = rig.recover()
    wait_for(lambda: not pid_alive(pid) and not pid_alive(grandchild), timeout=5, what="the orphan tree dead")
    assert rig.folder("builder", "active") == []
    assert rig.folder("builder", "inbox") == ["a.md"]
    assert rig.store.memo_attempts("builder", "a.md") == 2, "the attempt count is kept"
    row = rig.store.run(run_id)
    assert row["state"] == "returned"
    assert row["ended_at"] and "stopped its agent" in row["reason"] and "memo returned to the inbox" in row["reason"]
    assert f"recovery: run {run_id} was running when the orchestrator stopped; stopped its agent" in out
    assert str(pid) in out and str(grandchild) in out
    assert (
        "warning: a.md was in active/ when the orchestrator stopped; back in the inbox as a.md (2 attempt(s) so far)"
    ) in out


def test_an_agent_whose_pid_was_not_recorded_is_found_by_its_run_id(rig):
    rig.memo("builder", "active", "b.md")
    run_id = rig.run("builder", "running", ["b.md"])  # died between spawn and recording the pid
    pid, grandchild = rig.agent(run_id)
    rig.recover()
    wait_for(lambda: not pid_alive(pid) and not pid_alive(grandchild), timeout=5, what="the unrecorded agent dead")
    assert rig.folder("builder", "inbox") == ["b.md"]
    assert rig.store.run(run_id)["state"] == "returned"


def test_attempt_counts_by_state(rig):
    for name in ("q.md", "w.md", "t.md"):
        rig.memo("builder", "active", name)
    queued = rig.run("builder", "queued", ["q.md"], attempt=3)  # claimed, never started: 2 attempts so far
    waiting = rig.run("builder", "retry_wait", ["w.md"], attempt=2)  # attempt 2 failed, waiting for the third
    timing_out = rig.run("builder", "timing_out", ["t.md"], attempt=1)
    dead = rig.bystander()
    rig.store.update_run(timing_out, pid=dead, create_time=psutil.Process(dead).create_time())
    rig.children[-1].kill()
    rig.children[-1].wait(5)
    out = rig.recover()
    assert rig.store.memo_attempts("builder", "q.md") == 2
    assert rig.store.memo_attempts("builder", "w.md") == 2
    assert rig.store.memo_attempts("builder", "t.md") == 1
    for run_id in (queued, waiting, timing_out):
        assert rig.store.run(run_id)["state"] == "returned"
    assert f"run {timing_out} was timing_out when the orchestrator stopped; no agent was alive" in out
    assert rig.folder("builder", "inbox") == ["q.md", "t.md", "w.md"]
    assert rig.folder("builder", "active") == []


def test_finished_runs_and_other_folders_are_left_alone(rig):
    rig.memo("builder", "archive", "done.md")
    rig.memo("builder", "failed", "bad.md")
    rig.memo("pm", "inbox", "waiting.md")
    finished = {
        state: rig.run("builder", state, ["done.md"])
        for state in ("succeeded", "failed", "cancelled", "timed_out", "returned")
    }
    out = rig.recover()
    for state, run_id in finished.items():
        assert rig.store.run(run_id)["state"] == state
    assert rig.folder("builder", "archive") == ["done.md"]
    assert rig.folder("builder", "failed") == ["bad.md"]
    assert rig.folder("pm", "inbox") == ["waiting.md"]
    assert out == ""


def test_a_memo_in_active_without_a_run_goes_back(rig):
    rig.memo("pm", "active", "lost.md")  # the orchestrator died between the claim and recording the run
    (rig.config.role_dir("pm") / "active" / ".hidden.md").write_text("x", encoding="utf-8")
    out = rig.recover()
    assert rig.folder("pm", "inbox") == ["lost.md"]
    assert rig.store.memo_attempts("pm", "lost.md") == 0
    assert (
        "warning: lost.md was in active/ when the orchestrator stopped; back in the inbox as lost.md (0 attempt(s)"
        in out
    )
    assert (rig.config.role_dir("pm") / "active" / ".hidden.md").exists(), "only memo names are moved"


def test_a_name_clash_in_the_inbox_keeps_both_memos_and_the_right_counts(rig):
    rig.memo("builder", "active", "same.md")
    rig.memo("builder", "inbox", "same.md")  # a new memo under the same name arrived meanwhile
    rig.run("builder", "retry_wait", ["same.md"], attempt=2)
    out = rig.recover()
    assert rig.folder("builder", "inbox") == ["same.1.md", "same.md"]
    assert rig.store.memo_attempts("builder", "same.1.md") == 2, "the returned memo keeps its count"
    assert rig.store.memo_attempts("builder", "same.md") == 0, "the new memo starts afresh"
    assert "back in the inbox as same.1.md (2 attempt(s) so far)" in out


@pytest.mark.os_level
def test_a_reused_pid_is_never_signalled(rig):
    rig.memo("builder", "active", "r.md")
    run_id = rig.run("builder", "running", ["r.md"])
    stranger = rig.bystander()  # holds the recorded pid now, but started at another time and carries no run id
    rig.store.update_run(run_id, pid=stranger, create_time=psutil.Process(stranger).create_time() - 1000)
    out = rig.recover()
    assert pid_alive(stranger)
    assert rig.folder("builder", "inbox") == ["r.md"]
    assert "no agent was alive" in out


@pytest.mark.os_level
def test_leftover_processes_of_unknown_runs_are_stopped_but_not_other_projects(rig, tmp_path_factory):
    pid, grandchild = rig.agent(4242)  # a run id the database does not know
    other_root = tmp_path_factory.mktemp("other-project")
    foreign, foreign_grandchild = rig.agent(4242, root=other_root)
    same_path = rig.agent(4343, key="another-project")  # a Ray agent of a project at the same path elsewhere
    out = rig.recover()
    wait_for(lambda: not pid_alive(pid) and not pid_alive(grandchild), timeout=5, what="the leftover tree dead")
    assert "recovery: stopped 2 leftover process(es) of run 4242" in out
    assert pid_alive(foreign) and pid_alive(foreign_grandchild), "another project's agents are not ours"
    assert all(pid_alive(p) for p in same_path) and "run 4343" not in out, "nor those of one at the same path"


def test_a_cancel_under_way_when_the_orchestrator_died_is_finished_at_restart(project: Project) -> None:
    """The person's decision outlives the orchestrator: the memo ends in cancelled/, never back in the inbox."""
    rig = Rig(project)
    try:
        rig.memo("builder", "active", "B-9.md")
        run_id = rig.run("builder", "cancelling", ["B-9.md"], attempt=2)
        rig.store.update_run(run_id, reason="cancelled by alice: called off")
        pid, grandchild = rig.agent(run_id)
        out = rig.recover()
        wait_for(lambda: not pid_alive(pid) and not pid_alive(grandchild), what="the agent and its grandchild dead")
        assert rig.folder("builder", "cancelled") == ["B-9.md"]
        assert rig.folder("builder", "inbox") == [] and rig.folder("builder", "active") == []
        row = rig.store.run(run_id)
        assert row is not None and row["state"] == "cancelled"
        assert "called off" in row["reason"] and "restart" in row["reason"]
        record = rig.store.cancellation_of("B-9")
        assert record is not None and record["previous_state"] == "cancelling"
        assert "cancelled B-9" in out
    finally:
        rig.close()
