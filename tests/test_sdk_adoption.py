"""SDK runs outlive the orchestrator: SIGKILLed and restarted, it adopts a live runner or finishes an ended one.

Real ``orchestrator up`` processes, the real runner under its keeper, the fake
Claude Code CLI (``tests/fake_claude.py``). The runner serves its events over a
Unix socket in ``.orchestrator/runs/<run_id>/`` and keeps an event log and a
result file beside it, so a restart costs an SDK run nothing: not a rerun, not
a kill, not its figures.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from test_sdk import (
    claude_records,
    db_rows,
    ended_in,
    gate,
    open_gate,
    recorded,
    run_row,
    running_with,
    sdk_role,
    transcript,
)

from conftest import Project, loud_lines, pid_alive, wait_for
from orchestrator.supervisor.recovery import orphan_run_ids

FAILURE_WORDS = "overloaded"


def kill_orchestrator(orch) -> None:  # type: ignore[no-untyped-def]
    orch.signal(9)
    orch.wait()


def run_folder(project: Project, run_id: int) -> Path:
    return project.root / ".orchestrator" / "runs" / str(run_id)


def test_an_sdk_run_mid_turn_is_adopted_and_still_takes_tell_and_interrupt(project: Project, fake_cli: Path) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, grace="10s", fake={"cost": "0.25"})})
    first = project.up()
    one, two = gate(project, "turn1"), gate(project, "turn2")
    project.drop("writer", "W-1.md", {"id": "W-1"}, body=f"[wait:{one}] first")
    running_with(project, "W-1.md", activity="Bash: echo working")
    assert project.cli("tell", "W-1", f"[wait:{two}] second").returncode == 0
    open_gate(one)  # the first turn ends and costs 0.25; the tell is the second turn, which waits
    live = running_with(project, "W-1.md", cost_usd=0.25)
    wait_for(lambda: len(recorded(project, "prompt")) == 2, what="the second turn to reach the CLI")
    runner_pid, cli_pid, run_id = live["pid"], recorded(project, "pid")[0], live["run_id"]

    folder = run_folder(project, run_id)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    sock = folder / "1.sock"
    assert stat.S_ISSOCK(sock.stat().st_mode) and stat.S_IMODE(sock.stat().st_mode) == 0o600

    kill_orchestrator(first)
    assert pid_alive(runner_pid) and pid_alive(cli_pid)
    second = project.up()
    second.wait_output(
        f"recovery: run {run_id} (W-1) was running when the orchestrator stopped; adopted its live agent"
    )
    # the figures came back with it: the cost so far, and it is the same runner
    adopted = running_with(project, "W-1.md", cost_usd=0.25, pid=runner_pid, state="running")
    assert adopted["backend"] == "sdk" and adopted["run_id"] == run_id

    kept = project.cli("interrupt", "W-1", "--keep")  # ends the second turn, the session waits for a tell
    assert kept.returncode == 0, kept.stderr
    told = project.cli("tell", "W-1", "third, after the restart")
    assert told.returncode == 0, told.stderr
    ended_in(project, "writer", "archive", "W-1.md")

    assert pid_alive(runner_pid) is False
    prompts = recorded(project, "prompt")
    assert prompts[1:] == [f"[wait:{two}] second", "third, after the restart"]
    assert [e["in_turn"] for e in claude_records(project) if e.get("control") == "interrupt"] == [True]
    assert len(recorded(project, "argv")) == 1 and set(recorded(project, "pid")) == {cli_pid}  # never rerun
    row = wait_for(lambda: run_row(project, "W-1.md"), what="W-1's row")
    assert row["state"] == "succeeded" and row["run_id"] == run_id
    assert row["cost_usd"] == 0.75 and row["num_turns"] == 3  # every turn counted once, across the restart
    assert db_rows(project, "SELECT outcome FROM attempts WHERE run_id = ?", run_id) == [{"outcome": "succeeded"}]
    assert [r["state"] for r in db_rows(project, "SELECT state FROM runs")] == ["succeeded"]
    assert not sock.exists()
    assert second.stop() == 0, second.output


def test_an_sdk_run_that_ends_while_the_orchestrator_is_down_is_finished_from_its_records(
    project: Project, fake_cli: Path
) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, fake={"cost": "0.25"})})
    first = project.up()
    work = gate(project, "work")
    project.drop("writer", "W-1.md", {"id": "W-1"}, body=f"[wait:{work}] work")
    live = running_with(project, "W-1.md", activity="Bash: echo working")
    kill_orchestrator(first)

    open_gate(work)  # the turn ends with nobody listening: the runner writes its result and exits 0
    wait_for(lambda: not pid_alive(live["pid"]), what="the runner to end on its own")
    result = run_folder(project, live["run_id"]) / "1.result.json"
    assert result.exists() and stat.S_IMODE(result.stat().st_mode) == 0o600
    second = project.up()
    second.wait_output(f"recovery: run {live['run_id']} (W-1) ended while the orchestrator was down (exit status 0)")
    ended_in(project, "writer", "archive", "W-1.md")
    assert len(recorded(project, "argv")) == 1  # not run again
    row = wait_for(lambda: run_row(project, "W-1.md"), what="W-1's row")
    assert row["state"] == "succeeded" and row["cost_usd"] == 0.25 and row["num_turns"] == 1
    results = [line for line in transcript(project, live["run_id"]) if line["type"] == "result"]
    assert row["session_id"] == results[0]["session_id"]
    assert second.stop() == 0, second.output


def test_a_failure_while_the_orchestrator_is_down_keeps_its_reason(project: Project, fake_cli: Path) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, fake={"fail_attempts": "1", "cost": "0.25"})})
    first = project.up()
    work = gate(project, "work")
    project.drop("writer", "W-1.md", {"id": "W-1"}, body=f"[wait:{work}] work")
    live = running_with(project, "W-1.md", activity="Bash: echo working")
    kill_orchestrator(first)
    open_gate(work)  # the turn ends with an error result: the runner says why, to its files, and exits 1
    wait_for(lambda: not pid_alive(live["pid"]), what="the runner to end on its own")
    second = project.up()
    second.wait_output(f"recovery: run {live['run_id']} (W-1) ended while the orchestrator was down (exit status 1)")
    ended_in(project, "writer", "failed", "W-1.md")
    reason = (project.root / "memo/writer/failed/W-1.reason").read_text(encoding="utf-8")
    assert "without saying why" not in reason and "exit status 1" not in reason.splitlines()[0], reason
    assert FAILURE_WORDS in reason, reason
    row = wait_for(lambda: run_row(project, "W-1.md"), what="W-1's row")
    assert row["state"] == "failed" and row["cost_usd"] == 0.25  # what the failed turn spent is counted
    assert len(recorded(project, "argv")) == 1
    assert second.stop() == 0, second.output


def test_an_sdk_run_under_a_root_longer_than_a_socket_path_works(tmp_path: Path, fake_cli: Path) -> None:
    root = tmp_path / ("r" * 60) / ("o" * 60)
    root.mkdir(parents=True)
    project = Project(root)
    try:
        sock_path = root / ".orchestrator" / "runs" / "1" / "1.sock"
        assert len(os.fsencode(sock_path)) > 108
        project.configure({"writer": sdk_role(project, fake_cli, fake={"cost": "0.25"})})
        orch = project.up()
        first = gate(project, "turn1")
        project.drop("writer", "W-1.md", {"id": "W-1"}, body=f"[wait:{first}] first")
        running_with(project, "W-1.md", activity="Bash: echo working")
        assert stat.S_ISSOCK(sock_path.stat().st_mode)
        told = project.cli("tell", "W-1", "a follow-up")
        assert told.returncode == 0, told.stderr
        open_gate(first)
        ended_in(project, "writer", "archive", "W-1.md")
        assert recorded(project, "prompt")[1:] == ["a follow-up"]
        row = wait_for(lambda: run_row(project, "W-1.md"), what="W-1's row")
        assert row["state"] == "succeeded" and row["cost_usd"] == 0.5
        assert orch.stop() == 0, orch.output
        assert loud_lines(project) == []
    finally:
        project.cleanup()


def test_without_the_keeper_an_sdk_run_is_started_by_itself_and_talks_over_its_socket(
    project: Project, fake_cli: Path
) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, fake={"cost": "0.25"})}, recovery="restart")
    orch = project.up(ORCHESTRATOR_KEEPER="off")  # with `recovery: adopt` it would refuse to start
    first = gate(project, "turn1")
    project.drop("writer", "W-1.md", {"id": "W-1"}, body=f"[wait:{first}] first")
    live = running_with(project, "W-1.md", activity="Bash: echo working")
    assert project.cli("tell", "W-1", "a follow-up").returncode == 0
    open_gate(first)
    ended_in(project, "writer", "archive", "W-1.md")
    left = sorted(p.name for p in run_folder(project, live["run_id"]).iterdir())
    assert left == ["1.events.jsonl", "1.result.json", "transcript.jsonl"], "no exit record: its end was its status"
    row = wait_for(lambda: run_row(project, "W-1.md"), what="W-1's row")
    assert row["state"] == "succeeded" and row["cost_usd"] == 0.5
    assert orch.stop() == 0, orch.output


def test_a_runner_whose_orchestrator_never_comes_back_is_stopped_by_its_keeper(
    project: Project, fake_cli: Path
) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, timeout="6s", grace="0.5s")})
    first = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"}, body="[slow] work")
    live = running_with(project, "W-1.md", state="running")
    cli_pid = wait_for(lambda: recorded(project, "pid"), what="the CLI to start")[0]
    kill_orchestrator(first)
    # timeout 6s + grace 0.5s + the keeper's margin of 1s, counted from the start
    wait_for(lambda: not pid_alive(live["pid"]) and not pid_alive(cli_pid), timeout=30, what="the keeper to stop it")
    record = run_folder(project, live["run_id"]) / "1.exit"
    wait_for(record.exists, what="the keeper's record")  # written once it has reaped the agent, a zombie till then
    assert "timeout" in record.read_text(encoding="ascii")
    second = project.up()
    second.wait_output("stopped by its keeper at its timeout")
    ended_in(project, "writer", "failed", "W-1.md")
    row = wait_for(lambda: run_row(project, "W-1.md"), what="W-1's row")
    assert row["state"] == "timed_out" and len(recorded(project, "argv")) == 1
    assert second.stop() == 0, second.output


def test_an_adopted_retry_adds_its_cost_to_the_earlier_attempts(project: Project, fake_cli: Path) -> None:
    role = sdk_role(
        project,
        fake_cli,
        retry={"max": 1, "backoff": ["0.1s"]},
        retry_resumes=False,
        fake={"fail_attempts": "1", "cost": "0.25", "turn_seconds": "3"},
    )
    project.configure({"writer": role})
    first = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"}, body="work")
    running_with(project, "W-1.md", attempt=2)  # attempt 1 spent 0.25 and failed
    kill_orchestrator(first)  # mid-turn, or just after: adopted or finished from its files, both count the same
    second = project.up()
    ended_in(project, "writer", "archive", "W-1.md")
    row = wait_for(lambda: run_row(project, "W-1.md"), what="W-1's row")
    assert row["state"] == "succeeded" and row["attempt"] == 2
    assert row["cost_usd"] == 0.5 and row["num_turns"] == 2, row
    assert len(recorded(project, "argv")) == 2
    assert second.stop() == 0, second.output


def test_an_adopted_sdk_run_can_be_cancelled(project: Project, fake_cli: Path) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, grace="10s")})
    first = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"}, body="[slow] work")
    live = running_with(project, "W-1.md", activity="Bash: echo working")
    cli_pid = recorded(project, "pid")[0]
    kill_orchestrator(first)
    second = project.up()
    second.wait_output("adopted its live agent")
    running_with(project, "W-1.md", pid=live["pid"], activity="Bash: echo working")
    result = project.cli("cancel", "W-1", "--reason", "not needed after all")
    assert result.returncode == 0, result.stderr
    ended_in(project, "writer", "cancelled", "W-1.md")
    # cancel interrupts first: the turn ends and the session closes, nothing is left
    assert [e["in_turn"] for e in claude_records(project) if e.get("control") == "interrupt"] == [True]
    wait_for(lambda: not pid_alive(live["pid"]) and not pid_alive(cli_pid), what="the session to end")
    row = wait_for(lambda: run_row(project, "W-1.md"), what="W-1's row")
    assert row["state"] == "cancelled" and row["cost_usd"] == 0.01
    assert second.stop() == 0, second.output


def test_stop_force_still_kills_sdk_runs_under_their_keeper(project: Project, fake_cli: Path) -> None:
    project.configure({"writer": sdk_role(project, fake_cli)})
    orch = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"}, body="[slow] work")
    live = running_with(project, "W-1.md", activity="Bash: echo working")
    cli_pid = recorded(project, "pid")[0]
    assert project.cli("stop", "--force").returncode == 0
    assert orch.wait() == 1
    assert not pid_alive(live["pid"]) and not pid_alive(cli_pid)
    assert project.folder("writer", "inbox") == ["W-1.md"] and project.folder("writer", "active") == []
    assert orphan_run_ids(str(project.root)) == set()


@pytest.mark.os_level
def test_an_ended_runners_group_taken_by_another_process_is_never_swept(project: Project) -> None:
    import subprocess
    import sys

    from test_recovery import Rig

    from orchestrator.supervisor.adoption import Adopter

    rig = Rig(project)
    try:
        adopter = Adopter(rig.config, rig.store, rig.console, rig.lifecycle, lambda _e: None)
        stranger = rig.bystander()  # a session leader that took the dead runner's pid
        assert not adopter._group_is_the_runs({"pid": stranger, "run_id": 5, "attempt": 1})
        env = {
            **os.environ,
            "ORCHESTRATOR_ROOT": str(rig.config.root),
            "ORCHESTRATOR_RUN_ID": "5",
            "ORCHESTRATOR_ATTEMPT": "1",
        }
        leftover = subprocess.Popen(  # a tool process the runner left in its group
            [sys.executable, "-c", "import time; time.sleep(300)"], env=env, start_new_session=True
        )
        rig.children.append(leftover)
        wait_for(lambda: adopter._group_is_the_runs({"pid": leftover.pid, "run_id": 5, "attempt": 1}), what="marks")
        leftover.kill()
        leftover.wait()
        assert adopter._group_is_the_runs({"pid": leftover.pid, "run_id": 5, "attempt": 1})  # nothing left: fine
    finally:
        rig.close()
