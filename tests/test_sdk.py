"""The ``sdk`` backend end to end: a real ``orchestrator up``, the real runner and claude-agent-sdk, a fake CLI.

Only the Claude Code CLI is faked (``tests/fake_claude.py`` behind a small
wrapper given as the role's ``cli_path``; without it the SDK would start the
real CLI it bundles). The fake is steered by the role's ``env:`` and by marks in
the prompt: ``[slow]`` makes a turn last a minute (so only an interrupt ends it
in time), ``[wait:<path>]`` makes a turn work until the test creates the file.
The fake records what it received (argv, prompts, control requests, its pid).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import Orchestrator, Project, claude_records, error_line, pid_alive, wait_for
from orchestrator.supervisor.recovery import orphan_run_ids

QUICK_RETRY = {"max": 1, "backoff": ["0.1s"]}


def sdk_role(project: Project, cli: Path, record: str = "claude", **settings: Any) -> dict[str, Any]:
    """A ``backend: sdk`` role on the fake CLI; ``env`` entries are ``FAKE_CLAUDE_*`` settings (``cost="0.25"``)."""
    fake_env = {f"FAKE_CLAUDE_{k.upper()}": str(v) for k, v in settings.pop("fake", {}).items()}
    env = {"FAKE_CLAUDE_RECORD": str(project.root / f"{record}.jsonl"), **fake_env}
    return {"backend": "sdk", "cli_path": str(cli), "env": env, **settings}


def recorded(project: Project, key: str, record: str = "claude") -> list[Any]:
    return [entry[key] for entry in claude_records(project, record) if key in entry]


def history(project: Project, *args: str) -> dict[str, Any]:
    result = project.cli("history", "--json", *args)
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def run_row(project: Project, memo: str) -> dict[str, Any] | None:
    """The memo's latest run as ``history --json`` shows it."""
    rows = [r for r in history(project)["runs"] if r["memo"] == memo]
    return rows[-1] if rows else None


def live_run(project: Project, memo: str) -> dict[str, Any] | None:
    """The memo's run as ``status --json`` shows it while the orchestrator has it."""
    return next((r for r in project.status()["runs"] if r["memo"] == memo), None)


def running_with(project: Project, memo: str, **fields: Any) -> dict[str, Any]:
    """Wait until the memo's live run shows every field given; that run."""

    def found() -> dict[str, Any] | None:
        run = live_run(project, memo)
        return run if run is not None and all(run.get(k) == v for k, v in fields.items()) else None

    return wait_for(found, what=f"{memo} running with {fields}; status {project.status()['runs']}")  # type: ignore[no-any-return]


def ended_in(project: Project, role: str, folder: str, memo: str) -> None:
    wait_for(lambda: memo in project.folder(role, folder), what=f"{memo} in memo/{role}/{folder}/")


def one_line_error(result: Any, code: int) -> str:
    """The command failed with ``code`` and said why in one line, without a traceback."""
    assert result.returncode == code, f"expected exit {code}, got {result.returncode}: {result.stdout}{result.stderr}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and error_line(lines[0]), result.stderr
    assert "Traceback" not in result.stderr
    return str(lines[0])


def transcript(project: Project, run_id: int) -> list[dict[str, Any]]:
    """The run's transcript, whole lines only (the runner may be writing the next one)."""
    path = project.root / ".orchestrator" / "runs" / str(run_id) / "transcript.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    return [json.loads(line) for line in lines if line.endswith("\n")]


