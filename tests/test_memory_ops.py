"""Memory in operation, as real processes: a locked database, the supervisor's word on another role, status."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import Project, wait_for
from orchestrator.memory import rules
from orchestrator.memory.db.schema import db_path

LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA locking_mode=EXCLUSIVE")
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Another process holds the memory database exclusively (readers are shut out too) until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.communicate(timeout=30)  # closes its stdin: it lets go and ends


def mem(project: Project, *args: str, input: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return project.cli("memory", *args, input=input, **env)


@pytest.fixture
def team(project: Project) -> Project:
    project.configure({"builder": {}, "planner": {}}, prompt="BEGIN\n$memory\nEND\n", memory={"curator": "planner"})
    return project


def test_a_locked_database_is_one_line_and_a_non_zero_exit_and_nothing_is_half_done(team: Project) -> None:
    assert mem(team, "add", "before the lock", "--role", "builder").returncode == 0
    with locked(db_path(team.root / ".orchestrator")):
        for args in (["add", "during the lock", "--role", "builder"], ["search", "lock"], ["list"], ["stats"]):
            result = mem(team, *args, ORCHESTRATOR_MEMORY_WAIT="0.2")
            assert result.returncode == 22, (args, result.stdout, result.stderr)
            assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
            assert "locked" in result.stderr and "try again" in result.stderr
    texts = [e["text"] for e in json.loads(mem(team, "list", "--json").stdout)]
    assert texts == ["before the lock"]


def test_the_orchestrator_runs_its_agents_with_memory_empty_and_a_note_while_the_database_is_locked(
    team: Project,
) -> None:
    assert mem(team, "add", "never force-push main", "--role", "builder", "--remember").returncode == 0
    path = db_path(team.root / ".orchestrator")
    with locked(path):
        orch = team.up()
        team.drop("builder", "a.md", {"id": "a"})
        first = wait_for(lambda: team.records(), what="the first run's record")[0]
        assert "(memory unavailable:" in first["prompt"] and "locked" in first["prompt"]
        assert "never force-push main" not in first["prompt"]
        wait_for(lambda: team.folder("builder", "archive") == ["a.md"], what="the run to succeed")
        snap = team.status()
        assert "locked" in snap["memory"]["unavailable"]
        assert "memory: unavailable" in team.cli("status").stdout
    team.drop("builder", "b.md", {"id": "b"})
    records = wait_for(lambda: team.records() if len(team.records()) == 2 else None, what="the second run")
    assert "never force-push main" in records[1]["prompt"], "memory is back once the lock is gone"
    assert orch.stop() == 0
    output = orch.output
    assert "Traceback" not in output and "internal error" not in output
    assert "starts with $memory empty" in output, "the log says so too"


def test_a_role_given_memory_forgets_and_replaces_another_roles_memory_through_the_cli(team: Project) -> None:
    """The builder's agent may not touch the planner's memory, whatever its environment claims; the supervisor's
    (``may: [memory]``) may, and the records name its run, as the kernel traced it."""
    team.configure(
        {"builder": {}, "planner": {}, "supervisor": {"may": ["memory"]}},
        prompt="BEGIN\n$memory\nEND\n",
        memory={"curator": "planner"},
    )
    one = int(mem(team, "add", "the plan is due friday", "--role", "planner").stdout)
    two = int(mem(team, "add", "the plan has three steps", "--role", "planner").stdout)
    orch = team.up()

    def agent(role: str, name: str, *commands: list[str], **env: str | None) -> list[dict[str, Any]]:
        results = team.root / f"{name}.results"
        spec = {"commands": list(commands), "results": str(results), "command_env": env}
        team.drop(role, name, {"id": name, "agent": spec})
        wait_for(lambda: Path(f"{results}.done").exists(), 60, f"{name}'s commands")
        return [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]

    forged = {"ORCHESTRATOR_ROLE": "supervisor", "ORCHESTRATOR_RUN_ID": None}
    refused = agent(
        "builder",
        "b.md",
        ["memory", "forget", str(one), "--why", "builder thinks so"],
        ["memory", "replace", str(two), "two steps", "--why", "builder thinks so", "--source", "supervisor"],
        **forged,
    )
    for result in refused:
        assert result["code"] == 13 and "of another role's memory is for people" in result["stderr"], result
    done = agent(
        "supervisor",
        "s.md",
        ["memory", "forget", str(one), "--why", "moved to monday", "--json"],
        ["memory", "replace", str(two), "the plan has two steps", "--why", "step 3 dropped"],
    )
    assert [r["code"] for r in done] == [0, 0], done
    assert json.loads(done[0]["stdout"])["forgotten_why"] == "moved to monday"
    run_id = next(r["run_id"] for r in team.records() if r["role"] == "supervisor")

    shown = json.loads(mem(team, "show", str(two), "--json").stdout)
    assert shown["text"] == "the plan has two steps"
    assert shown["growth"][0]["before"] == "the plan has three steps"
    assert shown["growth"][0]["by"] == f"supervisor (run {run_id})"
    assert json.loads(mem(team, "show", str(one), "--json").stdout)["forgotten_by"] == f"supervisor (run {run_id})"
    assert [e["id"] for e in json.loads(mem(team, "search", "plan", "--role", "planner", "--json").stdout)] == [two]
    assert orch.stop() == 0


def test_status_says_how_many_entries_wait_for_which_summary(team: Project) -> None:
    old = date.today() - timedelta(days=45)
    week = rules.week_of(old)
    for n in range(3):
        added = mem(team, "add", f"old day {n}", "--role", "builder", "--layer", "daily", "--period", old.isoformat())
        assert added.returncode == 0, added.stderr
    assert mem(team, "add", "today", "--role", "builder", "--layer", "daily").returncode == 0
    line = f"memory: 3 daily entries past retention wait for a weekly summary of {week}"

    offline = team.status()
    assert offline["running"] is False and offline["memory"]["waiting_for_summary"] == {f"daily {week}": 3}
    assert line in team.cli("status").stdout

    orch = team.up()
    live = team.status()
    assert live["running"] is True and live["memory"] == {"waiting_for_summary": {f"daily {week}": 3}, "waiting": 3}
    assert line in team.cli("status").stdout
    assert orch.stop() == 0
