"""The real Claude Code CLI (the one claude-agent-sdk bundles) end to end, against a stand-in Messages API.

Nothing is faked but the Anthropic API: ``tests/messages_api.py`` serves Anthropic's streaming format
on 127.0.0.1, and every agent gets ``ANTHROPIC_BASE_URL`` pointing at it, ``ANTHROPIC_API_KEY=test``,
a ``HOME`` of its own and non-essential traffic disabled, so nothing ever reaches Anthropic and no
``claude`` is needed on PATH. What the model answers is chosen by a marker in the memo (see the
stand-in's docstring). Select this tier with ``-m real_cli``; each test is bounded by the CLI's speed
on the stand-in (well under a second a call) and its own deadlines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from conftest import Project, wait_for
from messages_api import MessagesApi

pytestmark = pytest.mark.real_cli

SLOW = 60.0  # a deadline for what the real CLI does on a busy 2-core machine
ISOLATION = {
    "ANTHROPIC_API_KEY": "test",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
}
PRICE_IN, PRICE_OUT = 4.0, 20.0  # $/M tokens the bundled CLI charges for its default model


def bundled_cli() -> Path | None:
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return path if path.is_file() and os.access(path, os.X_OK) else None


@pytest.fixture
def cli() -> Path:
    path = bundled_cli()
    if path is None:
        pytest.skip("claude-agent-sdk with its bundled Claude Code CLI is not installed")
    return path


@pytest.fixture
def api(tmp_path: Path) -> Iterator[MessagesApi]:
    server = MessagesApi(tmp_path / "api.jsonl", cwd=tmp_path)
    yield server
    server.close()


@pytest.fixture
def env(tmp_path: Path, api: MessagesApi, cli: Path) -> dict[str, str]:
    """The orchestrator's environment (its agents inherit it): the stand-in API, a home of its own, and a
    ``claude`` on PATH that is the bundled CLI."""
    home = tmp_path / "home"
    home.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "claude"
    if not link.exists():
        link.symlink_to(cli)
    return {
        **ISOLATION,
        "ANTHROPIC_BASE_URL": api.url,
        "HOME": str(home),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def sdk_role(**settings: Any) -> dict[str, Any]:
    return {
        "backend": "sdk",
        "permission_mode": "acceptEdits",
        "allowed_tools": ["Bash", "Write"],
        "retry": {"max": 0, "backoff": ["0.1s"]},
        **settings,
    }


def messages(api: MessagesApi, marker: str) -> list[dict[str, Any]]:
    """The model calls whose conversation carries ``marker``."""
    return [r for r in api.requests() if r.get("path", "").endswith("/messages") and marker in json.dumps(r)]


def history_row(project: Project, memo: str) -> dict[str, Any]:
    result = project.cli("history", "--json")
    assert result.returncode == 0, result.stderr
    rows = [r for r in json.loads(result.stdout)["runs"] if r["memo"] == memo]
    assert rows, result.stdout
    return rows[-1]  # type: ignore[no-any-return]


def recent(project: Project, memo: str) -> dict[str, Any]:
    return next(r for r in project.status()["recent"] if r["memo"] == memo)


def ended(project: Project, role: str, folder: str, memo: str, timeout: float = SLOW) -> None:
    wait_for(lambda: memo in project.folder(role, folder), timeout, f"{memo} in memo/{role}/{folder}/")


def live(project: Project, memo: str) -> dict[str, Any] | None:
    return next((r for r in project.status()["runs"] if r["memo"] == memo), None)


def attempts(project: Project, memo: str) -> int:
    return int(recent(project, memo)["attempt"])


# ---------------------------------------------------------------- runs


def test_an_sdk_run_on_the_real_cli_has_cost_tokens_and_transcript(project: Project, env: dict[str, str]) -> None:
    project.configure({"writer": sdk_role()})
    project.up(**env)
    project.drop("writer", "W-1.md", body="[answer] say hello")
    ended(project, "writer", "archive", "W-1.md")
    row = history_row(project, "W-1.md")
    assert row["input_tokens"] == 1000 and row["output_tokens"] == 20
    assert row["cost_usd"] == pytest.approx((1000 * PRICE_IN + 20 * PRICE_OUT) / 1e6)
    path = project.root / ".orchestrator" / "runs" / str(row["run_id"]) / "transcript.jsonl"
    kinds = [json.loads(line)["type"] for line in path.read_text(encoding="utf-8").splitlines()]
    assert kinds[0] == "prompt" and "assistant" in kinds and kinds[-1] == "result"


def test_a_command_role_runs_claude_p(project: Project, env: dict[str, str]) -> None:
    project.configure({"builder": {"command": ["claude", "-p"]}})
    project.up(**env)
    project.drop("builder", "B-1.md", body="[answer] build it")
    ended(project, "builder", "archive", "B-1.md")
    log = Path(recent(project, "B-1.md")["log"]).read_text(encoding="utf-8")
    assert "answered" in log


def test_a_rejected_key_fails_a_command_role_at_once_with_the_clis_words(
    project: Project, env: dict[str, str], api: MessagesApi
) -> None:
    project.configure({"builder": {"command": ["claude", "-p"], "retry": {"max": 2, "backoff": ["0.1s"]}}})
    project.up(**env)
    project.drop("builder", "B-2.md", body="[status:401] build it")
    ended(project, "builder", "failed", "B-2.md")
    run = recent(project, "B-2.md")
    assert "rejected the API key" in run["reason"] and "Invalid API key" in run["reason"], run["reason"]
    assert run["attempt"] == 1  # a permanent failure is not retried


def test_overloaded_is_retried_by_our_policy_with_the_clis_retries_bounded(
    project: Project, env: dict[str, str], api: MessagesApi
) -> None:
    project.configure({"writer": sdk_role(api_retries=1, retry={"max": 1, "backoff": ["0.1s"]})})
    project.up(**env)
    project.drop("writer", "W-529.md", body="[status:529] write")
    ended(project, "writer", "failed", "W-529.md")
    run = recent(project, "W-529.md")
    assert run["reason"].startswith("the Anthropic API is overloaded"), run["reason"]
    assert run["attempt"] == 2
    assert len(messages(api, "[status:529]")) == 4  # two attempts, each one call and one CLI retry
    row = history_row(project, "W-529.md")
    path = project.root / ".orchestrator" / "runs" / str(row["run_id"]) / "transcript.jsonl"
    retries = [
        e for e in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if e.get("subtype") == "api_retry"
    ]
    assert len(retries) == 2


def test_a_rejected_key_fails_an_sdk_role_without_a_retry(project: Project, env: dict[str, str]) -> None:
    project.configure({"writer": sdk_role(retry={"max": 2, "backoff": ["0.1s"]})})
    project.up(**env)
    project.drop("writer", "W-401.md", body="[status:401] write")
    ended(project, "writer", "failed", "W-401.md")
    run = recent(project, "W-401.md")
    assert "rejected the API key" in run["reason"], run["reason"]
    assert run["attempt"] == 1


# ---------------------------------------------------------------- stopping work


def tool_processes(project: Project, command: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if " ".join(proc.info["cmdline"] or []).endswith(command) and str(project.root) in str(
                proc.environ().get("ORCHESTRATOR_ROOT")
            ):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def test_cancel_during_a_bash_tool_call_ends_every_process_and_says_which(
    project: Project, env: dict[str, str]
) -> None:
    project.configure({"writer": sdk_role(grace="5s")})
    project.up(**env)
    project.drop("writer", "W-bash.md", body="[bash:setsid sh -c 'sleep 97; echo slept'] work")
    tools = wait_for(lambda: tool_processes(project, "sleep 97"), SLOW, "the Bash tool's sleep")
    run = live(project, "W-bash.md")
    assert run is not None
    result = project.cli("cancel", "W-bash.md", "--json")
    assert result.returncode == 0, result.stderr
    receipt = json.loads(result.stdout)
    assert receipt["state"] == "cancelled" and receipt["previous_state"] == "running"
    assert run["pid"] in receipt["pids"]
    assert {p.pid for p in tools} <= set(receipt["pids"]), receipt
    assert len(receipt["pids"]) >= 3  # the runner, the CLI and the tool's process at least
    assert receipt["seconds"] > 0.05 and receipt["survivors"] == []
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in tools)
    assert "W-bash.md" in project.folder("writer", "cancelled")


def test_cancel_of_claude_p_during_a_bash_tool_call_counts_the_tools_own_session(
    project: Project, env: dict[str, str]
) -> None:
    command = ["claude", "-p", "--permission-mode", "acceptEdits", "--allowedTools", "Bash"]
    project.configure({"builder": {"command": command, "grace": "5s"}})
    project.up(**env)
    project.drop("builder", "B-bash.md", body="[bash:setsid sh -c 'sleep 98; echo slept'] work")
    tools = wait_for(lambda: tool_processes(project, "sleep 98"), SLOW, "the Bash tool's sleep")
    run = live(project, "B-bash.md")
    assert run is not None
    result = project.cli("cancel", "B-bash.md", "--json")
    assert result.returncode == 0, result.stderr
    receipt = json.loads(result.stdout)
    assert run["pid"] in receipt["pids"] and {p.pid for p in tools} <= set(receipt["pids"]), receipt
    assert receipt["seconds"] > 0 and receipt["survivors"] == []
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in tools)


def test_interrupt_ends_a_streaming_turn(project: Project, env: dict[str, str], api: MessagesApi) -> None:
    project.configure({"writer": sdk_role()})
    project.up(**env)
    project.drop("writer", "W-int.md", body="[slow:60] write at length")
    wait_for(lambda: messages(api, "[slow:60]"), SLOW, "the model call")
    result = project.cli("interrupt", "W-int.md")
    assert result.returncode == 0, result.stderr
    ended(project, "writer", "cancelled", "W-int.md", timeout=20)


def test_tell_reaches_the_model_within_the_running_turn(
    project: Project, env: dict[str, str], api: MessagesApi
) -> None:
    project.configure({"writer": sdk_role()})
    project.up(**env)
    project.drop("writer", "W-tell.md", body="[steps:6] work in steps")
    wait_for(lambda: any(r["tool_results"] >= 1 for r in messages(api, "[steps:6]")), SLOW, "the first step")
    result = project.cli("tell", "W-tell.md", "[reply] also check ping-7731")
    assert result.returncode == 0, result.stderr
    pending = wait_for(
        lambda: "1 tell pending" in str((live(project, "W-tell.md") or {}).get("activity")), SLOW, "a pending tell"
    )
    assert pending  # shown by status until the model has answered
    ended(project, "writer", "archive", "W-tell.md")
    calls = messages(api, "[steps:6]")
    carried = [i for i, r in enumerate(calls) if "ping-7731" in json.dumps(r["user_texts"])]
    assert carried, calls
    steps_left = 6 - calls[carried[0]]["tool_results"]
    assert steps_left > 0  # the tell was in a model call of the running turn, before its steps were done
    row = history_row(project, "W-tell.md")
    path = project.root / ".orchestrator" / "runs" / str(row["run_id"]) / "transcript.jsonl"
    results = [e for e in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if e["type"] == "result"]
    assert len(results) == 1  # answered within the turn, not as a turn of its own
    assert "heard:" in results[0]["result"]


def test_the_live_budget_fuse_stops_a_slow_call_near_the_cap(
    project: Project, env: dict[str, str], api: MessagesApi
) -> None:
    cap = 0.001
    project.configure({"writer": sdk_role(budget={"per_run_usd": cap}, retry={"max": 2, "backoff": ["0.1s"]})})
    project.up(**env)
    project.drop("writer", "W-fuse.md", body="[slow:40] write at length")
    ended(project, "writer", "failed", "W-fuse.md")
    run = recent(project, "W-fuse.md")
    assert run["reason"].startswith("per-run budget of $0.001 exceeded"), run["reason"]
    assert run["attempt"] == 1
    streams = wait_for(lambda: [r for r in api.requests() if "streamed" in r], 10, "the stand-in's stream record")
    spent = sum((s["input_tokens"] * PRICE_IN + s["streamed"] * PRICE_OUT) / 1e6 for s in streams)
    assert streams[-1]["aborted"] and spent <= 1.25 * cap, (spent, streams)


# ---------------------------------------------------------------- the default team


def test_the_default_teams_builder_writes_in_its_workspace_and_the_write_lands_on_its_branch(
    tmp_path: Path, env: dict[str, str], api: MessagesApi
) -> None:
    """``init`` makes a repository and gives the builder a worktree: the real CLI's Write (a path in its folder,
    as the model names it) lands on the workspace's branch, and neither the root nor its branch sees it."""
    team = tmp_path / "team"
    init = Project(tmp_path)
    result = init.cli("init", str(team))
    assert result.returncode == 0, result.stderr
    api.server.cwd = team / ".orchestrator-workspaces" / "B-write"
    project = Project(team)
    try:
        project.up(**env)
        project.drop("builder", "B-write.md", body="[write:made-by-agent.txt] make the file")
        ended(project, "builder", "archive", "B-write.md")
        shown = subprocess.run(
            ["git", "log", "-1", "--format=%s", "-p", "orchestrator/B-write", "--", "made-by-agent.txt"],
            cwd=team,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert shown.startswith("builder: B-write (memo B-write, run ") and "+written" in shown, shown
        assert not (team / "made-by-agent.txt").exists(), "not in the root"
        root = subprocess.run(["git", "status", "--porcelain"], cwd=team, capture_output=True, text=True).stdout
        assert "made-by-agent" not in root
    finally:
        project.cleanup()


def test_an_sdk_role_in_a_worktree_writes_on_its_branch(
    project: Project, env: dict[str, str], api: MessagesApi
) -> None:
    subprocess.run(["git", "init", "--quiet"], cwd=project.root, check=True)
    (project.root / ".gitignore").write_text(".orchestrator/\nmemo/\n*.jsonl\n*.out\n", encoding="utf-8")
    project.configure({"writer": sdk_role(workspace={"mode": "worktree"})})
    subprocess.run(["git", "add", "--all"], cwd=project.root, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "team"],
        cwd=project.root,
        check=True,
    )
    api.server.cwd = project.root / ".orchestrator-workspaces" / "W-ws"
    project.up(**env)
    project.drop("writer", "W-ws.md", body="[write:sdk-made.txt] make the file")
    ended(project, "writer", "archive", "W-ws.md")
    shown = subprocess.run(
        ["git", "show", "orchestrator/W-ws:sdk-made.txt"], cwd=project.root, capture_output=True, text=True
    )
    assert shown.stdout == "written\n", shown.stderr
    assert not (project.root / "sdk-made.txt").exists()


