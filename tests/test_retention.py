"""Retention: the daily pass of ``up`` and ``orchestrator gc`` remove exactly what ``retention:`` says.

The rules are proven through the real loop with the injected clock (``tests/replay.py``): runs end, days
pass on the manual clock, the daily pass fires on it and runs on its worker thread against the real
database and folders. ``gc --dry-run`` and ``--json`` are the real command on a project whose records
were made the same way, dated days before now.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import load_config
from orchestrator.control import history, status
from orchestrator.core.errors import ConfigError, OrchestratorError
from orchestrator.retention import daily
from orchestrator.tools import logs
from replay import Replay

DAY = 86400.0
RULES = {"logs": "1d", "transcripts": "2d", "runs": "10d", "archive": "5d", "failed": "keep"}
LONG = {"timeout": "60d"}  # a run that stays running for the whole story is not timed out on the way


def play(tmp_path: Path, scenario: Any) -> Any:
    return asyncio.run(scenario(tmp_path))


def run_files(r: Replay, memo: str) -> tuple[Path, Path]:
    """The log and the transcript folder of the memo's live run, written where the agent's would be."""
    run = r.run_of(memo)
    assert run.log_path is not None
    run.log_path.parent.mkdir(parents=True, exist_ok=True)
    run.log_path.write_text("agent output\n" * 10, encoding="utf-8")
    transcript = r.root / ".orchestrator" / "runs" / str(run.run_id)
    transcript.mkdir(parents=True, exist_ok=True)
    (transcript / "transcript.jsonl").write_text('{"type": "assistant"}\n', encoding="utf-8")
    return run.log_path, transcript


async def next_pass(r: Replay, seconds: float = DAY) -> str:
    """Move the clock to the daily pass, let it run on its thread; the log line it wrote."""
    before = len(r.console.text)

    def said() -> list[str]:
        return [line for line in r.console.text[before:].splitlines() if "retention:" in line]

    await r.advance(seconds)
    deadline = asyncio.get_running_loop().time() + 30
    while not said() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)  # the pass runs on its worker thread, in real time
    await r.settle()
    assert len(said()) == 1, f"{said()}; timers pending: {r.clock.pending()}"
    return said()[0]


def test_the_daily_pass_removes_exactly_what_the_rules_say_and_nothing_of_unfinished_runs(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": LONG, "reviewer": LONG}, retention=RULES)
        r.retention.start()  # as ``serve`` does
        await r.drop("builder", "A.md")
        a_log, a_transcript = run_files(r, "A")
        await r.exit("A", 0)
        await r.drop("builder", "B.md")
        b_log, b_transcript = run_files(r, "B")
        await r.exit("B", 1)  # no retry: failed/
        await r.drop("builder", "P.md")
        p_log, p_transcript = run_files(r, "P")
        await r.exit("P", 0)
        await r.drop("reviewer", "C.md", front={"id": "C", "reply_to": "P"})  # runs on for the whole story
        c_log, c_transcript = run_files(r, "C")
        assert r.folder("builder", "archive") == ["A.md", "P.md"] and r.folder("builder", "failed") == ["B.md"]

        first = await next_pass(r, daily.START_DELAY)
        assert "nothing to remove" in first and "memo index built" in first
        assert all(p.exists() for p in (a_log, b_log, p_log, c_log, a_transcript, c_transcript))

        # a day later: the logs of the three finished runs; the running one keeps everything
        line = await next_pass(r)
        assert "3 log(s)" in line and "transcript" not in line
        assert not any(p.exists() for p in (a_log, b_log, p_log))
        assert c_log.exists() and a_transcript.exists() and b_transcript.exists()
        pruned = {row["memo"]: row["log_pruned_at"] for row in history.collect(root, every=True)["runs"]}
        assert pruned["A.md"] and pruned["B.md"] and pruned["P.md"] and pruned["C.md"] is None
        recent = {run["memo"]: run for run in status.collect(root)["recent"]}
        assert recent["A.md"]["log_pruned_at"] == pruned["A.md"] and recent["A.md"]["state"] == "succeeded"
        with pytest.raises(OrchestratorError, match=r"its log was removed by retention \(retention.logs\) at 20"):
            logs.log_of(root, "A.md")  # defect: "cannot read the run's log: No such file or directory"

        # two days: their transcript folders
        line = await next_pass(r)
        assert "3 transcript(s)" in line and "log" not in line
        assert not any(p.exists() for p in (a_transcript, b_transcript, p_transcript)) and c_transcript.exists()

        for _ in range(2):  # three and four days: nothing more is due
            assert "nothing to remove" in await next_pass(r)

        # five days: archive/ (the rule's 5d), but not P, which the running C replies to; failed/ is kept
        line = await next_pass(r)
        assert "1 memo(s)" in line
        assert r.folder("builder", "archive") == ["P.md"] and r.folder("builder", "failed") == ["B.md"]
        assert (root / "memo" / "builder" / "failed" / "B.reason").exists()
        assert r.folder("reviewer", "active") == ["C.md"]

        for _ in range(5):
            await next_pass(r)
        # ten days: the records of A and B; P is kept as builder's newest numbered run (its number goes on)
        left = history.collect(root, every=True)["runs"]
        assert sorted(row["memo"] for row in left) == ["C.md", "P.md"]
        assert r.sup.store.attempts(r.run_of("C").run_id), "the running run's attempts are all there"
        assert r.sup.store.db.execute("SELECT COUNT(*) FROM run_memos").fetchone()[0] == 2
        await r.drop("builder", "D.md")
        assert r.run_of("D").seq == 4, "the run numbers go on after the records before were removed"
        assert r.run_of("C").state.value == "running" and c_log.exists() and c_transcript.exists()
        r.close()

    play(tmp_path, scenario)


def test_the_daily_pass_comes_a_day_after_the_last_one_also_across_a_restart(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, retention=RULES)
        r.retention.start()
        assert r.clock.pending() == [daily.START_DELAY]
        await next_pass(r, daily.START_DELAY)
        assert r.clock.pending() == [DAY]
        await r.advance(3600)
        r.retention.stop()
        r.close()
        again = Replay(root, start=r.clock.now(), retention=RULES)  # a restart an hour after that pass
        again.retention.start()
        assert again.clock.pending() == [DAY - 3600], "not a second pass within the day"
        again.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ the command
def gc(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "gc", "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def aged_project(root: Path) -> None:
    """Three finished runs that ended 12, 8 and 3 days before now, and one memo an unfinished run holds."""

    async def scenario(root: Path) -> None:
        r = Replay(
            root,
            {"builder": LONG},
            start=datetime.now().astimezone() - timedelta(days=12),
            retention={"logs": "5d", "transcripts": "5d", "runs": "10d", "archive": "7d"},
        )
        for memo, then in (("OLD", 4 * DAY), ("MID", 5 * DAY), ("NEW", 0)):
            await r.drop("builder", f"{memo}.md")
            run_files(r, memo)
            await r.exit(memo, 0)
            await r.advance(then)
        await r.drop("builder", "RUNNING.md", front={"id": "RUNNING", "reply_to": "OLD"})
        run_files(r, "RUNNING")
        r.sup.store.commit_pending()
        r.close()

    asyncio.run(scenario(root))


def test_gc_dry_run_lists_what_gc_then_removes_and_json_says_it_all(tmp_path: Path) -> None:
    aged_project(tmp_path)
    logs = tmp_path / ".orchestrator" / "logs"
    before = sorted(p.name for p in logs.iterdir())
    dry = gc(tmp_path, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert planned["dry_run"] is True and sorted(p.name for p in logs.iterdir()) == before, "nothing removed"
    assert [i["path"] for i in planned["logs"]["items"]] == [
        ".orchestrator/logs/1-builder.log",
        ".orchestrator/logs/2-builder.log",
    ]
    assert [i["run_id"] for i in planned["runs"]["items"]] == [1], "only the run that ended 12 days ago"
    assert [i["path"] for i in planned["memos"]["items"]] == ["memo/builder/archive/MID.md"]
    assert planned["kept"] == {"unfinished_runs": 1, "memos_in_use": ["memo/builder/archive/OLD.md"]}
    assert planned["rules"]["logs"] == "5d" and planned["rules"]["failed"] == "keep"
    assert planned["logs"]["bytes"] == 2 * len("agent output\n" * 10)

    human = gc(tmp_path, "--dry-run")
    assert human.returncode == 0 and "dry run, nothing removed" in human.stdout
    assert ".orchestrator/logs/1-builder.log" in human.stdout and "memo/builder/archive/MID.md" in human.stdout

    done = gc(tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    removed = json.loads(done.stdout)
    assert removed["dry_run"] is False
    assert {k: removed[k] for k in ("logs", "transcripts", "runs", "memos")} == {
        k: planned[k] for k in ("logs", "transcripts", "runs", "memos")
    }, "the same list"
    assert sorted(p.name for p in logs.iterdir()) == ["3-builder.log", "4-builder.log"]
    assert not (tmp_path / "memo" / "builder" / "archive" / "MID.md").exists()
    assert (tmp_path / "memo" / "builder" / "archive" / "OLD.md").exists(), "the running memo replies to it"
    assert (tmp_path / "memo" / "builder" / "active" / "RUNNING.md").exists()
    again = json.loads(gc(tmp_path, "--json").stdout)
    assert (again["logs"]["count"], again["runs"]["count"], again["memos"]["count"]) == (0, 0, 0)


def test_retention_keys_are_checked_at_load(tmp_path: Path) -> None:
    config = tmp_path / "roles.yaml"
    config.write_text("roles: {builder: {}}\nretention: {logs: 60d, runs: 30d}\n", encoding="utf-8")
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "builder.md").write_text("x", encoding="utf-8")
    try:
        load_config(tmp_path)
    except ConfigError as exc:
        assert "retention.runs: shorter than logs (60d)" in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("a record shorter-lived than its log was accepted")
    # a record kept less than a day: a restart would forget the day's spend, and a daily budget let runs past it
    config.write_text("roles: {builder: {}}\nretention: {logs: 1s, transcripts: 1s, runs: 12h}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"retention.runs: shorter than a day \(12h\): a daily budget counts"):
        load_config(tmp_path)
    # logs kept for ever are never dated to be pruned: a record of a duration beside them is no leak
    config.write_text("roles: {builder: {}}\nretention: {logs: keep, runs: 100d}\n", encoding="utf-8")
    assert load_config(tmp_path).retention.runs == 100 * DAY
    config.write_text("roles: {builder: {}}\nretention: {archive: 30d, held: keep}\n", encoding="utf-8")
    rules = load_config(tmp_path).retention
    assert (rules.archive, rules.held, rules.logs, rules.runs) == (30 * DAY, None, 30 * DAY, 400 * DAY)
