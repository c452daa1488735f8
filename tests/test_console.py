"""The one printer (console), the rotating log file, and the one view of a run (RunView)."""

from __future__ import annotations

import ast
import io
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console as RichConsole

from conftest import Project, wait_for
from orchestrator import console
from orchestrator.config import Role
from orchestrator.console import LOG_BACKUPS, LOG_MAX_BYTES, Console
from orchestrator.console.live import render_view
from orchestrator.control.history_view import print_history
from orchestrator.control.status_view import print_status
from orchestrator.core.run import MemoRef, Run
from orchestrator.core.states import RunState
from orchestrator.core.view import CANCEL_KEYS, HISTORY_KEYS, STATUS_KEYS, CancelView, RunView
from orchestrator.store import Store

PACKAGE = Path(console.__file__).parent.parent
OPERATIONS = PACKAGE.parent / "docs" / "operations.md"


# ---------------------------------------------------------------- one printer
def test_only_the_console_module_calls_print() -> None:
    # the sdk runner and the demo agent are processes of their own, with their own output
    own_output = {
        PACKAGE / "console" / "__init__.py",
        PACKAGE / "demo_agent.py",
        PACKAGE / "agents" / "sdk" / "runner.py",
    }
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in own_output:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                if name == "print":
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == [], f"print calls outside the console: {offenders}"


def test_say_fail_and_print_json_write_exact_lines(capsys: pytest.CaptureFixture[str]) -> None:
    console.say("cancelled B-1")
    console.fail("no orchestrator is running")
    console.print_json({"b": "ü", "a": [1, None], "when": Path("/x")})
    out, err = capsys.readouterr()
    assert out == 'cancelled B-1\n{\n  "b": "ü",\n  "a": [\n    1,\n    null\n  ],\n  "when": "/x"\n}\n'
    assert err == "orchestrator: no orchestrator is running\n"


def _snapshot(runs: list[Any], recent: list[Any]) -> dict[str, Any]:
    return {
        "running": True,
        "pid": 99,
        "root": "/team",
        "ending": None,
        "runs": runs,
        "recent": recent,
        "queued": {"builder": 2},
        "limits": {"running": 1, "max_concurrent": 10},
        "events": ["e1"],
    }


RUNNING = RunView(
    run_id=7,
    role="builder",
    memo="b.md",
    memo_id="B-1",
    memos=["b.md"],
    subject="three articles",
    state="running",
    pid=4242,
    attempt=1,
    elapsed=12.4,
    backend="sdk",
    activity="Bash",
    cost_usd=0.0123,
)
FAILED = RunView(
    run_id=3,
    role="pm",
    memo="a.md",
    memos=["a.md"],
    state="failed",
    attempt=2,
    exit_code=3,
    ended_at="2026-11-30T09:10:01.000+01:00",
    reason="exit code 3",
    input_tokens=10,
)


