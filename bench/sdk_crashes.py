"""The ``sdk-keeper`` scenario: SDK sessions run twice under repeated SIGKILLs of the orchestrator.

``backend: sdk`` runs with the real runner and claude-agent-sdk on the fake Claude
Code CLI of the tests (``tests/fake_claude.py``; nothing reaches Anthropic), each
session one turn of a few seconds that costs $0.25, so kills land mid-session.
The figure is how many sessions were started beyond one per memo (each a turn paid
again); the details also count the memos that ran more than once.
The orchestrator is SIGKILLed at random moments and started again, with adoption
(the default: the runner is reconnected or finished from its files) beside
``recovery: restart`` (the runner is stopped and its memo run again). A memo counts
when its session was started more than once (a prompt about it reached a CLI twice);
the paid figure is what the fake CLIs charged in all, against what one session per
memo costs.
"""

from __future__ import annotations

import json
import random
import re
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import Outcome, Row
from bench.harness import Orchestrator, count_memos, wait_for

HERE = Path(__file__).resolve().parent
TURN_SECONDS = 2.0
COST = 0.25
MEMO_NAME = re.compile(r"S-\d{3}\.md")


def sdk_keeper(ctx: Any) -> Any:
    """The ``sdk-keeper`` scenario (see the module docstring)."""

    out = Outcome("sdk-keeper")
    try:
        import claude_agent_sdk  # noqa: F401 - only whether it is there
    except ImportError:
        out.notes.append("skipped: claude-agent-sdk is not installed")
        return out
    s = ctx.sizes
    memos, kills = s.sdk_crash_memos, s.sdk_crash_kills
    adopt = _crashes(ctx, "adopt", memos, kills, out)
    restart = _crashes(ctx, "restart", memos, kills, out)
    out.rows.append(
        Row(
            "sdk-keeper",
            f"SDK sessions run again under {kills} orchestrator kills ({memos} memos)",
            adopt["starts"] - memos,
            "sessions",
            restart["starts"] - memos,
            "recovery: restart",
            "0",
            adopt["starts"] == memos and adopt["twice"] == 0 and adopt["done"],
            0,
        )
    )
    for name, got in (("adopt", adopt), ("recovery: restart", restart)):
        out.details.append(
            f"{name}: {got['twice']} memo(s) run more than once, {got['starts']} sessions started for {memos} memos, "
            f"${got['paid']:.2f} charged by the CLIs for ${memos * COST:.2f} of work, "
            f"{got['adopted']} adoption(s) and {got['finished']} run(s) finished from their files at the restarts"
            f"{'' if got['done'] else ', NOT every memo archived'}"
        )
    out.details.append(
        f"{memos} memos already in the inbox, each one SDK session of one {TURN_SECONDS:g} s turn on the fake CLI, "
        f"max_concurrent {s.sdk_crash_concurrency}; the orchestrator SIGKILLed {kills} times at random moments "
        "(each once a random number more sessions have started) and started again."
    )
    return out


def _crashes(ctx: Any, recovery: str, memos: int, kills: int, out: Any) -> dict[str, Any]:
    chance = random.Random(16)
    project = ctx.project(f"sdk-keeper-{recovery}")
    cli = project.root / "bin" / "fake-claude"
    cli.parent.mkdir(parents=True, exist_ok=True)
    fake = HERE.parent / "tests" / "fake_claude.py"
    cli.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{fake}" "$@"\n', encoding="utf-8")
    cli.chmod(0o755)
    record = project.root / "claude.jsonl"
    role = {
        "backend": "sdk",
        "cli_path": str(cli),
        "grace": "5s",
        "env": {
            "FAKE_CLAUDE_RECORD": str(record),
            "FAKE_CLAUDE_TURN_SECONDS": f"{TURN_SECONDS:g}",
            "FAKE_CLAUDE_COST": f"{COST:g}",
        },
    }
    project.configure({"writer": role}, max_concurrent=ctx.sizes.sdk_crash_concurrency, recovery=recovery)
    inbox = project.folder("writer", "inbox")
    names = [f"S-{i:03d}.md" for i in range(memos)]
    for name in names:
        (inbox / name).write_text(f"work on {name}\n", encoding="utf-8")
    ctx.say(f"sdk-keeper: {memos} SDK memos, {kills} kills of the orchestrator, recovery: {recovery}")
    orch = Orchestrator(project).start()
    step = max(1, memos // (kills + 1))
    for kill in range(kills):
        goal = min(memos, (kill + 1) * step + chance.randrange(step))
        wait_for(lambda goal=goal: len(_entries(record, "argv")) >= goal, 120, f"{goal} sessions started")
        assert orch.proc is not None
        orch.proc.send_signal(signal.SIGKILL)
        orch.proc.wait(30)
        orch = Orchestrator(project).start()
        ups = kill + 2
        wait_for(
            lambda ups=ups, orch=orch: orch.output().count("orchestrator up:") >= ups, 60, "the orchestrator up again"
        )
    archive = project.folder("writer", "archive")
    try:
        wait_for(lambda: count_memos(archive) == memos, 120 + memos * TURN_SECONDS, "every memo archived")
        done = True
    except Exception:  # noqa: BLE001 - a figure to report, not a crash of the benchmark
        done = False
        out.notes.append(f"recovery {recovery}: {count_memos(archive)} of {memos} memos archived")
    outputs = orch.output()
    orch.stop()
    prompts = Counter(_memo_of(str(p)) for p in _entries(record, "prompt"))
    return {
        "twice": sum(1 for count in prompts.values() if count > 1),
        "starts": len(_entries(record, "argv")),
        "paid": COST * len(_entries(record, "prompt")),
        "adopted": outputs.count("adopted its live agent"),
        "finished": outputs.count("ended while the orchestrator was down"),
        "done": done,
    }


def _memo_of(prompt: str) -> str:
    """The memo a session's prompt is about (a rerun's prompt may carry notes ahead of it)."""
    found = MEMO_NAME.search(prompt)
    return found.group(0) if found else prompt


def _entries(record: Path, key: str) -> list[Any]:
    try:
        lines = record.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line the fake is writing
        if key in entry:
            found.append(entry[key])
    return found