def db_rows(project: Project, query: str, *args: Any) -> list[dict[str, Any]]:
    db = sqlite3.connect(f"file:{project.root / '.orchestrator' / 'state.db'}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in db.execute(query, args).fetchall()]
    finally:
        db.close()


def log_lines(orch: Orchestrator, text: str) -> list[str]:
    return [line for line in orch.output.splitlines() if text in line]


def gate(project: Project, name: str) -> Path:
    """A file the fake waits for in a ``[wait:<path>]`` turn; create it to let the turn end."""
    return project.root / "gates" / name


def open_gate(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


# ---------------------------------------------------------------- a normal run, figures, history


def test_a_run_is_archived_with_its_transcript_figures_and_history(project: Project, fake_cli: Path) -> None:
    project.configure(
        {
            "writer": sdk_role(project, fake_cli, fake={"cost": "0.25"}),
            "editor": sdk_role(project, fake_cli, fake={"cost": "0.1"}),
            "builder": {},
        }
    )
    orch = project.up()
    first = gate(project, "w1")
    project.drop("writer", "W-1.md", {"id": "W-1", "subject": "an article"}, body=f"[wait:{first}] write it")

    live = running_with(project, "W-1.md", activity="Bash: echo working")  # its last tool use, live
    assert live["backend"] == "sdk" and live["state"] == "running" and live["cost_usd"] is None  # no result yet
    cli_pid = recorded(project, "pid")[0]
    assert pid_alive(live["pid"]) and pid_alive(cli_pid)
    open_gate(first)
    ended_in(project, "writer", "archive", "W-1.md")

    row = wait_for(lambda: run_row(project, "W-1.md"), what="W-1's row in history")
    session = row["session_id"]
    assert isinstance(session, str) and session
    assert {
        k: row[k]
        for k in (
            "role",
            "memo",
            "state",
            "backend",
            "cost_usd",
            "input_tokens",
            "output_tokens",
            "num_turns",
            "is_error",
        )
    } == {
        "role": "writer",
        "memo": "W-1.md",
        "state": "succeeded",
        "backend": "sdk",
        "cost_usd": 0.25,
        "input_tokens": 100,
        "output_tokens": 20,
        "num_turns": 1,
        "is_error": False,
    }
    assert row["started_at"] and row["ended_at"] and row["started_at"] <= row["ended_at"]
    wait_for(lambda: not pid_alive(cli_pid), what="the fake CLI to end with its run")

    lines = transcript(project, row["run_id"])
    assert [line["type"] for line in lines] == ["prompt", "system", "assistant", "assistant", "result"]
    assert "write it" in lines[0]["text"] and "W-1.md" in lines[0]["text"]  # the rendered prompt with the memo
    assert lines[2]["content"][0]["name"] == "Bash"
    assert lines[3]["content"][0]["text"].startswith("echo: ")
    assert lines[-1]["total_cost_usd"] == 0.25 and lines[-1]["session_id"] == session
    assert recorded(project, "prompt") == [lines[0]["text"]]

    # more runs: a second writer, an editor and a command role, for the totals
    project.drop("writer", "W-2.md", {"id": "W-2"})
    project.drop("editor", "E-1.md", {"id": "E-1"})
    project.drop("builder", "B-1.md", {"id": "B-1"})
    for role, memo in (("writer", "W-2.md"), ("editor", "E-1.md"), ("builder", "B-1.md")):
        ended_in(project, role, "archive", memo)
    wait_for(lambda: len([r for r in history(project)["runs"] if r["state"] == "succeeded"]) == 4, what="4 runs")
    assert orch.stop() == 0, orch.output

    report = history(project)
    runs = {r["memo"]: r for r in report["runs"]}
    assert set(runs) == {"W-1.md", "W-2.md", "E-1.md", "B-1.md"}
    for run in report["runs"]:
        assert {
            "run_id",
            "role",
            "memo",
            "state",
            "backend",
            "cost_usd",
            "input_tokens",
            "output_tokens",
            "num_turns",
            "session_id",
            "started_at",
            "ended_at",
        } <= set(run)
    assert runs["E-1.md"]["cost_usd"] == 0.1 and runs["E-1.md"]["backend"] == "sdk"
    assert runs["B-1.md"]["backend"] == "command" and runs["B-1.md"]["cost_usd"] is None
    assert runs["B-1.md"]["session_id"] is None
    assert len({runs[m]["session_id"] for m in ("W-1.md", "W-2.md", "E-1.md")}) == 3

    totals = report["totals"]
    assert {role: (t["cost_usd"], t["runs"]) for role, t in totals["by_role"].items()} == {
        "writer": (0.5, 2),
        "editor": (0.1, 1),
        "builder": (0.0, 1),
    }
    days: dict[str, tuple[float, int]] = {}
    for run in report["runs"]:
        cost, count = days.get(run["started_at"][:10], (0.0, 0))
        days[run["started_at"][:10]] = (round(cost + (run["cost_usd"] or 0.0), 6), count + 1)
    assert {day: (t["cost_usd"], t["runs"]) for day, t in totals["by_day"].items()} == days
    assert sum(t["cost_usd"] for t in totals["by_day"].values()) == pytest.approx(0.6)
    assert totals["cost_usd"] == pytest.approx(0.6) and totals["runs"] == 4

    writer_only = history(project, "--role", "writer")
    assert sorted(r["memo"] for r in writer_only["runs"]) == ["W-1.md", "W-2.md"]
    assert set(writer_only["totals"]["by_role"]) == {"writer"} and writer_only["totals"]["cost_usd"] == 0.5

    tomorrow = (date.today() + timedelta(days=1)).isoformat()
    assert history(project, "--since", tomorrow)["runs"] == []
    assert len(history(project, "--since", min(days))["runs"]) == 4
    later = sorted(report["runs"], key=lambda r: r["run_id"])[1:]
    since_second = history(project, "--since", later[0]["started_at"])  # an exact start time includes that run
    assert [r["run_id"] for r in since_second["runs"]] == [r["run_id"] for r in later]
    one_line_error(project.cli("history", "--since", "last tuesday"), 2)

    human = project.cli("history")
    assert human.returncode == 0 and "writer" in human.stdout and "0.5000" in human.stdout
    plain = project.cli("status")  # the database's record: cost and tokens per run
    assert plain.returncode == 0 and "0.2500" in plain.stdout and "100/20" in plain.stdout, plain.stdout


def test_tell_while_a_turn_runs_is_answered_in_the_same_session(project: Project, fake_cli: Path) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, fake={"cost": "0.25"})})
    orch = project.up()
    first, second = gate(project, "turn1"), gate(project, "turn2")
    project.drop("writer", "W-1.md", {"id": "W-1"}, body=f"[wait:{first}] first")
    running_with(project, "W-1.md", activity="Bash: echo working")

    told = project.cli("tell", "W-1", f"[wait:{second}] a follow-up")
    assert told.returncode == 0, told.stderr
    assert "told W-1" in told.stdout
    assert len(recorded(project, "prompt")) == 1  # queued: each tell is its own turn, after the current one
    open_gate(first)
    # the first turn's result is in: the running agent shows what it spent so far
    live = running_with(project, "W-1.md", cost_usd=0.25, state="running")
    assert live["backend"] == "sdk"
    wait_for(lambda: len(recorded(project, "prompt")) == 2, what="the follow-up to reach the CLI")
    open_gate(second)
    ended_in(project, "writer", "archive", "W-1.md")

    prompts = recorded(project, "prompt")
    assert "first" in prompts[0] and prompts[1] == f"[wait:{second}] a follow-up"
    assert len(recorded(project, "argv")) == 1 and len(set(recorded(project, "pid"))) == 1  # one CLI, both turns
    row = wait_for(lambda: run_row(project, "W-1.md"), what="W-1's row")
    assert row["state"] == "succeeded" and row["num_turns"] == 2 and row["cost_usd"] == 0.5
    results = [line for line in transcript(project, row["run_id"]) if line["type"] == "result"]
    assert [r["session_id"] for r in results] == [row["session_id"]] * 2
    orch.wait_output("told W-1")
    assert orch.stop() == 0, orch.output


