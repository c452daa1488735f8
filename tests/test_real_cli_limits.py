"""A usage limit met by the real Claude Code CLI (the bundled one, sdk backend) against the stand-in API.

The stand-in answers 429 ``rate_limit_error`` with ``retry-after`` and the plan-limit headers while a file
exists (``MessagesApi.limited_while``); the account must pause with no attempt used and nothing in
``failed/``, and every waiting memo must run once after a probe gets through.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_real_cli as real

from conftest import Project, wait_for
from messages_api import MessagesApi

pytestmark = pytest.mark.real_cli
cli, api, env = real.cli, real.api, real.env  # the real CLI's fixtures: its isolation from Anthropic included
SLOW, ended, history_row, sdk_role = real.SLOW, real.ended, real.history_row, real.sdk_role


def answered_calls(api: MessagesApi, marker: str) -> int:
    """The model calls of a conversation carrying ``marker`` that the stand-in answered (not refused 429)."""
    return sum(
        1
        for r in api.requests()
        if r.get("path", "").endswith("/messages") and not r.get("limited") and marker in json.dumps(r)
    )


def log_text(project: Project) -> str:
    return "".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(project.root.glob("up-*.out")))


ROLES = {
    "sdk": sdk_role(retry={"max": 2, "backoff": ["0.1s"]}, api_retries=0),
    "claude -p": {"command": ["claude", "-p"], "retry": {"max": 2, "backoff": ["0.1s"]}, "api_retries": 0},
}


@pytest.mark.parametrize("kind", list(ROLES))
def test_a_usage_limit_pauses_the_account_and_every_memo_runs_once_after_the_probe(
    project: Project, env: dict[str, str], api: MessagesApi, tmp_path: Path, kind: str
) -> None:
    limited = tmp_path / "limited"
    limited.write_text("429 until removed\n", encoding="utf-8")
    api.server.limited_while = limited
    role = ROLES[kind]
    # the notify role runs the stand-in on an account of its own: a probe must be a run that calls the API
    project.configure(
        {"writer": role, "boss": {"account": "ops"}}, notify="boss", usage_limits={"probe": "1s", "max_probe": "2s"}
    )
    project.up(**env)
    project.drop("writer", "W-1.md", body="[answer] first memo")
    wait_for(lambda: project.status()["paused"], SLOW, "the account paused")
    project.drop("writer", "W-2.md", body="[answer] second memo")
    paused = project.status()["paused"]["team"]
    assert paused["reason"].startswith("usage limit"), paused
    assert paused["roles"] == ["writer"]
    assert project.folder("writer", "failed") == []
    text = project.cli("status")
    assert "paused: usage limit" in text.stdout, text.stdout
    wait_for(lambda: "probe met the usage limit again" in log_text(project), SLOW, "a probe that met the limit")
    assert project.folder("writer", "failed") == [] and project.folder("writer", "archive") == []
    limited.unlink()
    ended(project, "writer", "archive", "W-1.md")
    ended(project, "writer", "archive", "W-2.md")
    assert project.folder("writer", "failed") == []
    for memo, marker in (("W-1.md", "first memo"), ("W-2.md", "second memo")):
        row = history_row(project, memo)
        assert row["state"] == "succeeded" and row["attempt"] == 1, row
        assert answered_calls(api, marker) == 1, f"{memo} ran once after the limit"
    wait_for(lambda: not project.status()["paused"], SLOW, "the pause over")
    notices = [n for n in project.folder("boss", "inbox") + project.folder("boss", "archive") if "usage-limit" in n]
    assert len(notices) == 2, notices
