"""``orchestrator doctor`` finds each problem of a set-up in a test that makes it; ``up`` refuses to start on the
cheap ones (one line, exit 2) and prints their warnings once.

The problems are real where they can be (a command missing from PATH, a ``claude`` that is not Claude Code or
is not logged in, a file where a memo folder should be, a corrupt database, a missing context file, no
keeper); what only the machine decides (inotify's limits, a full disk, a wrong clock) comes through the
doctor's one seam, ``Host``: a folder laid out like ``/proc``, a ``statvfs``, a manual clock.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from conftest import Project, wait_for
from orchestrator.agents.backends import claude as claude_backend
from orchestrator.app import run_up
from orchestrator.config import load_config
from orchestrator.core.clock import ManualClock
from orchestrator.core.errors import ConfigError
from orchestrator.ops import unit
from orchestrator.ops.doctor import Finding, Host, diagnose, roles, start_checks


def doctor(project: Project, **env: str) -> tuple[int, list[dict[str, Any]], str]:
    """``orchestrator doctor --json`` and ``orchestrator doctor`` of the project: the exit status, the findings
    and the lines for people (which must agree, check for check)."""
    as_json = project.cli("doctor", "--json", **env)
    plain = project.cli("doctor", **env)
    assert as_json.returncode == plain.returncode, (as_json.stderr, plain.stderr)
    assert "Traceback" not in as_json.stderr + plain.stderr, as_json.stderr + plain.stderr
    findings = json.loads(as_json.stdout)
    lines = plain.stdout.splitlines()
    assert len(lines) == len(findings) + 1 and lines[-1].startswith("doctor: "), plain.stdout
    for finding, line in zip(findings, lines, strict=False):
        assert set(finding) == {"check", "role", "status", "detail", "fix"}
        subject = f"{finding['role']}: {finding['check']}" if finding["role"] else finding["check"]
        assert line.startswith(f"{finding['status']:<4} {subject}: "), (finding, line)  # the disk's free space moves
        assert (finding["fix"] is None) == (finding["status"] == "ok"), finding
    return plain.returncode, findings, plain.stdout


def one(findings: list[dict[str, Any]], check: str, role: str | None = None) -> dict[str, Any]:
    (found,) = [f for f in findings if f["check"] == check and f["role"] == role]
    return found


def fake_claude(
    folder: Path, *, version: str = "2.1.0 (Claude Code)", auth: str | None = None, auth_exit: int = 0
) -> Path:
    """A ``claude`` on PATH that answers ``--version`` with ``version`` and ``auth status --json`` with ``auth``
    (its exit status ``auth_exit``); every call is recorded in ``calls`` beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "claude"
    answer = "" if auth is None else f"  auth) cat <<'EOF'\n{auth}\nEOF\n    exit {auth_exit};;\n"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{folder / "calls"}"\n'
        'case "$1" in\n'
        f"  --version) echo '{version}';;\n"
        f"{answer}"
        "  *) echo \"error: unknown command '$1'\" >&2; exit 1;;\n"
        "esac\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script


def on_path(folder: Path) -> str:
    return f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"


LOGGED_OUT = json.dumps({"loggedIn": False, "authMethod": "none", "apiProvider": "firstParty"})
LOGGED_IN = json.dumps(
    {"loggedIn": True, "authMethod": "claude.ai", "apiProvider": "firstParty", "subscriptionType": "max"}
)


# ---------------------------------------------------------------- the whole report
def test_a_healthy_team_is_all_ok_and_exits_0(project: Project) -> None:
    project.configure({"builder": {}, "reviewer": {"context": ["notes/persona.md"]}})
    (project.root / "notes").mkdir()
    (project.root / "notes" / "persona.md").write_text("You review.\n", encoding="utf-8")
    code, findings, out = doctor(project)
    assert code == 0, out
    assert {f["status"] for f in findings} == {"ok"}, out
    checks = [(f["role"], f["check"]) for f in findings]
    for role in ("builder", "reviewer"):
        assert [(role, c) for c in ("command", "folders", "prompt")] == [x for x in checks if x[0] == role][:3]
    assert ("builder", "login") not in checks, "the stand-in is not Claude Code: no login to check"
    assert ("reviewer", "context") in checks and ("builder", "context") not in checks
    team = [c for r, c in checks if r is None]
    assert team == ["config", "keeper", "inotify", "disk", "state", "database", "clock", "accounts"]
    assert "not Claude Code: its exit status is the verdict" in one(findings, "command", "builder")["detail"]
    assert "not created yet" in one(findings, "database")["detail"]
    assert out.splitlines()[-1] == f"doctor: {len(findings)} ok, 0 warn, 0 fail: nothing fails"