# ---------------------------------------------------------------- interrupt and tell


def test_interrupt_ends_the_turn_and_the_run_is_cancelled(project: Project, fake_cli: Path) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, grace="10s", retry=QUICK_RETRY)})
    orch = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1", "subject": "a long one"}, body="[slow] write a book")
    live = running_with(project, "W-1.md", activity="Bash: echo working")
    cli_pid = recorded(project, "pid")[0]

    result = project.cli("interrupt", "W-1", "--reason", "enough for today")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"interrupted W-1 (run {live['run_id']}, role writer): now cancelled"

    assert project.folder("writer", "cancelled") == ["W-1.md"]
    assert project.folder("writer", "active") == [] and project.folder("writer", "failed") == []
    assert {"control": "interrupt", "in_turn": True} in [
        {k: e[k] for k in ("control", "in_turn")} for e in claude_records(project) if e.get("control") == "interrupt"
    ]
    row = run_row(project, "W-1.md")
    assert row is not None and row["state"] == "cancelled" and row["cost_usd"] == 0.01  # the turn spent, and it counts
    cancellations = db_rows(project, "SELECT * FROM cancellations WHERE memo = ?", "W-1.md")
    assert len(cancellations) == 1
    assert cancellations[0]["reason"] == "enough for today" and cancellations[0]["previous_state"] == "running"
    assert cancellations[0]["run_id"] == live["run_id"] and "pid" in cancellations[0]["who"]
    attempts = db_rows(project, "SELECT outcome, exit_code FROM attempts WHERE run_id = ?", live["run_id"])
    assert attempts == [{"outcome": "cancelled", "exit_code": 3}]
    results = [line for line in transcript(project, live["run_id"]) if line["type"] == "result"]
    assert [r["subtype"] for r in results] == ["error_during_execution"]
    assert not pid_alive(live["pid"])
    wait_for(lambda: not pid_alive(cli_pid), what="the fake CLI to end")
    assert len(recorded(project, "argv")) == 1  # never retried
    orch.wait_output("interrupted W-1")
    one_line_error(project.cli("interrupt", "W-1"), 7)  # it has ended
    assert orch.stop() == 0, orch.output


