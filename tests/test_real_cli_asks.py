"""Asking a person with the real Claude Code CLI (the bundled one) against the stand-in Messages API: the
orchestrator's ``PreToolUse`` hook defers ``orchestrator ask`` and a call an ``approve:`` rule names, the run ends
waiting with no slot held, and ``orchestrator answer`` resumes the same session, whose model reads the answer as its
command's output (or whose approved command runs).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import test_real_cli as real

from conftest import Project, wait_for
from messages_api import MessagesApi

pytestmark = pytest.mark.real_cli
cli, api, env = real.cli, real.api, real.env  # the real CLI's fixtures: its isolation from Anthropic included
SLOW, ended, messages = real.SLOW, real.ended, real.messages
CLAUDE = ["claude", "-p", "--output-format", "stream-json", "--verbose"]


def tool_results(api: MessagesApi, marker: str) -> list[str]:
    return [t for r in messages(api, marker) for t in r.get("tool_result_texts") or []]


def sessions(project: Project, memo: str) -> list[Any]:
    rows = json.loads(project.cli("history", "--json").stdout)["runs"]
    return [r["session_id"] for r in rows if r["memo"] == memo]


def history_runs(project: Project) -> list[dict[str, Any]]:
    return json.loads(project.cli("history", "--json").stdout)["runs"]  # type: ignore[no-any-return]


def last_result(log: Path) -> dict[str, Any]:
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.startswith("{")]
    return next(line for line in reversed(lines) if line.get("type") == "result")


def test_a_claude_run_asks_and_waits_for_an_approval_and_the_same_session_goes_on(
    project: Project, env: dict[str, str], api: MessagesApi
) -> None:
    orchestrator_shim(env)
    project.configure({"builder": {"command": CLAUDE, "max_concurrent": 1, "approve": ["Bash(touch:*)"]}})
    project.up(**env)
    question = project.root / "memo/builder/waiting/B-ask.question"
    project.drop("builder", "B-ask.md", body='[bash:orchestrator ask "Which design, A or B?"] decide')
    wait_for(question.exists, SLOW, "B-ask.md waiting with its question")
    project.drop("builder", "B-meanwhile.md", body="[answer] meanwhile")
    ended(project, "builder", "archive", "B-meanwhile.md")  # the waiting run holds no slot of the role's one
    project.drop("builder", "B-deploy.md", body="[bash:touch deployed.txt] deploy")
    wait_for((project.root / "memo/builder/waiting/B-deploy.question").exists, SLOW, "B-deploy.md waiting")
    assert not (project.root / "deployed.txt").exists(), "an approval's call does not run before the answer"
    needs = {n["memo"]: n for n in project.status()["needs_input"]}
    assert needs["B-ask.md"]["kind"] == "question" and needs["B-ask.md"]["question"] == "Which design, A or B?"
    assert needs["B-deploy.md"]["kind"] == "approval" and needs["B-deploy.md"]["question"] == "Bash: touch deployed.txt"
    assert tool_results(api, "[bash:orchestrator ask") == [], "the deferred call did not run"

    assert project.cli("answer", "B-ask.md", "B, the smaller one").returncode == 0
    ended(project, "builder", "archive", "B-ask.md")
    assert tool_results(api, "[bash:orchestrator ask") == ["B, the smaller one"], "the answer is the command's output"
    first, second = sessions(project, "B-ask.md")
    assert first and first == second, "the same session goes on"
    # the resumed session reports its running total: the answered run keeps only what it added
    runs = sorted((r for r in history_runs(project) if r["memo"] == "B-ask.md"), key=lambda r: r["run_id"])
    total = last_result(project.root / ".orchestrator" / "logs" / f"{runs[1]['run_id']}-builder.log")["total_cost_usd"]
    assert runs[0]["cost_usd"] > 0 and runs[1]["cost_usd"] > 0, runs
    assert runs[0]["cost_usd"] + runs[1]["cost_usd"] == pytest.approx(total), (runs, total)

    assert project.cli("answer", "B-deploy.md", "--allow").returncode == 0
    ended(project, "builder", "archive", "B-deploy.md")
    assert (project.root / "deployed.txt").exists(), "the approved command ran"
    assert project.status()["needs_input"] == []


def orchestrator_shim(env: dict[str, str]) -> None:
    """An ``orchestrator`` the agent's Bash can run."""
    shim = Path(env["PATH"].split(os.pathsep)[0]) / "orchestrator"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m orchestrator "$@"\n', encoding="utf-8")
    shim.chmod(0o755)


def test_an_sdk_run_that_asks_goes_on_in_its_session_with_the_answer(
    project: Project, env: dict[str, str], api: MessagesApi
) -> None:
    orchestrator_shim(env)
    project.configure({"writer": real.sdk_role()})
    project.up(**env)
    question = project.root / "memo/writer/waiting/W-ask.question"
    project.drop("writer", "W-ask.md", body='[bash:orchestrator ask "Which title?"] write')
    wait_for(question.exists, SLOW, "W-ask.md waiting")
    said = tool_results(api, "[bash:orchestrator ask")
    assert len(said) == 1 and "Your question is recorded. End your run now" in said[0], said
    assert project.cli("answer", "W-ask", "Call it Dawn").returncode == 0
    wait_for(
        lambda: any("Call it Dawn" in t for r in messages(api, "[bash:orchestrator ask") for t in r["user_texts"]),
        SLOW,
        "the answer given to the same session",
    )
    wait_for(lambda: len(sessions(project, "W-ask.md")) == 2 and all(sessions(project, "W-ask.md")), SLOW, "2 runs")
    first, second = sessions(project, "W-ask.md")
    assert first == second, "the sdk session goes on"
    last = messages(api, "[bash:orchestrator ask")[-1]
    assert any("Which title?" in t for t in last["user_texts"]), "the whole conversation, the first prompt included"


def test_an_answered_sdk_runs_per_run_budget_is_on_top_of_what_the_asking_run_spent(
    project: Project, env: dict[str, str], api: MessagesApi
) -> None:
    """On the stand-in the asking run spends about $0.0088 and the answered run $0.0044 more; the resumed session
    reports $0.0132 in all. With a per-run budget of $0.011 each run is within it, and the answered run ends well
    (it was failed for its budget when the session's whole total was counted)."""
    orchestrator_shim(env)
    project.configure({"writer": real.sdk_role(budget={"per_run_usd": 0.011})})
    project.up(**env)
    project.drop("writer", "W-ask.md", body='[bash:orchestrator ask "Which title?"] write')
    wait_for((project.root / "memo/writer/waiting/W-ask.question").exists, SLOW, "W-ask.md waiting")
    assert project.cli("answer", "W-ask", "Call it Dawn").returncode == 0
    ended(project, "writer", "archive", "W-ask.md")
    asking, answered = sorted((r for r in history_runs(project) if r["memo"] == "W-ask.md"), key=lambda r: r["run_id"])
    assert asking["session_id"] == answered["session_id"], "the session goes on"
    assert answered["state"] == "succeeded", answered
    assert asking["cost_usd"] < 0.011 < asking["cost_usd"] + answered["cost_usd"], (asking, answered)
