"""The real Codex CLI (``@openai/codex``, pinned in tests/codex_cli.py) end to end, against a stand-in Responses API.

Nothing is faked but OpenAI's API: ``codex_cli.ResponsesStub`` streams its events on 127.0.0.1, every codex role's
``config`` points Codex there (a model provider whose key is ``MOCK_KEY``), and ``CODEX_HOME`` is a folder of the
test's own, so nothing reaches OpenAI. What the model answers is chosen by a mark in the memo. Without npm the
tests skip saying why (CI installs it: ``.ci/run``). Select this tier with ``-m real_codex``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
from codex_cli import ResponsesStub, codex_binary, provider

from conftest import Orchestrator, Project, wait_for
from web_harness import start

pytestmark = pytest.mark.real_codex

SLOW = 60.0  # a deadline for what the real CLI does on a busy 2-core machine
MODEL = "gpt-5-codex"
PRICE = {"input": 1.25, "cached_input": 0.125, "output": 10.0}


@pytest.fixture
def codex() -> Path:
    import codex_cli

    binary = codex_binary()
    if binary is None:
        pytest.skip(f"the real Codex CLI is not available: {codex_cli.why_not}")
    return binary


@pytest.fixture
def stub() -> Iterator[ResponsesStub]:
    with ResponsesStub() as server:
        yield server


@pytest.fixture
def env(tmp_path: Path, codex: Path) -> dict[str, str]:
    """The orchestrator's environment (its agents inherit it): a ``codex`` on PATH, a CODEX_HOME of its own and
    the stand-in's key; no OpenAI key at all."""
    home = Path.home() / ".cache" / "orchestrator-tests" / "codex-homes" / tmp_path.name  # not under /tmp: Codex
    home.mkdir(parents=True, exist_ok=True)  # refuses to put its helper binaries in a temporary folder
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "codex"
    if not link.exists():
        link.symlink_to(codex)
    return {
        "CODEX_HOME": str(home),
        "MOCK_KEY": "test",
        "OPENAI_API_KEY": "",
        "CODEX_API_KEY": "",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def codex_role(stub: ResponsesStub, **settings: Any) -> dict[str, Any]:
    return {
        "backend": "codex",
        "command": ["codex", "exec", "--json", "--skip-git-repo-check", "--sandbox", "workspace-write", "-"],
        "model": MODEL,
        "config": provider(stub.port),
        "retry": {"max": 2, "backoff": ["0.1s"]},
        **settings,
    }


def history_row(project: Project, memo: str) -> dict[str, Any]:
    result = project.cli("history", "--json")
    assert result.returncode == 0, result.stderr
    rows = [r for r in json.loads(result.stdout)["runs"] if r["memo"] == memo]
    assert rows, result.stdout
    return rows[-1]  # type: ignore[no-any-return]


def recent(project: Project, memo: str) -> dict[str, Any]:
    return next(r for r in project.status()["recent"] if r["memo"] == memo)


def ended(project: Project, role: str, folder: str, memo: str, timeout: float = SLOW) -> None:
    wait_for(lambda: memo in project.folder(role, folder), timeout, f"{memo} in memo/{role}/{folder}/")


def test_a_memo_runs_with_its_tokens_estimated_cost_and_thread(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    project.configure({"builder": codex_role(stub, budget={"per_day_usd": 0.005})}, prices={MODEL: PRICE})
    project.up(**env)
    project.drop("builder", "B-1.md", body="[shell: touch made-by-codex.txt] build it")
    ended(project, "builder", "archive", "B-1.md")
    assert (project.root / "made-by-codex.txt").exists()  # the real CLI ran the model's command in the run's folder
    row = history_row(project, "B-1.md")
    # two model calls (the command, then the answer), each 1200 in (200 cached) and 300 out
    assert row["input_tokens"] == 2400 and row["output_tokens"] == 600
    assert row["cost_usd"] == pytest.approx((2000 * 1.25 + 400 * 0.125 + 600 * 10.0) / 1e6)
    assert row["session_id"] and len(row["session_id"]) == 36, row
    assert (row["cached_input_tokens"], row["cache_write_input_tokens"], row["reasoning_output_tokens"]) == (
        400,
        0,
        240,
    )
    assert row["cost_estimated"] is True, row
    text = project.cli("history")
    assert "~0.0086" in text.stdout and "estimated from the token counts and `prices`" in text.stdout, text.stdout
    shown = recent(project, "B-1.md")
    assert shown["cost_estimated"] is True and shown["reasoning_output_tokens"] == 240, shown
    # the estimate counts toward the day's budget (0.005), and the line that says so marks it as estimated
    wait_for(lambda: "builder" in project.status()["budget_blocks"], SLOW, "the budget counted")
    status = project.status()
    assert "role builder spent ~$0.01 (estimated in part from `prices`)" in status["budget_blocks"]["builder"]
    assert "~0.0086" in project.cli("status").stdout
    log = Path(recent(project, "B-1.md")["log"]).read_text(encoding="utf-8")
    assert '"type":"thread.started"' in log and row["session_id"] in log
    (journal,) = (project.root / "memo" / "builder" / "journal").glob("*.md")
    assert "- Cost: ~$0.0086 (estimated from `prices`); tokens: 2400 in, 600 out" in journal.read_text(encoding="utf-8")
    shown = project.cli("logs", "B-1")
    assert shown.returncode == 0, shown.stderr
    assert f"thread {row['session_id']}" in shown.stdout, shown.stdout
    if '"type":"command_execution"' in log:  # Codex's --json stream now and then leaves a quick command's item out
        assert "→ shell: /bin/bash -lc 'touch made-by-codex.txt'" in shown.stdout, shown.stdout
    assert "assistant: Done: answer" in shown.stdout


def test_a_tell_during_a_turn_continues_the_same_thread(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    project.configure({"builder": codex_role(stub)}, prices={MODEL: PRICE})
    project.up(**env)
    project.drop("builder", "B-7.md", body="[held] build it")
    wait_for(lambda: stub.requests, SLOW, "the first turn's model call")
    told = project.cli("tell", "B-7", "now also write the docs")
    assert told.returncode == 0, told.stderr
    assert "queued for the end of its turn" in told.stdout, told.stdout
    (running,) = project.status()["runs"]
    assert running["activity"] == "1 tell(s) kept for the end of its turn", running
    stub.hold.set()
    ended(project, "builder", "archive", "B-7.md")
    assert len(stub.requests) == 2, stub.requests
    second = json.dumps(stub.requests[1]["input"])  # the whole thread so far, then the told text
    assert second.index("build it") < second.index("Done: answer 1.") < second.index("now also write the docs")
    row = history_row(project, "B-7.md")
    assert row["state"] == "succeeded" and row["attempt"] == 1, row
    assert row["input_tokens"] == 2400 and row["output_tokens"] == 600, row  # Codex's thread totals
    assert row["cost_usd"] == pytest.approx((2000 * 1.25 + 400 * 0.125 + 600 * 10.0) / 1e6)
    log = Path(recent(project, "B-7.md")["log"]).read_text(encoding="utf-8")
    assert log.count(f'"thread_id":"{row["session_id"]}"') == 2, log  # one thread, two processes
    assert project.folder("builder", "archive") == ["B-7.md"] and project.folder("builder", "failed") == []
    after = project.cli("tell", "B-7", "too late")
    assert after.returncode != 0 and "B-7" in after.stderr, after.stderr


def recorded_pid(project: Project, memo: str) -> int | None:
    """The agent pid the database holds for the live run of ``memo`` (what a restart takes back)."""
    with sqlite3.connect(project.root / ".orchestrator" / "state.db") as db:
        row = db.execute("SELECT pid FROM runs WHERE memos LIKE ? ORDER BY run_id DESC", (f"%{memo}%",)).fetchone()
    return None if row is None else row[0]


def told_during_a_held_turn(
    project: Project, env: dict[str, str], stub: ResponsesStub, memo: str, text: str
) -> Orchestrator:
    """A codex builder's ``memo`` under way, its model call held (``[held]``), and ``text`` told to it: its `up`."""
    project.configure({"builder": codex_role(stub)}, prices={MODEL: PRICE})
    first = project.up(**env)
    project.drop("builder", f"{memo}.md", body="[held] build it")
    wait_for(lambda: stub.requests, SLOW, "the first turn's model call")
    told = project.cli("tell", memo, text)
    assert told.returncode == 0 and "queued for the end of its turn" in told.stdout, (told.stdout, told.stderr)
    return first


def test_a_told_turn_running_when_up_is_killed_is_taken_back_not_repeated_and_takes_a_tell(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    first = told_during_a_held_turn(project, env, stub, "B-9", "[later] now also write the docs")
    stub.hold.set()
    wait_for(lambda: len(stub.requests) == 2, SLOW, "the told turn's model call")
    (running,) = project.status()["runs"]
    told_turn = psutil.Process(running["pid"])
    assert "resume" in told_turn.cmdline(), told_turn.cmdline()
    wait_for(lambda: recorded_pid(project, "B-9.md") == told_turn.pid, SLOW, "the told turn's pid on record")
    first.signal(signal.SIGKILL)
    first.wait()
    again = project.up(**env)
    again.wait_output("adopted its live agent")
    (adopted,) = project.status()["runs"]  # taken back running, not finished by the first turn's exit record
    assert adopted["pid"] == told_turn.pid and adopted["attempt"] == 1, adopted
    told = project.cli("tell", "B-9", "and finally the tests")  # an adopted run takes a tell too
    assert told.returncode == 0 and "queued for the end of its turn" in told.stdout, (told.stdout, told.stderr)
    stub.later.set()
    ended(project, "builder", "archive", "B-9.md")
    assert len(stub.requests) == 3, [json.dumps(r["input"])[-200:] for r in stub.requests]  # no turn repeated
    third = json.dumps(stub.requests[2]["input"])
    assert third.index("now also write the docs") < third.index("Done: answer 2.") < third.index("finally the tests")
    (row,) = [r for r in json.loads(project.cli("history", "--json").stdout)["runs"] if r["memo"] == "B-9.md"]
    assert row["state"] == "succeeded" and row["attempt"] == 1 and row["num_turns"] == 3, row  # turns before it too
    assert not told_turn.is_running() or told_turn.status() == psutil.STATUS_ZOMBIE


def test_a_tell_kept_when_up_is_killed_is_carried_on_after_the_restart(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    """The receipt said "queued for the end of its turn": a SIGKILL of `up` before that end does not undo it."""
    first = told_during_a_held_turn(project, env, stub, "B-10", "now also write the docs")
    (running,) = project.status()["runs"]
    first.signal(signal.SIGKILL)
    first.wait()
    again = project.up(**env)
    again.wait_output("adopted its live agent")
    (adopted,) = project.status()["runs"]
    assert adopted["pid"] == running["pid"] and adopted["activity"] == "1 tell(s) kept for the end of its turn", adopted
    stub.hold.set()
    ended(project, "builder", "archive", "B-10.md")
    assert len(stub.requests) == 2, [json.dumps(r["input"])[-200:] for r in stub.requests]
    second = json.dumps(stub.requests[1]["input"])
    assert second.index("build it") < second.index("Done: answer 1.") < second.index("now also write the docs")
    row = history_row(project, "B-10.md")
    assert row["state"] == "succeeded" and row["attempt"] == 1, row


def test_the_dashboard_and_metrics_show_its_tokens_and_its_cost_as_estimated(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    project.configure({"builder": codex_role(stub)}, prices={MODEL: PRICE})
    board = start(project, **env)
    project.drop("builder", "B-8.md", body="build it")
    ended(project, "builder", "archive", "B-8.md")
    run_id = history_row(project, "B-8.md")["run_id"]
    metrics = board.get("/metrics").text
    assert 'orchestrator_tokens_total{kind="reasoning_output",role="builder"} 120.0' in metrics, metrics
    assert 'orchestrator_cost_estimated_usd_total{role="builder"}' in metrics, metrics
    assert "~$0.0043" in board.get("/history").text
    page = board.get(f"/runs/{run_id}").text
    assert "~$0.0043" in page and "cached_input_tokens" in page and ">200<" in page, page
    board.close()


def test_a_budget_over_a_model_with_no_price_is_refused_at_start_in_one_line(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    project.configure({"builder": codex_role(stub, budget={"per_day_usd": 5})})
    orch = project.up(wait_ready=False, **env)
    assert orch.wait() != 0
    refusal = [line for line in orch.output.splitlines() if "prices" in line]
    assert len(refusal) == 1 and f"model '{MODEL}' has no price" in refusal[0], orch.output
    assert "Traceback" not in orch.output


def test_a_run_that_dies_leaves_its_last_command_and_thread_in_the_handoff_and_logs_shows_it(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    project.configure({"builder": codex_role(stub, retry={"max": 0})}, prices={MODEL: PRICE})
    project.up(**env)
    project.drop("builder", "B-9.md", body="[then500] [shell: echo checked > seen.txt] build it")
    ended(project, "builder", "failed", "B-9.md")
    row = history_row(project, "B-9.md")
    thread = row["session_id"]
    # the turn failed, so Codex's events gave no tokens: the model call it paid for counts by its rollout
    assert (row["input_tokens"], row["output_tokens"]) == (1200, 300), row
    assert row["cost_usd"] == pytest.approx((1000 * 1.25 + 200 * 0.125 + 300 * 10.0) / 1e6), row
    note = (project.root / "memo" / "builder" / "handoff.md").read_text(encoding="utf-8")
    assert f"- Session: {thread}" in note and "- Why: Codex failed: " in note, note
    shown = project.cli("logs", "B-9")
    assert shown.returncode == 0, shown.stderr
    assert "turn failed: " in shown.stdout, shown.stdout
    log = Path(recent(project, "B-9.md")["log"]).read_text(encoding="utf-8")
    if '"type":"command_execution"' in log:  # Codex's --json stream now and then leaves a quick command's item out
        assert "- Last tool use: shell: " in note and "echo checked > seen.txt" in note, note
        assert "→ shell: " in shown.stdout, shown.stdout


def test_a_retry_that_resumes_a_failed_turns_thread_counts_its_spend_once(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    role = codex_role(stub, retry={"max": 1, "backoff": ["0.1s"]}, retry_resumes=True)
    project.configure({"builder": role}, prices={MODEL: PRICE})
    project.up(**env)
    project.drop("builder", "B-12.md", body="[then500] [shell: echo checked > seen.txt] build it")
    ended(project, "builder", "failed", "B-12.md")
    row = history_row(project, "B-12.md")
    assert row["attempt"] == 2, row
    # one model call was paid for, in the first attempt; the second resumed its thread and failed at its first call:
    # the thread's totals, counted once, not once an attempt
    assert (row["input_tokens"], row["output_tokens"]) == (1200, 300), row
    calls = [r for r in stub.requests if "B-12" in json.dumps(r)]
    assert len(calls) >= 3, len(calls)  # the command, the 500 after it, and the resumed attempt's call
    assert '"function_call_output"' in json.dumps(calls[-1])  # it carried the first attempt's thread on


def test_a_run_in_a_thread_codex_keeps_not_records_its_tokens_and_no_session(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    command = ["codex", "exec", "--json", "--ephemeral", "--skip-git-repo-check", "--sandbox", "workspace-write", "-"]
    project.configure({"builder": codex_role(stub, command=command)}, prices={MODEL: PRICE})
    project.up(**env)
    project.drop("builder", "B-11.md", body="[shell: touch made-by-codex.txt] build it")
    ended(project, "builder", "archive", "B-11.md")
    row = history_row(project, "B-11.md")
    assert row["input_tokens"] == 2400 and row["output_tokens"] == 600, row
    assert row["session_id"] is None, row  # no thread anyone could resume, and none a restart would take as one


def test_a_silent_stream_is_stopped_as_stalled(project: Project, env: dict[str, str], stub: ResponsesStub) -> None:
    project.configure({"builder": codex_role(stub, stall_timeout="2s", retry={"max": 0})})
    project.up(**env)
    project.drop("builder", "B-10.md", body="[slow] build it")
    ended(project, "builder", "failed", "B-10.md")
    assert recent(project, "B-10.md")["reason"].startswith("stalled: no output for 2s"), recent(project, "B-10.md")


def test_a_rejected_key_fails_at_once_naming_the_login(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    project.configure({"builder": codex_role(stub)})
    project.up(**env)
    project.drop("builder", "B-2.md", body="[auth] build it")
    ended(project, "builder", "failed", "B-2.md")
    run = recent(project, "B-2.md")
    assert "codex login" in run["reason"] and "401" in run["reason"], run["reason"]
    assert run["attempt"] == 1  # a permanent failure is not retried


def test_a_usage_limit_pauses_the_account_and_the_memo_then_runs_once(
    project: Project, env: dict[str, str], stub: ResponsesStub, tmp_path: Path
) -> None:
    limited = tmp_path / "limited"
    limited.write_text("429 until removed\n", encoding="utf-8")
    stub.limited_while = limited
    stub.resets_at = 0  # a time already past: Codex shows it, the account probes at once
    project.configure({"builder": codex_role(stub)}, usage_limits={"probe": "1s", "max_probe": "2s"})
    project.up(**env)
    project.drop("builder", "B-3.md", body="build it")
    wait_for(lambda: project.status()["paused"], SLOW, "the account paused")
    paused = project.status()["paused"]["team"]
    assert paused["reason"].startswith("usage limit"), paused
    assert project.folder("builder", "failed") == []
    limited.unlink()
    ended(project, "builder", "archive", "B-3.md")
    row = history_row(project, "B-3.md")
    assert row["state"] == "succeeded" and row["attempt"] == 1, row
    assert project.folder("builder", "failed") == []


def test_a_cancel_stops_the_tree(project: Project, env: dict[str, str], stub: ResponsesStub) -> None:
    project.configure({"builder": codex_role(stub)})
    project.up(**env)
    project.drop("builder", "B-4.md", body="[slow] build it")
    wait_for(lambda: any("[slow]" in json.dumps(r) for r in stub.requests), SLOW, "the slow stream started")
    pid = next(r for r in project.status()["runs"] if r["memo"] == "B-4.md")["pid"]
    tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    result = project.cli("cancel", "B-4")
    assert result.returncode == 0, result.stderr
    ended(project, "builder", "cancelled", "B-4.md")
    wait_for(
        lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree), SLOW, "the tree gone"
    )


def test_an_agent_sends_a_memo_with_orchestrator_bin(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    project.configure({"builder": codex_role(stub), "reviewer": {}})
    project.up(**env)
    send = "$ORCHESTRATOR_BIN send --to reviewer please-review"  # Codex's bash -lc may not find it on PATH
    project.drop("builder", "B-5.md", body=f"[shell: {send}] build it, then ask for a review")
    ended(project, "builder", "archive", "B-5.md")
    wait_for(lambda: project.folder("reviewer", "archive"), SLOW, "the sent memo run by the reviewer")
    (sent,) = (project.root / "memo" / "reviewer" / "archive").glob("*.md")
    text = sent.read_text(encoding="utf-8")
    assert "please-review" in text and "builder" in text, text


def test_an_answer_to_its_question_continues_the_same_thread(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    role = codex_role(stub)
    role["config"] = {**role["config"], "sandbox_workspace_write.network_access": True}  # the socket to `up`
    project.configure({"builder": role})
    project.up(**env)
    ask = '$ORCHESTRATOR_BIN ask "design A or design B?"'
    project.drop("builder", "B-8.md", body=f"[shell: {ask}] build it")
    wait_for(lambda: project.folder("builder", "waiting") == ["B-8.md"], SLOW, "the run waiting for a person")
    asked = len(stub.requests)
    answered = project.cli("answer", "B-8", "design B")
    assert answered.returncode == 0, answered.stderr
    ended(project, "builder", "archive", "B-8.md")
    assert len(stub.requests) == asked + 1, stub.requests
    last = json.dumps(stub.requests[-1]["input"])  # the thread so far, then the answer as the next prompt
    assert last.index("build it") < last.index("Done: answer") < last.index("# Answers"), last[-600:]
    assert "You asked a person: design A or design B?" in last and "): design B" in last, last[-600:]
    row = history_row(project, "B-8.md")
    log = Path(recent(project, "B-8.md")["log"]).read_text(encoding="utf-8")
    assert row["state"] == "succeeded" and f'"thread_id":"{row["session_id"]}"' in log, row
    runs = [r for r in json.loads(project.cli("history", "--json").stdout)["runs"] if r["memo"] == "B-8.md"]
    assert len(runs) == 2 and len({r["session_id"] for r in runs}) == 1, runs  # the asking run's thread, resumed


def test_in_its_default_sandbox_a_question_is_refused_saying_how_to_open_it(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    project.configure({"builder": codex_role(stub)})
    project.up(**env)
    project.drop("builder", "B-9.md", body='[shell: $ORCHESTRATOR_BIN ask "may I?"] build it')
    ended(project, "builder", "archive", "B-9.md")
    # what the agent was told: the command's output as Codex sent it back to the model. Not the log: Codex's
    # --json stream now and then leaves out the command_execution item of a command that ends at once
    told = json.dumps([i for i in stub.requests[-1]["input"] if i.get("type") == "function_call_output"])
    assert "denied by a sandbox around this process" in told and "network_access: true" in told, told[-1500:]
    assert "another user" not in told


def test_a_usage_limit_with_a_later_reset_pauses_until_the_minute_codex_shows(
    project: Project, env: dict[str, str], stub: ResponsesStub
) -> None:
    stub.resets_at = int(time.time()) + 3 * 3600 + 125  # later today or tomorrow: Codex shows it to the minute
    project.configure({"builder": codex_role(stub)})
    project.up(**env)
    project.drop("builder", "B-6.md", body="[limit] build it")
    wait_for(lambda: project.status()["paused"], SLOW, "the account paused")
    paused = project.status()["paused"]["team"]
    shown = datetime.fromtimestamp(stub.resets_at).astimezone().replace(second=0, microsecond=0)
    assert datetime.fromisoformat(paused["until"]) == shown, paused
    assert project.folder("builder", "failed") == [] and project.folder("builder", "inbox") == ["B-6.md"]


def test_doctor_reports_a_logged_out_codex_in_one_line(project: Project, env: dict[str, str]) -> None:
    """The real CLI with a CODEX_HOME of its own and no key: ``codex login status`` says it is not logged in."""
    command = ["codex", "exec", "--json", "--skip-git-repo-check", "-"]
    project.configure({"builder": {"backend": "codex", "command": command}})
    found = project.cli("doctor", "--json", **env)
    assert found.returncode == 1, found.stdout + found.stderr
    (line,) = [f for f in json.loads(found.stdout) if f["role"] == "builder" and f["status"] == "fail"]
    assert "Codex is not logged in (`" in line["detail"] and "login status` exited 1)" in line["detail"], line
    assert "OPENAI_API_KEY" in line["fix"] or "OPENAI_API_KEY" in line["detail"], line
    assert project.cli("doctor", "--json", **{**env, "OPENAI_API_KEY": "sk-test"}).returncode == 0
    gone = project.cli("doctor", "--json", **{**env, "PATH": "/usr/bin:/bin"})
    (line,) = [f for f in json.loads(gone.stdout) if f["role"] == "builder" and f["status"] == "fail"]
    assert "'codex' not found on PATH" in line["detail"], line