def test_interrupt_keep_then_tell_continues_the_session(project: Project, fake_cli: Path) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, grace="10s")})
    orch = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"}, body="[slow] first")
    live = running_with(project, "W-1.md", activity="Bash: echo working")

    kept = project.cli("interrupt", "W-1", "--keep", "--json")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["state"] == "running"
    told = project.cli("tell", "W-1", "[slow] second")  # as an argument
    assert told.returncode == 0, told.stderr
    wait_for(lambda: len(recorded(project, "prompt")) == 2, what="the second turn to reach the CLI")
    assert live_run(project, "W-1.md") is not None  # still running: the first interrupt kept the session

    kept = project.cli("interrupt", "W-1", "--keep")
    assert kept.returncode == 0, kept.stderr
    assert "nothing to tell" in one_line_error(project.cli("tell", "W-1", input=" \n"), 2)
    told = project.cli("tell", "W-1", input="third, from stdin\n")  # from standard input
    assert told.returncode == 0, told.stderr
    ended_in(project, "writer", "archive", "W-1.md")

    prompts = recorded(project, "prompt")
    assert len(prompts) == 3 and "[slow] first" in prompts[0]
    assert prompts[1:] == ["[slow] second", "third, from stdin\n"]
    interrupts = [e for e in claude_records(project) if e.get("control") == "interrupt"]
    assert len(interrupts) == 2 and all(e["in_turn"] for e in interrupts)
    assert len(recorded(project, "argv")) == 1 and len(set(recorded(project, "pid"))) == 1
    row = wait_for(lambda: run_row(project, "W-1.md"), what="W-1's row")
    assert row["state"] == "succeeded" and row["num_turns"] == 3 and row["cost_usd"] == 0.03
    results = [line for line in transcript(project, live["run_id"]) if line["type"] == "result"]
    assert [r["subtype"] for r in results] == ["error_during_execution", "error_during_execution", "success"]
    assert {r["session_id"] for r in results} == {row["session_id"]}
    assert project.folder("writer", "cancelled") == []
    assert db_rows(project, "SELECT * FROM cancellations") == []
    assert orch.stop() == 0, orch.output


