"""The real Claude Code CLI (bundled with claude-agent-sdk) against the stand-in API: what the orchestrator gives
a Claude command role (its caps as the CLI's own arguments, background tasks turned off) and what it reads back.

A ``claude`` on PATH that records its argv and environment, then runs the bundled CLI, shows what reached it.
"""

from __future__ import annotations

import os
from pathlib import Path

from test_real_cli import api, cli, ended, env, pytestmark, recent  # noqa: F401  (fixtures and the tier's mark)

from conftest import Project


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
