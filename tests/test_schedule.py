"""Wakes end to end: a real ``orchestrator up`` with a stand-in agent and a 1 s heartbeat, the CLI commands
``schedule``, ``wake`` and ``task``, and the start-up errors of the schedule's keys."""

from __future__ import annotations

import json
import os
import sqlite3
import stat

import pytest

from conftest import Project, wait_for


def done_rows(project: Project) -> dict[str, tuple[str | None, int | None]]:
    db = sqlite3.connect(project.root / ".orchestrator" / "state.db")
    try:
        return {r[0]: (r[1], r[2]) for r in db.execute("SELECT task, done_at, seq FROM task_done WHERE role = 'rin'")}
    finally:
        db.close()


def test_a_one_second_heartbeat_wakes_the_role_and_marks_its_task_done(project: Project) -> None:
    signal = project.root / "bin" / "news"
    signal.parent.mkdir()
    signal.write_text("#!/bin/sh\necho 'one new mail'\n")
    signal.chmod(signal.stat().st_mode | stat.S_IXUSR)
    project.configure(
        {
            "rin": {
                "wake": {"every": "1s"},
                "tasks": {"post": {"every": "1h", "text": "Post something."}},
                "signals": {"mail": {"command": ["./bin/news"], "timeout": "5s"}},
                "preflight": [["true"]],
            }
        },
        prompt="wake $seq at $time\n$tasks\n$signals\n",
        timezone="UTC",
    )
    orch = project.up()
    wait_for(lambda: len(project.folder("rin", "archive")) >= 2, what="two wakes archived")
    first = (project.root / "memo" / "rin" / "archive" / project.folder("rin", "archive")[0]).read_text()
    assert "tasks: [post]" in first and "## Signals" in first and "one new mail" in first
    prompts = [r.get("prompt", "") for r in project.records()]
    assert any("**post**: Post something." in p and "one new mail" in p for p in prompts), prompts
    wait_for(lambda: done_rows(project).get("post", (None, None))[0], what="post marked done")
    assert done_rows(project)["post"][1] == 1, "done by run 1"
    later = [r for r in project.records()[1:]]
    assert later and all("**post**" not in r.get("prompt", "") for r in later), "done: not picked again this hour"
    report = json.loads(project.cli("schedule", "--json").stdout)
    rin = report["roles"]["rin"]
    assert rin["tasks"][0]["name"] == "post" and rin["tasks"][0]["last_seq"] == 1
    status = project.status()
    assert "rin" in status["wakes"]
    assert orch.stop() == 0


def test_an_idle_heartbeat_starts_no_agent_and_a_failing_preflight_holds(project: Project) -> None:
    project.configure(
        {"rin": {"wake": {"every": "1s"}, "preflight": [["false"]], "tasks": {"post": {"every": "1h", "text": "p"}}}}
    )
    orch = project.up()
    wait_for(lambda: "rin" in project.status().get("holds", {}), what="the role held")
    assert "preflight false" in project.status()["holds"]["rin"]["wake"]
    wait_for(lambda: project.status()["wakes"]["rin"]["skips"].get("held", 0) >= 2, what="held skips counted")
    assert project.records() == [] and project.folder("rin", "inbox") == []
    assert orch.stop() == 0


def test_task_ledger_and_wake_command(project: Project) -> None:
    project.configure({"rin": {"tasks": {"diary": {"daily": "21:00", "text": "d"}}}}, prompt="$tasks\n")
    bad = project.cli("task", "add", "rin", "call mom", "--due", "tomorrowish")
    assert bad.returncode == 2 and "--due" in bad.stderr and len(bad.stderr.splitlines()) == 1
    assert json.loads(project.cli("task", "list", "--json").stdout)["tasks"] == []
    later = json.loads(project.cli("task", "add", "rin", "later", "--due", "+2h", "--json").stdout)
    dropped = project.cli("task", "drop", later["id"])
    assert dropped.returncode == 0
    assert project.cli("task", "drop", later["id"]).returncode == 2
    assert project.cli("wake", "rin").returncode == 4, "wake needs a running orchestrator"
    orch = project.up()
    added = json.loads(project.cli("task", "add", "rin", "Call the bank.", "--json").stdout)
    wait_for(lambda: project.folder("rin", "archive"), what="the ledger task's wake")
    wait_for(
        lambda: json.loads(project.cli("task", "list", "--json").stdout)["tasks"][0]["done_at"], what="ledger done"
    )
    assert any(f"**{added['id']}**: Call the bank." in r.get("prompt", "") for r in project.records())
    forced = project.cli("wake", "rin", "--task", "diary", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["tasks"] == ["diary"]
    wait_for(lambda: done_rows(project).get("diary", (None, None))[0], what="diary done")
    assert orch.stop() == 0


@pytest.mark.parametrize(
    ("settings", "top", "expected"),
    [
        ({"tasks": {"x": {"daily": "25:00", "text": "t"}}}, {}, "roles.rin.tasks.x"),
        ({"tasks": {"x": {"weekly": "sunday-ish 10:00", "text": "t"}}}, {}, "unknown weekday"),
        ({"wake": {"every": 0}}, {}, "roles.rin.wake.every"),
        ({"wake": {"quiet_hours": "02:00-02:00"}}, {}, "empty"),
        ({"wake": {"quiet_hours": ["01:00-03:00", "02:00-04:00"]}}, {}, "overlap"),
        ({"tasks": {"x": {"once": "not a time", "text": "t"}}}, {}, "ISO 8601"),
        ({"signals": {"m": {"command": ["./nope"]}}}, {}, "roles.rin.signals.m.command"),
        ({}, {"timezone": "Mars/Olympus"}, "timezone"),
    ],
)
def test_bad_schedule_keys_stop_the_start(project: Project, settings: dict, top: dict, expected: str) -> None:
    project.configure({"rin": settings}, **top)
    result = project.cli("up", "--plain")
    assert result.returncode == 2 and expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_task_name_used_twice_is_an_error(project: Project) -> None:
    project.configure({"rin": {}})
    text = (project.root / "roles.yaml").read_text()
    text = text.replace(
        "  rin:\n", "  rin:\n    tasks:\n      a: {every: 1h, text: x}\n      a: {every: 2h, text: y}\n"
    )
    (project.root / "roles.yaml").write_text(text)
    result = project.cli("schedule")
    assert result.returncode == 2 and "roles.rin.tasks.a" in result.stderr, result.stderr
    assert os.path.exists(project.root / "roles.yaml")


def test_skip_reasons_show_in_plain_status_and_schedule(project: Project) -> None:
    project.configure({"rin": {"wake": {"every": "1s"}, "tasks": {"diary": {"daily": "21:00", "text": "d"}}}})
    orch = project.up()
    wait_for(lambda: project.status()["wakes"]["rin"]["skips"].get("idle", 0) >= 2, what="idle skips counted")
    status = project.cli("status")
    assert status.returncode == 0, status.stderr
    line = next(x for x in status.stdout.splitlines() if x.startswith("wakes: rin:"))
    assert "last: skip idle: no task due" in line and "skips: idle " in line, line
    schedule = project.cli("schedule")
    assert schedule.returncode == 0, schedule.stderr
    assert "last: skip idle: no task due" in schedule.stdout and "skips: idle " in schedule.stdout
    assert orch.stop() == 0
