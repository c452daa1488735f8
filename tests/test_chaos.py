"""Chaos: a flood of memos, the orchestrator SIGKILLed at random moments five times and started again.

What a crash of the orchestrator must cost: nothing. No memo lost, never two agents at
once for one memo, no memo completed twice (an agent that exited 0 is never run again),
and no agent killed by recovery (every agent that started also finished on its own).
The flood runs against the orchestrator as users install it (the wheel in a fresh
venv, ``installed`` in conftest), not against this checkout.
"""

from __future__ import annotations

import json
import random
import signal
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from conftest import Project, wait_for

MEMOS = 600
SLOW = 30  # of which this many work 1-3 s
KILLS = 5


def ends_of(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_five_orchestrator_kills_cost_nothing(installed_project: Project) -> None:
    project = installed_project
    chance = random.Random(15)
    project.configure({"builder": {"max_concurrent": 10}}, max_concurrent=10)
    ends = project.root / "ends.jsonl"
    names = [f"M-{i:03d}.md" for i in range(MEMOS)]
    slow = set(chance.sample(names, SLOW))
    orch = project.up(STANDIN_ENDS=str(ends))
    for name in names:
        sleep = round(chance.uniform(1, 3), 2) if name in slow else 0
        project.drop("builder", name, {"id": name[:-3], "agent": {"sleep": sleep}})
    for _kill in range(KILLS):
        done_before = len(project.folder("builder", "archive"))
        # a random moment: once some more work has finished, plus a random pause
        wait_for(
            lambda before=done_before: len(project.folder("builder", "archive")) >= min(MEMOS, before + 5),
            timeout=60,
            what="more work done",
        )
        pause = chance.uniform(0.0, 0.8)
        try:
            wait_for(lambda: False, timeout=pause, what="a random pause")
        except AssertionError:
            pass
        orch.signal(signal.SIGKILL)
        orch.wait()
        orch = project.up(STANDIN_ENDS=str(ends))
        orch.wait_output("orchestrator up:")
    wait_for(lambda: len(project.folder("builder", "archive")) == MEMOS, timeout=300, what="every memo archived")
    assert orch.stop() == 0

    assert project.folder("builder", "archive") == names, "nothing lost, nothing renamed"
    for folder in ("inbox", "active", "failed", "cancelled"):
        assert project.folder("builder", folder) == []
    starts = project.records()
    finished = ends_of(ends)
    by_memo = Counter(Path(r["memo"]).name for r in starts)
    twice = sorted(name for name, count in by_memo.items() if count > 1)
    assert twice == [], f"memos whose agent ran twice: {twice}"
    completed = Counter(Path(next(s["memo"] for s in starts if s["pid"] == e["pid"])).name for e in finished)
    assert all(count == 1 for count in completed.values()), "no memo completed twice"
    killed = {r["pid"] for r in starts} - {e["pid"] for e in finished}
    assert killed == set(), f"agents that did not finish on their own (killed): {sorted(killed)}"
    spans = defaultdict(list)
    for end in finished:
        memo = next(Path(s["memo"]).name for s in starts if s["pid"] == end["pid"])
        spans[memo].append((end["start"], end["end"]))
    for memo, times in spans.items():
        times.sort()
        assert all(a[1] <= b[0] for a, b in zip(times, times[1:], strict=False)), f"{memo} had two agents at once"
    outputs = "\n".join(o.output for o in project.procs)
    assert outputs.count("orchestrator up:") == KILLS + 1
    assert project.installed is not None
    assert outputs.count(f"recovery: adopt (keeper {project.installed.venv}/") == KILLS + 1, "the installed keeper"


SDK_MEMOS = 8
SDK_KILLS = 3


def test_orchestrator_kills_cost_sdk_runs_nothing(project: Project, tmp_path: Path) -> None:
    """The same for SDK runs on the fake CLI: each memo's session starts once, succeeds once, and counts its cost."""
    from test_sdk import claude_records, db_rows, sdk_role

    cli = tmp_path / "bin" / "fake-claude"
    cli.parent.mkdir()
    cli.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).with_name("fake_claude.py")}" "$@"\n')
    cli.chmod(0o755)
    chance = random.Random(16)
    role = sdk_role(project, cli, max_concurrent=4, fake={"cost": "0.25", "turn_seconds": "1.5"})
    project.configure({"writer": role}, max_concurrent=4)
    names = [f"S-{i}.md" for i in range(SDK_MEMOS)]
    orch = project.up()
    for name in names:
        project.drop("writer", name, {"id": name[:-3]}, body=f"work on {name}")
    for _kill in range(SDK_KILLS):
        started = len([e for e in claude_records(project) if "argv" in e])
        wait_for(
            lambda before=started: (
                len([e for e in claude_records(project) if "argv" in e]) >= min(SDK_MEMOS, before + 2)
            ),
            timeout=60,
            what="more sessions started",
        )
        try:
            wait_for(lambda: False, timeout=chance.uniform(0.0, 1.0), what="a random pause")
        except AssertionError:
            pass
        orch.signal(signal.SIGKILL)
        orch.wait()
        orch = project.up()
    wait_for(lambda: project.folder("writer", "archive") == names, timeout=120, what="every SDK memo archived")
    assert orch.stop() == 0, orch.output

    for folder in ("inbox", "active", "failed", "cancelled"):
        assert project.folder("writer", folder) == []
    assert len([e for e in claude_records(project) if "argv" in e]) == SDK_MEMOS, "a session was started twice"
    runs = db_rows(project, "SELECT memos, state, cost_usd, num_turns FROM runs ORDER BY run_id")
    assert [r["state"] for r in runs] == ["succeeded"] * SDK_MEMOS, "a run was returned or failed: killed or rerun"
    assert all(r["cost_usd"] == 0.25 and r["num_turns"] == 1 for r in runs), runs
    outputs = "\n".join(o.output for o in project.procs)
    assert "stopped its agent" not in outputs
    assert "adopted its live agent" in outputs  # a kill came mid-session: the runner was taken back, not rerun