def test_status_tables_on_a_pipe_are_160_wide_and_show_the_runs() -> None:
    out = io.StringIO()
    print_status(_snapshot([RUNNING.model_copy(update={"subject": "x" * 200})], [FAILED]), out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "orchestrator running for /team (pid 99)"
    assert max(len(line) for line in lines) == 160  # not a terminal: the fixed width, whatever $COLUMNS says
    text = out.getvalue()
    for shown in (
        "B-1",
        "running",
        "4242",
        "12s",
        "0.0123",
        "a.md",
        "failed",
        "2026-11-30T09:10:01",
        "10/0",
        "exit code 3",
        "queued: builder 2",
    ):
        assert shown in text, shown


def test_views_and_their_json_print_the_same() -> None:
    # the live view gets RunViews (or, today, Run.describe() dicts); status gets the JSON of the control channel
    as_json = _snapshot([RUNNING.to_json()], [FAILED.to_json()])
    as_views = _snapshot([RUNNING], [FAILED])
    for draw in (print_status, print_history):
        if draw is print_history:
            totals = {"by_role": {}, "by_day": {}, "cost_usd": 0.0, "runs": 2}
            as_json, as_views = (
                {"runs": [RUNNING.to_history_json(), FAILED.to_history_json()], "totals": totals},
                {"runs": [RUNNING, FAILED], "totals": totals},
            )
        one, other = io.StringIO(), io.StringIO()
        draw(as_json, one)
        draw(as_views, other)
        assert one.getvalue() == other.getvalue() and "B-1" in one.getvalue()
    one, other = io.StringIO(), io.StringIO()
    RichConsole(file=one, width=150).print(render_view(_snapshot([RUNNING.to_json()], [])))
    RichConsole(file=other, width=150).print(render_view(_snapshot([RUNNING], [])))
    assert one.getvalue() == other.getvalue() and "$0.0123 Bash" in one.getvalue()


# ---------------------------------------------------------------- the log file
def test_the_log_file_rotates_at_its_size_and_keeps_five_old_files(tmp_path: Path) -> None:
    log = tmp_path / "state" / "orchestrator.log"
    screen = io.StringIO()
    con = Console(log, stream=screen, live=False, max_log_bytes=400)
    try:
        for n in range(200):
            con.line(f"line {n:03d} " + "x" * 20, role="builder")
    finally:
        con.close()
    files = [log, *(log.with_name(f"{log.name}.{i}") for i in range(1, LOG_BACKUPS + 1))]
    assert all(f.exists() for f in files) and not log.with_name(f"{log.name}.{LOG_BACKUPS + 1}").exists()
    assert all(0 < f.stat().st_size <= 400 for f in files)
    kept = [line for f in reversed(files) for line in f.read_text(encoding="utf-8").splitlines()]
    numbers = [int(re.search(r"line (\d+)", line).group(1)) for line in kept]  # type: ignore[union-attr]
    assert numbers == list(range(200 - len(numbers), 200)), "old lines are dropped, none lost or reordered in between"
    assert len(screen.getvalue().splitlines()) == 200  # the terminal saw every line


def test_the_default_log_size_is_the_one_the_docs_name(tmp_path: Path) -> None:
    con = Console(tmp_path / "o.log", stream=io.StringIO(), live=False)
    try:
        handler = con._log
        assert handler is not None and (handler.maxBytes, handler.backupCount) == (LOG_MAX_BYTES, LOG_BACKUPS)  # type: ignore[attr-defined]
    finally:
        con.close()
    mb = LOG_MAX_BYTES // (1024 * 1024)
    text = OPERATIONS.read_text(encoding="utf-8")
    assert f"rotates at {mb} MB" in text and f"{LOG_BACKUPS} older" in text


def test_a_log_that_cannot_be_written_costs_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    screen = io.StringIO()
    con = Console(Path("/dev/full"), stream=screen, live=False)  # every write fails with ENOSPC
    try:
        con.line("still shown", role="builder")
        con.error("boom\nTraceback (most recent call last): ...")
    finally:
        con.close()
    assert "[builder] still shown" in screen.getvalue() and "ERROR boom (details in the log)" in screen.getvalue()
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- RunView
def _run(state: RunState, agent: Any = None, memos: int = 1) -> Run:
    role = Role(name="builder", prompt="prompts/builder.md", backend="sdk")
    refs = [
        MemoRef(
            name=f"m{i}.md",
            path=Path(f"/team/memo/builder/active/m{i}.md"),
            memo_id=f"M-{i}" if i == 0 else None,
            subject="three articles" if i == 0 else None,
        )
        for i in range(memos)
    ]
    return Run(
        run_id=7,
        role=role,
        memos=refs,
        arrival=1,
        attempt=2,
        state=state,
        agent=agent,
        log_path=Path("/team/.orchestrator/logs/7-builder.log"),
        started_mono=time.monotonic() - 5.0,
        started_at="2026-11-30T09:12:01.000+01:00",
        next_attempt_at="2026-11-30T09:13:01.000+01:00",
    )


def _described(run: Run) -> dict[str, Any]:
    """The keys a live run had in ``status --json`` before RunView (the old ``Run.describe``)."""
    agent = run.agent
    return {
        "run_id": run.run_id,
        "seq": run.seq,
        "role": run.role.name,
        "memo": run.memos[0].name,
        "memo_id": run.memos[0].memo_id,
        "memos": [m.name for m in run.memos],
        "subject": run.subject,
        "state": run.state.value,
        "pid": run.pid,
        "attempt": run.attempt,
        "started_at": run.started_at,
        "elapsed": round(run.elapsed(time.monotonic()), 3) if run.state.live else None,
        "next_attempt_at": run.next_attempt_at if run.state is RunState.RETRY_WAIT else None,
        "backend": run.role.backend,
        "activity": agent.activity if agent else None,
        "cost_usd": agent.cost_usd if agent else None,
        "log": str(run.log_path) if run.log_path else None,
    }


@pytest.mark.parametrize("state", [RunState.RUNNING, RunState.RETRY_WAIT, RunState.QUEUED, RunState.CANCELLING])
def test_from_run_agrees_with_describe_for_every_key(state: RunState) -> None:
    agent = SimpleNamespace(pid=4242, activity="Bash: ls", cost_usd=0.25, node=None) if state.live else None
    run = _run(state, agent, memos=2)
    view = RunView.from_run(run, time.monotonic()).to_json()
    described = _described(run)
    assert list(view) == list(STATUS_KEYS)
    elapsed = view.pop("elapsed")
    assert {k: v for k, v in view.items() if k in described} == {k: v for k, v in described.items() if k != "elapsed"}
    assert all(view[k] is None for k in set(view) - set(described))  # a live run has not ended
    if state.live:
        assert elapsed == pytest.approx(described["elapsed"], abs=0.5) and elapsed >= 5.0
        assert (view["pid"], view["activity"], view["cost_usd"]) == (4242, "Bash: ls", 0.25)
    else:
        assert elapsed is None and view["pid"] is None
    assert view["next_attempt_at"] == ("2026-11-30T09:13:01.000+01:00" if state is RunState.RETRY_WAIT else None)
    assert (view["memo"], view["memo_id"], view["memos"]) == ("m0.md", "M-0", ["m0.md", "m1.md"])


def test_from_row_reads_a_store_row(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    try:
        run_id = store.insert_run(
            role="builder",
            backend="sdk",
            memos=["b.md", "c.md"],
            memo_ids=["B-1", None],
            subject="three articles",
            state="running",
            attempt=1,
        )
        store.update_run(
            run_id,
            state="failed",
            pid=4242,
            started_at="2026-11-30T09:12:01.000+01:00",
            ended_at="2026-11-30T09:12:09.000+01:00",
            exit_code=3,
            reason="exit code 3",
            log_path="/team/.orchestrator/logs/1-builder.log",
            cost_usd=0.5,
            input_tokens=10,
            output_tokens=20,
            num_turns=3,
            session_id="s-1",
            is_error=1,
            log_pruned_at="2026-12-30T03:00:00.000+01:00",
            workspace="B-1",
            branch="orchestrator/B-1",
        )
        row = store.run(run_id)
    finally:
        store.close()
    assert row is not None
    view = RunView.from_row(row)
    assert view.to_json() == {
        "run_id": run_id,
        "seq": None,
        "role": "builder",
        "memo": "b.md",
        "memo_id": "B-1",
        "workspace": "B-1",
        "branch": "orchestrator/B-1",
        "memos": ["b.md", "c.md"],
        "subject": "three articles",
        "state": "failed",
        "pid": 4242,
        "attempt": 1,
        "started_at": "2026-11-30T09:12:01.000+01:00",
        "ended_at": "2026-11-30T09:12:09.000+01:00",
        "elapsed": None,
        "next_attempt_at": None,
        "exit_code": 3,
        "reason": "exit code 3",
        "backend": "sdk",
        "activity": None,
        "cost_usd": 0.5,
        "cost_estimated": False,
        "input_tokens": 10,
        "cached_input_tokens": None,
        "cache_write_input_tokens": None,
        "output_tokens": 20,
        "reasoning_output_tokens": None,
        "log": "/team/.orchestrator/logs/1-builder.log",
        "log_pruned_at": "2026-12-30T03:00:00.000+01:00",
    }
    history = view.to_history_json()
    assert list(history) == list(HISTORY_KEYS)
    assert history["log"] == "/team/.orchestrator/logs/1-builder.log", "history names each run's log, as status does"
    assert (history["num_turns"], history["session_id"], history["is_error"]) == (3, "s-1", True)
    assert RunView.of(json.loads(json.dumps(view.to_json()))).to_json() == view.to_json()  # the channel's round trip


def test_a_cancel_view_answers_with_the_keys_of_cancel() -> None:
    run = _run(RunState.QUEUED, memos=2)  # a queued memo's stand-in run: the answer names the state it ends in
    answer = CancelView.from_run(
        run,
        0.0,
        state="cancelled",
        previous_state="running",
        pids=[4242, 4243],
        seconds=0.051,
        survivors=[],
        moved_to=["/team/memo/builder/cancelled/m0.md"],
        reason="called off",
    ).to_json()
    assert list(answer) == list(CANCEL_KEYS)
    assert (answer["state"], answer["previous_state"], answer["pids"], answer["escalated"]) == (
        "cancelled",
        "running",
        [4242, 4243],
        False,
    )
    assert answer["memos"] == ["m0.md", "m1.md"] and answer["notice"] is None
    # an answer about a run that was already being cancelled names no run
    assert CancelView.of({"memo": "m0.md", "role": "builder", "state": "cancelled", "note": "x"}).run_id is None


# ---------------------------------------------------------------- through the real CLI
def test_status_and_history_json_of_a_real_run_have_the_view_keys(project: Project) -> None:
    project.configure({"builder": {}})
    project.drop("builder", "k.md", {"id": "K-1", "subject": "keys"})
    orch = project.up()
    snap = wait_for(lambda: (s := project.status())["recent"] and s, what="the run to finish")
    assert [list(r) for r in snap["recent"]] == [list(STATUS_KEYS)]
    assert (snap["recent"][0]["memo_id"], snap["recent"][0]["state"]) == ("K-1", "succeeded")
    assert orch.stop() == 0
    after = project.status()  # from the database now
    assert after["running"] is False and [list(r) for r in after["recent"]] == [list(STATUS_KEYS)]
    assert after["recent"][0]["log"] == snap["recent"][0]["log"] and after["recent"][0]["log"]
    history = project.cli("history", "--json")
    assert history.returncode == 0, history.stderr
    assert [list(r) for r in json.loads(history.stdout)["runs"]] == [list(HISTORY_KEYS)]
    human = project.cli("history")
    assert human.returncode == 0 and "K-1" in human.stdout and "total: 1 runs, $0.0000" in human.stdout


def test_the_log_writes_a_turn_of_the_loop_at_once_and_a_line_without_a_loop_at_once(tmp_path):
    import asyncio

    from orchestrator.console import RotatingLog

    path = tmp_path / "orchestrator.log"
    log = RotatingLog(path)
    log.write("no loop")
    assert path.read_text() == "no loop\n", "outside a loop a line goes out at once"

    async def turn() -> str:
        log.write("one")
        log.write("two")
        held = path.read_text()
        await asyncio.sleep(0)  # the loop turns: the flush it was asked for runs
        await asyncio.sleep(0)
        return held

    assert asyncio.run(turn()) == "no loop\n", "within a turn the lines wait for its end"
    assert path.read_text() == "no loop\none\ntwo\n"
    log.close()


def test_an_error_line_names_the_program_once(capsys: pytest.CaptureFixture[str]) -> None:
    """A message that names the program itself is printed as it is; one that merely begins with the word (a branch
    or a memo named orchestrator) still gets the prefix."""
    for message, printed in (
        ("orchestrator stop: --timeout: bad", "orchestrator stop: --timeout: bad"),
        ("orchestrator (pid 7) still runs after 1s", "orchestrator (pid 7) still runs after 1s"),
        ("orchestrator: x", "orchestrator: x"),
        ("orchestrator task add: --due x: bad", "orchestrator task add: --due x: bad"),
        ("orchestrator up --web 127.0.0.1:99999: too high", "orchestrator up --web 127.0.0.1:99999: too high"),
        ("no such memo", "orchestrator: no such memo"),
        (
            "orchestrator is checked out in /srv/wt; land it there",
            "orchestrator: orchestrator is checked out in /srv/wt; land it there",
        ),
    ):
        console.fail(message)
        assert capsys.readouterr().err == printed + "\n"
