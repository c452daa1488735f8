"""The real Claude Code CLI (bundled with claude-agent-sdk) against the stand-in API: what the orchestrator gives
a Claude command role (its caps as the CLI's own arguments, background tasks turned off) and what it reads back.

A ``claude`` on PATH that records its argv and environment, then runs the bundled CLI, shows what reached it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_real_cli import (  # noqa: F401  (fixtures and the tier's mark)
    PRICE_IN,
    PRICE_OUT,
    api,
    cli,
    ended,
    env,
    history_row,
    pytestmark,
    recent,
)

from conftest import Project, wait_for
from messages_api import MessagesApi


def recording_claude(tmp_path: Path, cli: Path) -> Path:  # noqa: F811
    """``bin/claude`` as a script that appends its argv and the background-tasks variable to ``calls.txt``."""
    record = tmp_path / "calls.txt"
    script = tmp_path / "bin" / "claude"
    script.parent.mkdir(exist_ok=True)
    if script.is_symlink() or script.exists():
        script.unlink()
    script.write_text(
        "#!/bin/sh\n"
        f'printf "argv:%s bg:%s\\n" "$*" "${{CLAUDE_CODE_DISABLE_BACKGROUND_TASKS-unset}}" >> "{record}"\n'
        f'exec "{cli}" "$@"\n',
        encoding="utf-8",
    )
    os.chmod(script, 0o755)
    return record


def runs(record: Path) -> list[str]:
    return [line for line in record.read_text(encoding="utf-8").splitlines() if "--version" not in line]


def test_max_turns_and_the_per_run_budget_reach_the_clis_argv(
    project: Project,
    env: dict[str, str],  # noqa: F811
    cli: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    record = recording_claude(tmp_path, cli)
    project.configure({"builder": {"command": ["claude", "-p"], "max_turns": 3, "budget": {"per_run_usd": 0.5}}})
    project.up(**env)
    project.drop("builder", "B-caps.md", body="[answer] build it")
    ended(project, "builder", "archive", "B-caps.md")
    (line,) = runs(record)
    assert "argv:-p --max-turns 3 --max-budget-usd 0.5 " in line + " ", line


def test_claude_roles_run_without_background_tasks_unless_the_role_allows_them(
    project: Project,
    env: dict[str, str],  # noqa: F811
    cli: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    record = recording_claude(tmp_path, cli)
    project.configure(
        {
            "builder": {"command": ["claude", "-p"]},
            "helper": {"command": ["claude", "-p"], "background_tasks": True},
        }
    )
    project.up(**env)
    project.drop("builder", "B-bg.md", body="[answer] build it")
    ended(project, "builder", "archive", "B-bg.md")
    project.drop("helper", "H-bg.md", body="[answer] help")
    ended(project, "helper", "archive", "H-bg.md")
    builder, helper = runs(record)
    assert builder.endswith("bg:1") and helper.endswith("bg:unset"), (builder, helper)


def test_a_silent_claude_run_is_stopped_at_its_stall_timeout_and_retried(
    project: Project,
    env: dict[str, str],  # noqa: F811
) -> None:
    # stream-json without partial messages writes nothing while a model call streams: 30 s of silence
    command = ["claude", "-p", "--output-format", "stream-json", "--verbose"]
    project.configure(
        {
            "builder": {
                "command": command,
                "stall_timeout": "3s",
                "grace": "1s",
                "retry": {"max": 1, "backoff": ["0.1s"]},
            }
        }
    )
    orch = project.up(**env)
    project.drop("builder", "B-stall.md", body="[slow:30] take your time")
    ended(project, "builder", "failed", "B-stall.md")
    run = recent(project, "B-stall.md")
    assert run["reason"].startswith("stalled: no output for 3s (the CLI may be waiting"), run["reason"]
    assert run["attempt"] == 2
    assert orch.output.count("B-stall stalled: no output for 3s") == 2, orch.output


STREAM = ["claude", "-p", "--output-format", "stream-json", "--verbose"]


def test_a_refused_tool_call_fails_the_run_with_a_reason_naming_the_tool(
    project: Project,
    env: dict[str, str],  # noqa: F811
) -> None:
    # exit 0 and subtype success: the refusal is only in the result's permission_denials
    project.configure({"builder": {"command": STREAM, "retry": {"max": 2, "backoff": ["0.1s"]}}})
    project.up(**env)
    project.drop("builder", "B-deny.md", body="[bash:echo hi > made.txt] make it")
    ended(project, "builder", "failed", "B-deny.md")
    run = recent(project, "B-deny.md")
    assert "refused by the permissions: Bash: echo hi > made.txt" in run["reason"], run["reason"]
    assert run["attempt"] == 1  # permanent: a retry would be refused the same way
    row = history_row(project, "B-deny.md")
    assert row["input_tokens"] == 2000 and row["cost_usd"] > 0, row
    transcript = project.root / ".orchestrator" / "runs" / str(row["run_id"]) / "transcript.jsonl"
    kinds = [json.loads(line)["type"] for line in transcript.read_text(encoding="utf-8").splitlines()]
    assert kinds[0] == "system" and kinds[-1] == "result", kinds


def test_on_denied_warn_archives_the_run_with_a_warning_and_a_notice(
    project: Project,
    env: dict[str, str],  # noqa: F811
) -> None:
    project.configure(
        {"builder": {"command": STREAM, "on_denied": "warn"}, "lead": {"command": ["true"]}}, notify="lead"
    )
    orch = project.up(**env)
    project.drop("builder", "B-warn.md", body="[bash:echo hi > made.txt] make it")
    ended(project, "builder", "archive", "B-warn.md")
    orch.wait_output("warning: B-warn: 1 tool call refused by the permissions: Bash: echo hi > made.txt")
    wait_for(lambda: [n for n in project.folder("lead", "archive") if "-warning-" in n], what="the warning notice")


def test_the_init_team_on_the_bundled_cli_records_cost_and_tokens(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
    api: MessagesApi,  # noqa: F811
) -> None:
    team = tmp_path / "team"
    result = Project(tmp_path).cli("init", str(team))
    assert result.returncode == 0, result.stderr
    api.server.cwd = team
    project = Project(team)
    try:
        project.up(**env)
        project.drop("builder", "B-init.md", body="[answer] build it")
        ended(project, "builder", "archive", "B-init.md")
        row = history_row(project, "B-init.md")
        assert row["input_tokens"] == 1000 and row["output_tokens"] == 20, row
        assert row["cost_usd"] == pytest.approx((1000 * PRICE_IN + 20 * PRICE_OUT) / 1e6)
    finally:
        project.cleanup()


def test_logs_renders_a_stream_json_run_for_a_person(
    project: Project,
    env: dict[str, str],  # noqa: F811
) -> None:
    project.configure({"builder": {"command": STREAM, "on_denied": "warn"}})
    project.up(**env)
    project.drop("builder", "B-logs.md", body="[bash:echo hi > made.txt] make it")
    ended(project, "builder", "archive", "B-logs.md")
    shown = project.cli("logs", "B-logs")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.startswith("session ") for line in lines), shown.stdout
    assert "→ Bash: echo hi > made.txt" in lines and "assistant: done" in lines, shown.stdout
    assert any(line.startswith("refused Bash: ") for line in lines), shown.stdout
    assert any(line.startswith("result: success, 2 turn(s), $0.") for line in lines), shown.stdout
    assert not any(line.startswith("{") for line in lines), shown.stdout
    raw = project.cli("logs", "B-logs.md", "--raw")
    assert raw.returncode == 0 and '"type":"result"' in raw.stdout.replace(" ", "")
    missing = project.cli("logs", "nothing-such")
    assert missing.returncode == 6 and "no run has held a memo 'nothing-such'" in missing.stderr, missing.stderr


def test_a_refused_tool_call_fails_an_sdk_run_too(
    project: Project,
    env: dict[str, str],  # noqa: F811
) -> None:
    role = {"backend": "sdk", "permission_mode": "default", "retry": {"max": 2, "backoff": ["0.1s"]}}
    project.configure({"writer": role})
    project.up(**env)
    project.drop("writer", "W-deny.md", body="[bash:echo hi > made.txt] make it")
    ended(project, "writer", "failed", "W-deny.md")
    run = recent(project, "W-deny.md")
    assert "refused by the permissions: Bash: echo hi > made.txt" in run["reason"], run["reason"]
    assert run["attempt"] == 1


def test_on_denied_warn_archives_an_sdk_run_with_a_warning_and_a_notice(
    project: Project,
    env: dict[str, str],  # noqa: F811
) -> None:
    role = {"backend": "sdk", "permission_mode": "default", "on_denied": "warn"}
    project.configure({"writer": role, "lead": {"command": ["true"]}}, notify="lead")
    orch = project.up(**env)
    project.drop("writer", "W-warn.md", body="[bash:echo hi > made.txt] make it")
    ended(project, "writer", "archive", "W-warn.md")
    orch.wait_output("warning: W-warn: 1 tool call refused by the permissions: Bash: echo hi > made.txt")
    wait_for(lambda: [n for n in project.folder("lead", "archive") if "-warning-" in n], what="the warning notice")


def test_the_clis_budget_counts_only_what_its_own_process_spends_in_a_resumed_session(
    env: dict[str, str],  # noqa: F811
    cli: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """What the orchestrator relies on when an answered run resumes the asking session: the session's result reports
    a running total from its start, but ``--max-budget-usd`` counts only the spend since this process started, so
    the cap given to the answered run is its per-run budget as it is (the runner's own check adds the carried part)."""
    import subprocess

    def turn(*args: str) -> dict[str, object]:
        done = subprocess.run(
            [str(cli), "-p", "--output-format", "stream-json", "--verbose", *args],
            cwd=tmp_path,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        return next(line for line in reversed(lines) if line.get("type") == "result")

    first = turn("[answer] hello")
    spent, session = float(first["total_cost_usd"]), str(first["session_id"])  # type: ignore[arg-type]
    assert spent > 0
    wide = turn("--resume", session, "--max-budget-usd", f"{spent * 1.5:.6f}", "[answer] again")
    assert (wide["subtype"], wide["session_id"]) == ("success", session), wide
    assert float(wide["total_cost_usd"]) == pytest.approx(2 * spent), "a running total"  # type: ignore[arg-type]
    tight = turn("--resume", session, "--max-budget-usd", f"{spent * 0.5:.6f}", "[answer] once more")
    assert tight["subtype"] == "error_max_budget_usd", tight