def test_an_interrupt_after_interrupt_keep_ends_the_waiting_session(project: Project, fake_cli: Path) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, grace="10s")})
    orch = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"}, body="[slow] first")
    live = running_with(project, "W-1.md", activity="Bash: echo working")
    assert project.cli("interrupt", "W-1", "--keep").returncode == 0
    wait_for(
        lambda: [r["subtype"] for r in transcript(project, live["run_id"]) if r["type"] == "result"],
        what="the interrupted turn's result",
    )  # the session now waits for a tell
    assert live_run(project, "W-1.md") is not None

    result = project.cli("interrupt", "W-1", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["state"] == "cancelled"
    assert project.folder("writer", "cancelled") == ["W-1.md"]
    assert len(recorded(project, "prompt")) == 1
    assert orch.stop() == 0, orch.output


def test_a_tell_after_the_last_turn_is_refused_not_lost(project: Project, fake_cli: Path) -> None:
    # the CLI takes its time to save the session after its last turn: the run is still live meanwhile
    project.configure({"writer": sdk_role(project, fake_cli, fake={"linger": "30"})})
    orch = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"})
    wait_for(lambda: recorded(project, "eof"), what="the session to close the CLI's input")
    assert live_run(project, "W-1.md") is not None

    assert "already ended; nothing to tell" in one_line_error(project.cli("tell", "W-1", "too late"), 1)
    assert "already ended; nothing to interrupt" in one_line_error(project.cli("interrupt", "W-1"), 1)
    ended_in(project, "writer", "archive", "W-1.md")  # the work was done: an interrupt now changes nothing
    assert len(recorded(project, "prompt")) == 1
    row = run_row(project, "W-1.md")
    assert row is not None and row["state"] == "succeeded"
    assert orch.stop() == 0, orch.output


def test_interrupt_and_tell_are_refused_for_a_command_role(project: Project) -> None:
    project.configure({"builder": {}})
    orch = project.up()
    project.drop("builder", "B-1.md", {"id": "B-1", "agent": {"sleep": 300}})
    wait_for(lambda: project.records(), what="the stand-in to start")

    line = one_line_error(project.cli("interrupt", "B-1"), 9)
    assert "role builder uses the command backend, which cannot interrupt a turn" in line
    line = one_line_error(project.cli("tell", "B-1", "hello"), 9)
    assert "role builder uses the command backend, which cannot take follow-up messages" in line
    line = one_line_error(project.cli("tell", "B-1", input="hello from stdin\n"), 9)
    assert "command backend" in line
    assert "no running memo matches 'B-2'" in one_line_error(project.cli("tell", "B-2", "hello"), 6)

    assert live_run(project, "B-1.md")["state"] == "running"  # type: ignore[index]  # untouched by the refusals
    cancelled = project.cli("cancel", "B-1")
    assert cancelled.returncode == 0, cancelled.stderr
    assert project.folder("builder", "cancelled") == ["B-1.md"]
    assert orch.stop() == 0, orch.output


# ---------------------------------------------------------------- cancel


def test_cancel_interrupts_first_and_leaves_nothing_running(project: Project, fake_cli: Path) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, grace="10s")})
    orch = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"}, body="[slow] work")
    live = running_with(project, "W-1.md", activity="Bash: echo working")
    runner_pid, cli_pid = live["pid"], recorded(project, "pid")[0]
    assert runner_pid != cli_pid and pid_alive(cli_pid)

    result = project.cli("cancel", "W-1", "--reason", "wrong topic", "--json")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["state"] == "cancelled" and answer["previous_state"] == "running"
    assert answer["escalated"] is False and answer["survivors"] == []

    assert not pid_alive(runner_pid) and not pid_alive(cli_pid), "cancel returned with the session still alive"
    interrupts = [e for e in claude_records(project) if e.get("control") == "interrupt"]
    assert len(interrupts) == 1 and interrupts[0]["in_turn"]  # the turn was ended cleanly, not killed mid-write
    assert log_lines(orch, "using the kill ladder") == []
    assert project.folder("writer", "cancelled") == ["W-1.md"]
    row = run_row(project, "W-1.md")
    assert row is not None and row["state"] == "cancelled" and row["cost_usd"] == 0.01
    assert len(db_rows(project, "SELECT * FROM cancellations WHERE memo = 'W-1.md'")) == 1
    assert orch.stop() == 0, orch.output


def test_cancel_falls_back_to_the_kill_ladder_when_the_turn_does_not_end(project: Project, fake_cli: Path) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, grace="0.5s", fake={"deaf": "1"})})
    orch = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"}, body="[slow] work")
    live = running_with(project, "W-1.md", activity="Bash: echo working")
    runner_pid, cli_pid = live["pid"], recorded(project, "pid")[0]

    result = project.cli("cancel", "W-1", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["state"] == "cancelled"
    assert not pid_alive(runner_pid) and not pid_alive(cli_pid), "cancel returned with the session still alive"
    assert len([e for e in claude_records(project) if e.get("control") == "interrupt"]) == 1
    assert len(log_lines(orch, f"run {live['run_id']}: no end of turn within 0.5s; using the kill ladder")) == 1
    assert project.folder("writer", "cancelled") == ["W-1.md"]
    assert orch.stop() == 0, orch.output


# ---------------------------------------------------------------- failures


def test_a_turn_past_the_timeout_is_stopped_like_a_command(project: Project, fake_cli: Path) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, timeout="2s", grace="0.5s")})
    orch = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"}, body="[slow] work")
    ended_in(project, "writer", "failed", "W-1.md")
    row = run_row(project, "W-1.md")
    assert row is not None and row["state"] == "timed_out"
    assert "timed out after 2s (attempt 1)" in (project.root / "memo/writer/failed/W-1.reason").read_text()
    runner_pid = db_rows(project, "SELECT pid FROM attempts WHERE run_id = ?", row["run_id"])[0]["pid"]
    assert not pid_alive(runner_pid)
    assert all(not pid_alive(pid) for pid in recorded(project, "pid"))  # the CLI, if it had started
    assert orphan_run_ids(str(project.root)) == set()  # nothing of the run lives on
    assert orch.stop() == 0, orch.output