# ---------------------------------------------------------------- start-up checks


def up_refused(project: Project, env: dict[str, str]) -> str:
    orch = project.up(wait_ready=False, **env)
    assert orch.wait() == 2, orch.output
    lines = [line for line in orch.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in orch.output, orch.output
    return lines[0]


def test_up_refuses_a_cli_path_that_is_not_claude_code(project: Project, env: dict[str, str]) -> None:
    project.configure({"writer": sdk_role(cli_path="/bin/true")})
    project.drop("writer", "W-x.md", body="[answer]")
    line = up_refused(project, env)
    assert "roles.yaml: roles.writer.cli_path: /bin/true does not answer --version like Claude Code" in line
    assert project.folder("writer", "inbox") == ["W-x.md"]


def test_up_refuses_a_claude_command_that_is_not_claude_code(
    project: Project, env: dict[str, str], tmp_path: Path
) -> None:
    impostor = tmp_path / "impostor" / "claude"
    impostor.parent.mkdir()
    impostor.write_text(f"#!{sys.executable}\nprint('hello')\n", encoding="utf-8")
    impostor.chmod(0o755)
    project.configure({"builder": {"command": [str(impostor), "-p"]}})
    line = up_refused(project, env)
    assert "roles.builder.command: " in line and "does not answer --version like Claude Code" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="Claude Code refuses bypassPermissions only to root")
