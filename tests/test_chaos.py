"""Chaos: a flood of memos, the orchestrator SIGKILLed at random moments five times and started again.

What a crash of the orchestrator must cost: nothing. No memo lost, never two agents at
once for one memo, no memo completed twice (an agent that exited 0 is never run again),
and no agent killed by recovery (every agent that started also finished on its own).
"""

from __future__ import annotations

import json
import random
import signal
from collections import Counter, defaultdict
from pathlib import Path

from conftest import Project, wait_for

MEMOS = 240
SLOW = 30  # of which this many work 1-3 s
KILLS = 5


def ends_of(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_five_orchestrator_kills_cost_nothing(project: Project) -> None:
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
    wait_for(lambda: len(project.folder("builder", "archive")) == MEMOS, timeout=120, what="every memo archived")
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