def test_after_the_orchestrator_dies_its_sdk_sessions_are_stopped_and_rerun(project: Project, fake_cli: Path) -> None:
    # with `recovery: restart`; the default adopts them instead (tests/test_sdk_adoption.py)
    project.configure({"writer": sdk_role(project, fake_cli, grace="2s")}, recovery="restart")
    first = project.up()
    work = gate(project, "work")
    project.drop("writer", "W-1.md", {"id": "W-1"}, body=f"[wait:{work}] work")
    live = running_with(project, "W-1.md", activity="Bash: echo working")
    runner_pid, cli_pid = live["pid"], recorded(project, "pid")[0]
    first.signal(9)
    first.wait()
    assert pid_alive(runner_pid) and pid_alive(cli_pid)  # in sessions of their own, they outlive it

    second = project.up()
    second.wait_output("recovery: run 1 was running when the orchestrator stopped")
    assert not pid_alive(runner_pid) and not pid_alive(cli_pid)
    wait_for(lambda: len(recorded(project, "argv")) == 2, what="the memo to run again")
    open_gate(work)
    ended_in(project, "writer", "archive", "W-1.md")
    runs = {r["run_id"]: r for r in history(project)["runs"]}
    assert runs[1]["state"] == "returned" and runs[2]["state"] == "succeeded" and runs[2]["attempt"] == 2
    assert second.stop() == 0, second.output


def test_a_cli_crash_is_a_failed_attempt_with_its_stderr_and_is_retried(project: Project, fake_cli: Path) -> None:
    project.configure({"writer": sdk_role(project, fake_cli, retry=QUICK_RETRY, fake={"mode": "crash"})})
    orch = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"})
    ended_in(project, "writer", "failed", "W-1.md")

    expected = (
        "Claude Code exited with status 2: fake-claude: reading the prompt | "
        "fake-claude: fatal: segmentation fault in the tokenizer"
    )
    reason_file = project.root / "memo" / "writer" / "failed" / "W-1.reason"
    assert reason_file.exists()
    assert expected in reason_file.read_text(encoding="utf-8")
    row = run_row(project, "W-1.md")
    assert row is not None and row["state"] == "failed" and row["attempt"] == 2
    attempts = db_rows(project, "SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt", row["run_id"])
    assert [(a["attempt"], a["outcome"], a["reason"]) for a in attempts] == [
        (1, "failed", expected),
        (2, "failed", expected),
    ]
    assert len(recorded(project, "argv")) == 2  # retried like any failure
    assert all(a["pid"] for a in attempts)  # each attempt's runner, kept on record past its failure
    assert len(log_lines(orch, f"W-1 attempt 1 failed: {expected}")) == 1
    assert len(log_lines(orch, "W-1 retry 1 of 1")) == 1
    log = Path(attempts[0]["log_path"]).read_text(encoding="utf-8")
    assert log.splitlines().count("fake-claude: fatal: segmentation fault in the tokenizer") == 2  # the real stderr
    assert orch.stop() == 0, orch.output


# ---------------------------------------------------------------- budgets