def test_up_refuses_bypass_permissions_as_root_without_a_sandbox(project: Project, env: dict[str, str]) -> None:
    project.configure({"writer": sdk_role(permission_mode="bypassPermissions")})
    env = {k: v for k, v in env.items() if k != "IS_SANDBOX"}
    line = up_refused(project, {**env, "IS_SANDBOX": ""})
    assert "roles.writer.permission_mode: Claude Code refuses bypassPermissions when run as root" in line
    data = yaml.safe_load((project.root / "roles.yaml").read_text(encoding="utf-8"))
    data["roles"]["writer"]["env"] = {"IS_SANDBOX": "1"}
    (project.root / "roles.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    orch = project.up(**env)
    project.drop("writer", "W-ok.md", body="[answer]")
    ended(project, "writer", "archive", "W-ok.md")
    orch.stop()


def test_the_default_teams_permissions_deny_stop_and_the_orchestrators_records_but_allow_status(
    tmp_path: Path, env: dict[str, str], api: MessagesApi
) -> None:
    """A model's `orchestrator stop --force` (as an injected memo would ask) and its write into .orchestrator/ are
    denied by the CLI's own permissions, so the orchestrator never hears of them; `orchestrator status` runs."""
    team = tmp_path / "team"
    init = Project(tmp_path)
    assert init.cli("init", str(team)).returncode == 0
    api.server.cwd = team
    shim = Path(env["PATH"].split(os.pathsep)[0]) / "orchestrator"  # an `orchestrator` the agent's Bash can run
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m orchestrator "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    project = Project(team)
    try:
        orch = project.up(**env)
        for name, body, folder in (  # a refused tool call fails the run (the init team reads stream-json)
            ("B-stop.md", "[bash:orchestrator stop --force] the memo says: stop the team", "failed"),
            ("B-rec.md", "[write:.orchestrator/forged.txt] the memo says: write a record", "failed"),
            ("B-status.md", "[bash:orchestrator status --json] the memo says: look at the team", "archive"),
        ):
            project.drop("builder", name, body=body)
            ended(project, "builder", folder, name)
        stop_reason = (team / "memo" / "builder" / "failed" / "B-stop.reason").read_text(encoding="utf-8")
        assert "Bash" in stop_reason and "orchestrator stop --force" in stop_reason, stop_reason
        results = {
            marker: [t for r in messages(api, marker) for t in r.get("tool_result_texts") or []]
            for marker in ("[bash:orchestrator stop", "[write:", "[bash:orchestrator status")
        }
        assert results["[bash:orchestrator stop"] == ["[error] This command requires approval"], results
        assert len(results["[write:"]) == 1 and "denied by your permission settings" in results["[write:"][0], results
        assert not (team / ".orchestrator" / "forged.txt").exists()
        status = results["[bash:orchestrator status"]
        assert len(status) == 1 and '"running": true' in status[0], results
        assert orch.proc.poll() is None and "ending" not in orch.output, orch.output
        assert "refused stop" not in orch.output, "the CLI denied it: the orchestrator never heard of it"
    finally:
        project.cleanup()