def test_a_roles_yaml_that_does_not_load_is_one_failure_and_the_root_is_still_checked(project: Project) -> None:
    (project.root / "roles.yaml").write_text("roles:\n  builder:\n    timeout: soon\n", encoding="utf-8")
    code, findings, out = doctor(project)
    assert code == 1
    config = one(findings, "config")
    assert config["status"] == "fail" and "roles.builder.timeout" in config["detail"], out
    assert [f["check"] for f in findings] == ["config", "disk", "state", "database"]


# ---------------------------------------------------------------- the command
def test_a_command_not_on_path_fails_naming_the_role_and_what_to_do(project: Project) -> None:
    project.configure({"builder": {}, "writer": {"command": ["no-such-agent-program", "-p"]}})
    code, findings, _ = doctor(project)
    assert code == 1
    found = one(findings, "command", "writer")
    assert found["status"] == "fail"
    assert (
        found["detail"]
        == f"{project.root / 'roles.yaml'}: roles.writer.command: 'no-such-agent-program' not found on PATH"
    )
    assert found["fix"].startswith("install it, fix the role's `command`")
    assert one(findings, "command", "builder")["status"] == "ok"


def test_a_claude_that_is_not_claude_code_fails(project: Project, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_claude(bin_dir, version="1.0.3", auth=LOGGED_IN)
    project.configure({"builder": {"command": ["claude", "-p"]}})
    code, findings, _ = doctor(project, PATH=on_path(bin_dir))
    assert code == 1
    found = one(findings, "command", "builder")
    assert found["status"] == "fail" and "does not answer --version like Claude Code" in found["detail"], found
    assert "npm install -g @anthropic-ai/claude-code" in found["fix"]
    assert [f for f in findings if f["check"] == "login"] == [], "no login asked of a CLI that is not Claude Code"


def test_a_claude_not_logged_in_fails_and_an_api_key_is_not_asked(project: Project, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    claude = fake_claude(bin_dir, auth=LOGGED_OUT, auth_exit=1)
    project.configure({"builder": {"command": ["claude", "-p"]}, "planner": {"command": ["claude", "-p"]}})
    env = {"PATH": on_path(bin_dir), "ANTHROPIC_API_KEY": ""}
    code, findings, _ = doctor(project, **env)
    assert code == 1
    for role in ("builder", "planner"):
        command = one(findings, "command", role)
        assert command == {**command, "status": "ok", "detail": f"claude -> {claude} (this shell): 2.1.0 (Claude Code)"}
        login = one(findings, "login", role)
        assert login["status"] == "fail" and "not logged in" in login["detail"], login
        assert f"`{claude} auth login`" in login["fix"] and "ANTHROPIC_API_KEY" in login["fix"]
    asked = (bin_dir / "calls").read_text().splitlines()
    assert asked.count("auth status --json") == 2, "one question per doctor run (two runs), not one per role"

    (bin_dir / "calls").unlink()
    code, findings, out = doctor(project, **{**env, "ANTHROPIC_API_KEY": "sk-test"})
    assert code == 0, out
    assert "ANTHROPIC_API_KEY is set" in one(findings, "login", "builder")["detail"]
    assert "auth status --json" not in (bin_dir / "calls").read_text()


def test_a_logged_in_claude_is_ok_and_one_that_cannot_say_is_a_warning(project: Project, tmp_path: Path) -> None:
    logged_in, old = tmp_path / "in", tmp_path / "old"
    fake_claude(logged_in, auth=LOGGED_IN)
    fake_claude(old)  # no `auth` command: what a CLI older than it says
    project.configure({"builder": {"command": ["claude", "-p"]}})
    code, findings, _ = doctor(project, PATH=on_path(logged_in), ANTHROPIC_API_KEY="")
    assert code == 0
    assert one(findings, "login", "builder")["detail"] == "logged in (claude.ai, max)"
    code, findings, out = doctor(project, PATH=on_path(old), ANTHROPIC_API_KEY="")
    assert code == 0, "a warning is not a failure"
    login = one(findings, "login", "builder")
    assert login["status"] == "warn" and login["detail"].startswith("cannot tell: "), login
    assert "exited 1 and said error: unknown command 'auth'" in login["detail"]
    assert "doctor: " in out and ", 1 warn, 0 fail" in out.splitlines()[-1]


def test_a_claude_that_does_not_answer_auth_status_in_time_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stuck = tmp_path / "claude"
    stuck.write_text("#!/bin/sh\nexec sleep 30\n", encoding="utf-8")
    stuck.chmod(0o755)
    monkeypatch.setattr(claude_backend, "AUTH_SECONDS", 0.3)
    found = claude_backend.auth_status(str(stuck), dict(os.environ))
    assert found.status == "warn" and found.detail == f"cannot tell: `{stuck} auth status` did not answer within 0.3s"


def test_the_service_path_must_find_the_command_too(project: Project, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    agent = bin_dir / "my-agent"
    bin_dir.mkdir()
    agent.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    agent.chmod(0o755)
    project.configure({"builder": {"command": ["my-agent"]}})
    config_home = tmp_path / "xdg"
    env = {"PATH": on_path(bin_dir), "XDG_CONFIG_HOME": str(config_home)}
    code, findings, _ = doctor(project, **env)
    assert code == 0 and one(findings, "command", "builder")["detail"].startswith(f"my-agent -> {agent} (this shell)")

    # a unit installed from a shell whose PATH did not have bin/: the service would not find the agent
    config = load_config(project.root)
    written = config_home / "systemd" / "user" / unit.unit_name(project.root)
    written.parent.mkdir(parents=True)
    written.write_text(unit.render(unit.spec_for(config, path="/usr/bin:/bin")), encoding="utf-8")
    code, findings, _ = doctor(project, **env)
    assert code == 1
    found = one(findings, "command", "builder")
    assert found["status"] == "fail"
    assert f"'my-agent' not found on the PATH of the service {unit.unit_name(project.root)}" in found["detail"]
    assert "install the service again from a shell whose PATH finds it" in found["fix"]


def test_a_missing_cwd_fails_the_command_check(project: Project) -> None:
    project.configure({"builder": {"cwd": "site"}})
    code, findings, _ = doctor(project)
    found = one(findings, "command", "builder")
    assert code == 1 and found["detail"].endswith(f"roles.builder.cwd: folder {project.root / 'site'} does not exist")


# ---------------------------------------------------------------- folders
def test_a_file_where_a_memo_folder_should_be_fails_the_doctor_and_stops_up(project: Project) -> None:
    project.configure({"builder": {}, "reviewer": {}})
    (project.root / "memo" / "builder").mkdir(parents=True)
    archive = project.root / "memo" / "builder" / "archive"
    archive.write_text("not a folder\n", encoding="utf-8")
    code, findings, _ = doctor(project)
    assert code == 1
    found = one(findings, "folders", "builder")
    assert found["status"] == "fail" and found["detail"] == f"{archive} is a file, not a folder"
    assert one(findings, "folders", "reviewer")["status"] == "ok"

    orch = project.up(wait_ready=False)
    assert orch.wait() == 2
    lines = orch.output.strip().splitlines()
    assert lines == [
        f"orchestrator: builder: folders: {archive} is a file, not a folder; move it away (`up` makes the folder) "
        "(`orchestrator doctor` checks the rest)"
    ], orch.output
    assert not (project.root / ".orchestrator" / "pid").exists()


def as_another_user(check: Any) -> Any:
    """``check()`` as another user: as root, with the effective uid 65534 (``access(2)`` and the write probe
    both go by the effective uid; ``chmod`` stops no root), else as this user."""
    if os.geteuid() != 0:
        return check()
    os.seteuid(65534)
    try:
        return check()
    finally:
        os.seteuid(0)


def test_a_memo_folder_this_user_cannot_write_or_enter_fails() -> None:
    """A root-owned project (or, not as root, folders without write or search permission) in a world-readable
    temporary folder: first an inbox this user may not write in, then a memo folder it may not even enter."""
    root = Path(tempfile.mkdtemp(prefix="doctor-ro-"))
    memo = root / "memo"
    inbox = memo / "builder" / "inbox"
    uid = 65534 if os.geteuid() == 0 else os.geteuid()
    try:
        root.chmod(0o755)
        Project(root).configure()
        inbox.mkdir(parents=True)
        inbox.parent.chmod(0o777)
        inbox.chmod(0o755 if os.geteuid() == 0 else 0o555)
        config = load_config(root)
        builder = config.roles["builder"]
        found = as_another_user(lambda: roles.check_folders(config, builder))
        assert found.status == "fail" and found.detail == f"{inbox} is not writable by this user (uid {uid})", found
        assert found.fix.startswith("give this user write access to it")

        memo.chmod(0o700 if os.geteuid() == 0 else 0o000)
        found = as_another_user(lambda: roles.check_folders(config, builder))
        assert found.detail == f"cannot look at {memo / 'builder'}: Permission denied", found
        assert found.fix.startswith("give this user write access to it")
    finally:
        memo.chmod(0o755)
        inbox.chmod(0o755)
        shutil.rmtree(root)


def test_the_folder_check_leaves_nothing_behind_and_says_what_start_makes(project: Project) -> None:
    project.configure()
    project.drop("builder", "M-1.md")
    config = load_config(project.root)
    found = roles.check_folders(config, config.roles["builder"])
    assert found == Finding(
        "folders",
        "ok",
        "memo/builder/: inbox writable; active, archive, failed, cancelled made at start; held made when a memo is first "
        "held",
        role="builder",
    )
    assert sorted(p.name for p in (project.root / "memo" / "builder" / "inbox").iterdir()) == ["M-1.md"]


# ---------------------------------------------------------------- prompt and context
def test_a_missing_context_file_and_a_missing_prompt_fail(project: Project) -> None:
    project.configure({"builder": {"context": ["notes/goals.md"]}, "reviewer": {}})
    (project.root / "prompts" / "reviewer.md").unlink()
    code, findings, _ = doctor(project)
    assert code == 1
    context = one(findings, "context", "builder")
    assert (
        context["detail"]
        == f"{project.root / 'roles.yaml'}: roles.builder.context: context file notes/goals.md is missing"
    )
    assert context["fix"] == "create it, fix the list, or raise context_max_bytes"
    prompt = one(findings, "prompt", "reviewer")
    assert (
        prompt["status"] == "fail"
        and prompt["detail"] == f"{project.root / 'prompts' / 'reviewer.md'}: prompt file not found"
    )


# ---------------------------------------------------------------- the keeper
def test_no_keeper_fails_adopt_and_warns_restart_which_up_prints_once(project: Project) -> None:
    project.configure()
    code, findings, _ = doctor(project, ORCHESTRATOR_KEEPER="off")
    keeper = one(findings, "keeper")
    assert code == 1 and keeper["status"] == "fail"
    assert "recovery: adopt needs the keeper, and ORCHESTRATOR_KEEPER=off is set" in keeper["detail"]

    project.configure(recovery="restart")
    code, findings, _ = doctor(project, ORCHESTRATOR_KEEPER="off")
    keeper = one(findings, "keeper")
    assert code == 0 and keeper["status"] == "warn" and "is run again" in keeper["detail"], keeper
    orch = project.up(ORCHESTRATOR_KEEPER="off")
    orch.wait_output("orchestrator up:")
    project.drop("builder", "M-1.md")
    wait_for(lambda: project.folder("builder", "archive") == ["M-1.md"], what="M-1 archived")
    assert orch.stop() == 0
    warned = [line for line in orch.output.splitlines() if "warning: keeper: ORCHESTRATOR_KEEPER=off is set" in line]
    assert len(warned) == 1, orch.output


# ---------------------------------------------------------------- the machine, through Host
def fake_proc(folder: Path, max_watches: int, max_instances: int = 128, held: list[int] | None = None) -> Path:
    """A folder laid out like ``/proc``: the inotify limits, and one process of this user holding an inotify
    instance per number in ``held`` with that many watches."""
    limits = folder / "sys" / "fs" / "inotify"
    limits.mkdir(parents=True)
    (limits / "max_user_watches").write_text(f"{max_watches}\n")
    (limits / "max_user_instances").write_text(f"{max_instances}\n")
    fake_process(folder, 4242, held or [])
    return folder


def fake_process(proc: Path, pid: int, held: list[int], cmdline: str = "vim", path: str = "/usr/bin") -> None:
    process = proc / str(pid)
    (process / "fd").mkdir(parents=True)
    (process / "fdinfo").mkdir()
    (process / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
    (process / "environ").write_bytes(f"HOME=/x\0PATH={path}\0".encode())
    (process / "fd" / "0").symlink_to("/dev/null")
    for fd, watches in enumerate(held, start=3):
        (process / "fd" / str(fd)).symlink_to("anon_inode:inotify")
        lines = [f"inotify wd:{n} ino:1 sdev:2 mask:fce ignored_mask:0" for n in range(1, watches + 1)]
        (process / "fdinfo" / str(fd)).write_text("pos:\t0\nflags:\t02004000\n" + "\n".join(lines) + "\n")


@pytest.fixture
def team(project: Project) -> Iterator[Project]:
    project.configure({"builder": {}, "planner": {}, "reviewer": {}})
    yield project


def finding(found: list[Finding], check: str) -> Finding:
    (hit,) = [f for f in found if f.check == check and f.role is None]
    return hit


def test_too_few_inotify_watches_fail_the_doctor_and_stop_up(team: Project, tmp_path: Path) -> None:
    host = Host(proc=fake_proc(tmp_path / "proc", max_watches=5))
    inotify = finding(diagnose(team.root, host), "inotify")
    assert inotify.status == "fail" and inotify.detail == "6 watches needed (3 roles), over max_user_watches 5"
    assert inotify.fix.startswith("raise it: `sysctl fs.inotify.max_user_watches=524288`")
    with pytest.raises(ConfigError) as refused:
        run_up(team.root, host=host)
    assert refused.value.exit_code == 2
    assert str(refused.value).startswith("inotify: 6 watches needed (3 roles), over max_user_watches 5; raise it")
    assert not (team.root / ".orchestrator" / "pid").exists()


def test_watches_held_by_this_users_other_programs_count(team: Project, tmp_path: Path) -> None:
    host = Host(proc=fake_proc(tmp_path / "a", max_watches=8000, held=[7000, 996]))
    inotify = finding(diagnose(team.root, host), "inotify")
    assert inotify.status == "fail", inotify
    assert (
        inotify.detail
        == "6 watches needed (3 roles), 7996 held by this user's processes, max_user_watches 8000: 4 left"
    )
    host = Host(proc=fake_proc(tmp_path / "b", max_watches=8000, held=[7000]))
    assert start_checks(load_config(team.root), host) == [
        Finding(
            "inotify",
            "warn",
            "6 watches needed (3 roles), 7000 held by this user's processes, max_user_watches 8000: 994 left to other programs",
            "raise it: `sysctl fs.inotify.max_user_watches=524288` (and in /etc/sysctl.d/ to keep it)",
        )
    ]
    host = Host(proc=fake_proc(tmp_path / "c", max_watches=8000, max_instances=2, held=[1, 1]))
    inotify = finding(diagnose(team.root, host), "inotify")
    assert inotify.status == "fail" and "hold 2 inotify instances, max_user_instances 2" in inotify.detail
    host = Host(proc=fake_proc(tmp_path / "d", max_watches=8000, held=[10]))
    assert finding(diagnose(team.root, host), "inotify").status == "ok"


def test_the_running_orchestrator_counts_as_the_teams_own_and_its_path_is_checked(
    team: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the team's orchestrator running (its pid file, its process in ``/proc``), the watches it holds are
    the team's, not another program's; and its PATH, which starts the agents, must find their program too."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "my-agent").write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    (bin_dir / "my-agent").chmod(0o755)
    monkeypatch.setenv("PATH", on_path(bin_dir))
    team.configure({"builder": {"command": ["my-agent"]}, "planner": {}, "reviewer": {}})
    proc = fake_proc(tmp_path / "proc", max_watches=8000, held=[500])
    fake_process(proc, 4243, [7000], cmdline=f"{sys.executable} -m orchestrator up --root {team.root}")
    (team.root / ".orchestrator").mkdir()
    (team.root / ".orchestrator" / "pid").write_text("4243\n")
    found = diagnose(team.root, Host(proc=proc))
    inotify = finding(found, "inotify")
    assert inotify.status == "ok", inotify
    assert (
        inotify.detail == "6 watches needed (3 roles), 500 held by this user's other processes, max_user_watches 8000"
    )
    (command,) = [f for f in found if f.check == "command" and f.role == "builder"]
    assert command.status == "fail", command
    assert command.detail.endswith("'my-agent' not found on the PATH of the running orchestrator (pid 4243)")
    assert command.fix.endswith("or restart the orchestrator from a shell whose PATH finds it")


def test_the_watchdog_watcher_needs_a_watch_per_folder(team: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ORCHESTRATOR_WATCHER=watchdog`` watches each role folder recursively: one watch per folder in it."""
    from orchestrator.ops.doctor import team as team_checks

    config = load_config(team.root)
    assert team_checks.watches_needed(config) == 6
    monkeypatch.setenv("ORCHESTRATOR_WATCHER", "watchdog")
    for folder in ("inbox", "archive", "archive/old"):
        (team.root / "memo" / "builder" / folder).mkdir(parents=True, exist_ok=True)
    # the role folder, the folders below it, and those `up` makes before it watches (inbox, active, archive,
    # failed, cancelled): builder has 3 below it and gets 3 more, planner and reviewer get all 5
    assert team_checks.watches_needed(config) == (1 + 3 + 3) + (1 + 5) * 2


def test_an_unreadable_limit_is_a_warning(team: Project, tmp_path: Path) -> None:
    inotify = finding(diagnose(team.root, Host(proc=tmp_path / "nothing")), "inotify")
    assert inotify.status == "warn" and "cannot read" in inotify.detail and "the team needs 6 watches" in inotify.detail


def statvfs(free_bytes: int, free_inodes: int = 1_000_000) -> Any:
    return lambda _path: os.statvfs_result((4096, 4096, 10**9, 0, free_bytes // 4096, 10**7, 0, free_inodes, 0, 255))


def test_a_full_disk_fails_and_stops_up_and_a_nearly_full_one_warns(team: Project) -> None:
    full = Host(statvfs=statvfs(50 * 1024**2))
    disk = finding(diagnose(team.root, full), "disk")
    assert disk.status == "fail" and disk.detail.startswith(f"50.0 MB free under {team.root}"), disk
    with pytest.raises(ConfigError, match=r"^disk: 50\.0 MB free under .*; free some space there"):
        run_up(team.root, host=full)
    assert finding(diagnose(team.root, Host(statvfs=statvfs(500 * 1024**2))), "disk").status == "warn"
    assert finding(diagnose(team.root, Host(statvfs=statvfs(10 * 1024**3, free_inodes=12))), "disk").status == "fail"
    assert finding(diagnose(team.root, Host(statvfs=statvfs(10 * 1024**3))), "disk").status == "ok"


def test_a_clock_before_this_version_fails_and_one_behind_the_last_run_warns(team: Project) -> None:
    early = Host(clock=ManualClock(datetime(2001, 1, 1, 12, 0).astimezone()))
    clock = finding(diagnose(team.root, early), "clock")
    assert clock.status == "fail" and "before this orchestrator existed" in clock.detail
    assert clock.fix.startswith("set the system clock")

    orch = team.up()
    team.drop("builder", "M-1.md")
    wait_for(lambda: team.folder("builder", "archive") == ["M-1.md"], what="M-1 archived")
    assert orch.stop() == 0
    now = datetime.now().astimezone()
    assert finding(diagnose(team.root, Host(clock=ManualClock(now))), "clock").status == "ok"
    behind = Host(clock=ManualClock(now - timedelta(hours=3)), installed=None)
    clock = finding(diagnose(team.root, behind), "clock")
    assert clock.status == "warn" and "before the last run recorded" in clock.detail, clock
    installed = now + timedelta(days=30)
    clock = finding(diagnose(team.root, Host(clock=ManualClock(now), installed=installed)), "clock")
    assert clock.status == "warn" and "before this orchestrator was installed" in clock.detail, clock


def test_the_time_zone_in_force_is_said_and_a_bad_tz_warns(team: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    team.configure({"builder": {}}, timezone="Asia/Tokyo")
    clock = finding(diagnose(team.root), "clock")
    assert clock.status == "ok" and "schedules use timezone Asia/Tokyo (UTC+0900 now)" in clock.detail
    team.configure({"builder": {}})
    monkeypatch.setenv("TZ", "Mars/Olympus_Mons")
    clock = finding(diagnose(team.root), "clock")
    assert clock.status == "warn" and clock.detail.startswith("TZ=Mars/Olympus_Mons names no zone here")
    for fine in ("Europe/Paris", ":UTC", f":{team.root / 'roles.yaml'}"):  # a file the C library reads
        monkeypatch.setenv("TZ", fine)
        assert finding(diagnose(team.root), "clock").status == "ok", fine


# ---------------------------------------------------------------- the database
def test_a_corrupt_database_fails_and_a_sound_one_passes(project: Project) -> None:
    project.configure()
    orch = project.up()
    project.drop("builder", "M-1.md")
    wait_for(lambda: project.folder("builder", "archive") == ["M-1.md"], what="M-1 archived")
    assert orch.stop() == 0
    db = project.root / ".orchestrator" / "state.db"
    code, findings, _ = doctor(project)
    assert code == 0 and one(findings, "database")["detail"] == f"{db} passes PRAGMA quick_check"

    # a page of the runs table overwritten: the file opens, the check finds the damage
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA journal_mode=DELETE")
        rows = [(f"{n:04d}-{'y' * 200}.md",) for n in range(300)]
        con.executemany("INSERT INTO memo_attempts (role, name, attempts) VALUES ('builder', ?, 1)", rows)
        root_page = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'memo_attempts'").fetchone()[0]
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with open(db, "r+b") as handle:
        handle.seek((root_page - 1) * page_size)
        handle.write(b"\xff" * page_size)
    code, findings, _ = doctor(project)
    found = one(findings, "database")
    assert code == 1 and found["status"] == "fail", found
    assert found["detail"].startswith(f"{db} "), found
    assert "sqlite3 state.db .recover" in found["fix"]

    db.write_bytes(b"this is not a database at all" * 100)
    code, findings, _ = doctor(project)
    found = one(findings, "database")
    assert code == 1 and found["detail"] == f"{db} is damaged: file is not a database", found


# ---------------------------------------------------------------- the real CLI (its auth status, offline)
def bundled_cli() -> Path | None:
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return path if path.is_file() and os.access(path, os.X_OK) else None


@pytest.mark.real_cli
def test_the_real_cli_logged_out_fails_and_with_an_api_key_in_the_roles_env_is_ok(
    project: Project, tmp_path: Path
) -> None:
    """The CLI claude-agent-sdk bundles, in a home of its own with no credentials: ``auth status`` reads only
    local files then (non-essential traffic off, the API pointed at a closed local port: nothing leaves)."""
    cli = bundled_cli()
    if cli is None:
        pytest.skip("claude-agent-sdk with its bundled Claude Code CLI is not installed")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "ANTHROPIC_API_KEY": "",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
    }
    project.configure({"writer": {"backend": "sdk", "cli_path": str(cli), "permission_mode": "acceptEdits"}})
    code, findings, _ = doctor(project, **env)
    command, login = one(findings, "command", "writer"), one(findings, "login", "writer")
    assert command["status"] == "ok" and "(Claude Code)" in command["detail"], command
    assert login["status"] == "fail" and login["detail"] == f"not logged in (`{cli} auth status` says loggedIn: false)"
    assert code == 1

    data = yaml.safe_load((project.root / "roles.yaml").read_text(encoding="utf-8"))
    data["roles"]["writer"]["env"] = {"ANTHROPIC_API_KEY": "test"}
    (project.root / "roles.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    code, findings, out = doctor(project, **env)
    assert code == 0, out
    assert one(findings, "login", "writer")["status"] == "ok"
    # asked of the real CLI, the same key makes it say it is logged in, by that key
    found = claude_backend.auth_status(str(cli), {**os.environ, **env, "ANTHROPIC_API_KEY": "test"})
    assert found.status == "ok" and found.detail == "logged in (api_key)"


def test_the_service_path_is_read_back_as_the_unit_wrote_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    root = tmp_path / "team"
    assert unit.installed_path(root) is None
    path = '/opt/my tools/bin:/x/100%/bin:/odd"quote\\back/bin:/usr/bin'
    spec = unit.UnitSpec(root, ["/usr/bin/orchestrator"], path, 60)
    written = unit.unit_dir() / unit.unit_name(root)
    written.parent.mkdir(parents=True)
    written.write_text(unit.render(spec), encoding="utf-8")
    assert unit.installed_path(root) == path


def test_a_paused_account_is_a_warning_naming_its_roles_and_its_reset(project: Project) -> None:
    """A usage limit's pause lives in the running orchestrator: the doctor asks it, and says none without one."""
    from orchestrator.config import load_config
    from orchestrator.ops.doctor import team

    project.configure()
    config = load_config(project.root)
    assert team.check_accounts(config).status == "ok"  # nothing runs here
    paused = {
        "team": {
            "until": "2026-12-02T14:10:00+00:00",
            "reason": "usage limit (five_hour)",
            "probe_at": None,
            "roles": ["builder"],
        }
    }
    found = team.check_accounts(config, lambda _config: {"paused": paused})
    assert found.status == "warn"
    assert found.detail == "paused: team: usage limit (five_hour) until 2026-12-02T14:10:00+00:00 (builder)"
    assert team.check_accounts(config, lambda _config: {"paused": {}}).status == "ok"


def test_a_ray_executor_without_ray_fails_config_check_and_doctor_as_it_fails_up(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: `config check` said "valid" and `doctor` found nothing, and `up` then refused (Ray is checked at its
    connection only). Run in the process, with Ray reported missing."""
    import orchestrator.agents.ray as ray_package
    from orchestrator.commands.configuration import cmd_config
    from orchestrator.ops.doctor import diagnose

    monkeypatch.setattr(ray_package, "ray_installed", lambda: False)
    project.configure({"builder": {}}, executor={"kind": "ray", "address": "127.0.0.1:1"})
    (finding,) = [f for f in diagnose(project.root) if f.check == "ray"]
    assert finding.status == "fail" and "needs the Ray package, which is not installed" in finding.detail
    with pytest.raises(ConfigError, match=r"needs the Ray package.*run `pip install 'orchestrator\[ray\]'`"):
        cmd_config(SimpleNamespace(config_command="check", root=project.root, json=True))


def test_config_check_of_a_damaged_database_prints_the_configuration(project: Project) -> None:
    """Defect (the review's): the executor record was read without a guard, so a damaged state.db made `config check`
    an internal error (exit 70); `doctor`'s `database` check is the one that says what is wrong with it."""
    from orchestrator.commands.configuration import cmd_config

    project.configure({"builder": {}})
    state = project.root / ".orchestrator"
    state.mkdir(exist_ok=True)
    (state / "state.db").write_bytes(b"not a database at all" * 100)
    assert cmd_config(SimpleNamespace(config_command="check", root=project.root, json=True)) == 0