def test_per_run_budget_fails_the_run_without_a_retry(project: Project, fake_cli: Path) -> None:
    project.configure(
        {
            # one turn costs more than the run may
            "writer": sdk_role(project, fake_cli, retry=QUICK_RETRY, budget={"per_run_usd": 0.3}, fake={"cost": "0.5"}),
            # two turns do; the CLI itself stops at --max-budget-usd, as Claude Code does
            "editor": sdk_role(
                project,
                fake_cli,
                record="editor",
                retry=QUICK_RETRY,
                budget={"per_run_usd": 0.4},
                fake={"cost": "0.25", "honor_budget": "1"},
            ),
        }
    )
    orch = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"})
    ended_in(project, "writer", "failed", "W-1.md")
    reason = "per-run budget of $0.30 exceeded ($0.50 spent)"
    row = run_row(project, "W-1.md")
    assert row is not None and (row["state"], row["attempt"], row["cost_usd"]) == ("failed", 1, 0.5)
    assert db_rows(project, "SELECT reason FROM runs WHERE run_id = ?", row["run_id"]) == [{"reason": reason}]
    assert reason in (project.root / "memo" / "writer" / "failed" / "W-1.reason").read_text(encoding="utf-8")
    assert len(recorded(project, "argv")) == 1  # not retried, although the role has a retry left
    assert log_lines(orch, "W-1 retry") == []

    first = gate(project, "e1")
    project.drop("editor", "E-1.md", {"id": "E-1"}, body=f"[wait:{first}] first")
    running_with(project, "E-1.md", activity="Bash: echo working")
    for text in ("second", "third"):
        told = project.cli("tell", "E-1", text)
        assert told.returncode == 0, told.stderr
    open_gate(first)
    ended_in(project, "editor", "failed", "E-1.md")
    prompts = recorded(project, "prompt", "editor")
    assert len(prompts) == 2 and prompts[1] == "second"  # the third turn was never started
    argv = recorded(project, "argv", "editor")
    assert len(argv) == 1 and argv[0][argv[0].index("--max-budget-usd") + 1] == "0.4"
    row = run_row(project, "E-1.md")
    assert row is not None and (row["state"], row["attempt"], row["cost_usd"], row["num_turns"]) == (
        "failed",
        1,
        0.5,
        2,
    )
    assert "per-run budget of $0.40 exceeded ($0.50 spent)" in (
        project.root / "memo" / "editor" / "failed" / "E-1.reason"
    ).read_text(encoding="utf-8")
    assert orch.stop() == 0, orch.output


def test_a_role_over_its_daily_budget_starts_no_new_runs(project: Project, fake_cli: Path) -> None:
    project.configure(
        {
            "writer": sdk_role(project, fake_cli, budget={"per_day_usd": 0.5}, fake={"cost": "0.3"}),
            "editor": sdk_role(project, fake_cli, fake={"cost": "0.3"}),
            "builder": {},
        },
        rescan_interval="0.1s",
    )
    orch = project.up()
    for name in ("W-1.md", "W-2.md"):  # one after the other: the second one passes the budget
        project.drop("writer", name, {"id": name[:-3]})
        ended_in(project, "writer", "archive", name)
    blocks = wait_for(lambda: project.status()["budget_blocks"], what="a budget block")
    tomorrow = (date.today() + timedelta(days=1)).isoformat()
    assert blocks == {"writer": f"role writer spent $0.60 of its $0.50 daily budget; new runs wait until {tomorrow}"}

    project.drop("writer", "W-3.md", {"id": "W-3"})
    wait_for(lambda: project.status()["queued_memos"].get("writer") == ["W-3.md"], what="W-3 queued, waiting")
    # the other roles keep working
    project.drop("editor", "E-1.md", {"id": "E-1"})
    project.drop("builder", "B-1.md", {"id": "B-1"})
    ended_in(project, "editor", "archive", "E-1.md")
    ended_in(project, "builder", "archive", "B-1.md")

    assert project.folder("writer", "inbox") == ["W-3.md"] and project.folder("writer", "active") == []
    assert project.status()["budget_blocks"] == blocks
    assert len(recorded(project, "argv")) == 3  # W-1, W-2, E-1: W-3 never started
    assert len(log_lines(orch, "budget: role writer spent $0.60 of its $0.50 daily budget")) == 1
    human = project.cli("status")
    assert f"paused by budget: writer: {blocks['writer']}" in " ".join(human.stdout.split())
    assert orch.stop() == 0, orch.output
    assert project.folder("writer", "inbox") == ["W-3.md"]


def test_the_team_daily_budget_stops_every_role(project: Project, fake_cli: Path) -> None:
    project.configure(
        {
            "writer": sdk_role(project, fake_cli, fake={"cost": "0.3"}),
            "editor": sdk_role(project, fake_cli, fake={"cost": "0.3"}),
            "builder": {},
        },
        budget={"per_day_usd": 0.5},
        rescan_interval="0.1s",
    )
    orch = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"})
    ended_in(project, "writer", "archive", "W-1.md")
    assert project.status()["budget_blocks"] == {}  # $0.30 of $0.50
    project.drop("editor", "E-1.md", {"id": "E-1"})
    ended_in(project, "editor", "archive", "E-1.md")
    tomorrow = (date.today() + timedelta(days=1)).isoformat()
    why = f"the team spent $0.60 of its $0.50 daily budget; new runs wait until {tomorrow}"
    assert wait_for(lambda: project.status()["budget_blocks"], what="the team's block") == {"*": why}

    for role, name in (("writer", "W-2.md"), ("editor", "E-2.md"), ("builder", "B-1.md")):
        project.drop(role, name, {"id": name[:-3]})
    wait_for(lambda: sum(project.status()["queued"].values()) == 3, what="three memos queued, waiting")
    assert len(log_lines(orch, f"budget: {why}")) == 1
    assert orch.stop() == 0, orch.output
    assert project.records() == []  # the command role never started either

    again = project.up()  # a restart spends nothing new: the block holds from the start
    assert project.status()["budget_blocks"] == {"*": why}
    wait_for(lambda: sum(project.status()["queued"].values()) == 3, what="the memos queued again after a restart")
    assert again.stop() == 0, again.output
    for role, name in (("writer", "W-2.md"), ("editor", "E-2.md"), ("builder", "B-1.md")):
        assert project.folder(role, "inbox") == [name]
    assert len(recorded(project, "argv")) == 2


# ---------------------------------------------------------------- retries that resume


def test_a_retry_resumes_the_failed_session_and_counts_its_cost_once(project: Project, fake_cli: Path) -> None:
    fake = {"cost": "0.25", "fail_attempts": "1", "sessions": str(project.root / "sessions.json")}
    project.configure(
        {
            "writer": sdk_role(project, fake_cli, retry=QUICK_RETRY, retry_resumes=True, fake=fake),
            # starts afresh; its own sessions file, since two fakes writing one file at once could lose an update
            "editor": sdk_role(
                project,
                fake_cli,
                record="editor",
                retry=QUICK_RETRY,
                fake={**fake, "sessions": str(project.root / "sessions-editor.json")},
            ),
        }
    )
    orch = project.up()
    project.drop("writer", "W-1.md", {"id": "W-1"})
    project.drop("editor", "E-1.md", {"id": "E-1"})
    ended_in(project, "writer", "archive", "W-1.md")
    ended_in(project, "editor", "archive", "E-1.md")

    row = wait_for(lambda: run_row(project, "W-1.md"), what="W-1's row")
    results = [line for line in transcript(project, row["run_id"]) if line["type"] == "result"]
    assert [r["is_error"] for r in results] == [True, False]
    failed_session = results[0]["session_id"]
    argv = recorded(project, "argv")
    assert len(argv) == 2
    assert not any(a.startswith("--resume") for a in argv[0])
    assert f"--resume={failed_session}" in argv[1]  # the retry carries on the failed attempt's session
    assert row["session_id"] == failed_session and row["attempt"] == 2 and row["state"] == "succeeded"
    # the resumed session's total already holds the first attempt's $0.25: counted once, not twice
    assert (row["cost_usd"], row["input_tokens"], row["output_tokens"], row["num_turns"]) == (0.5, 200, 40, 2)
    assert len(log_lines(orch, "W-1 attempt 1 failed: the Anthropic API is overloaded")) == 1

    fresh = wait_for(lambda: run_row(project, "E-1.md"), what="E-1's row")
    editor_argv = recorded(project, "argv", "editor")
    assert len(editor_argv) == 2 and not any(a.startswith("--resume") for argv in editor_argv for a in argv)
    # two sessions of one run: each one's figures, summed
    assert (fresh["cost_usd"], fresh["input_tokens"], fresh["num_turns"], fresh["attempt"]) == (0.5, 200, 2, 2)
    assert history(project)["totals"]["cost_usd"] == pytest.approx(1.0)
    assert orch.stop() == 0, orch.output


# ---------------------------------------------------------------- start-up check


def test_up_refuses_an_sdk_role_whose_cli_path_does_not_exist(project: Project) -> None:
    missing = project.root / "bin" / "no-such-claude"
    project.configure({"writer": {"backend": "sdk", "cli_path": str(missing)}, "builder": {}})
    project.drop("writer", "W-1.md", {"id": "W-1"})
    orch = project.up(wait_ready=False)
    assert orch.wait() == 2
    lines = orch.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in orch.output, orch.output
    assert "writer" in lines[0] and "cli_path" in lines[0] and str(missing) in lines[0]
    assert project.folder("writer", "inbox") == ["W-1.md"]  # nothing was touched
