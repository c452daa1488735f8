"""`orchestrator service`: the systemd user unit of a root, and the systemctl calls that install and remove it.

The unit is read back by systemd's own rules and, where `systemd-analyze` exists, verified by it; the calls
go to a recording stand-in for systemctl, journalctl and loginctl first on PATH (the one faked boundary).
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import HERE, Project
from orchestrator.ops.unit import unit_name

FAKE = HERE / "agents" / "fake_systemd.py"


def _home(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}


def _fake_tools(tmp_path: Path) -> Path:
    """systemctl, journalctl and loginctl that record their argv."""
    folder = tmp_path / "fake bin"
    folder.mkdir(exist_ok=True)
    for tool in ("systemctl", "journalctl", "loginctl"):
        path = folder / tool
        path.write_text(f"#!{sys.executable}\nexec(open({str(FAKE)!r}).read())\n", encoding="utf-8")
        path.chmod(0o755)
    return folder


def _unit_lines(text: str) -> dict[str, str]:
    """Each ``Key=value`` of a unit (the last one wins), comments left out."""
    lines = [line for line in text.splitlines() if "=" in line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def _systemd_split(value: str) -> list[str]:
    """An ``ExecStart=`` value split as systemd.service(5) and systemd.syntax(7) say: words split at blanks,
    double quotes group, C escapes, then ``%%`` is ``%`` and, in the arguments, ``$$`` is ``$``."""
    words: list[str] = []
    current: str | None = None
    i = 0
    quoted = False
    while i < len(value):
        char = value[i]
        if char == "\\":
            current = (current or "") + {"n": "\n", "t": "\t"}.get(value[i + 1], value[i + 1])
            i += 2
            continue
        if char == '"':
            quoted = not quoted
            current = current or ""
        elif char.isspace() and not quoted:
            if current is not None:
                words.append(current)
            current = None
        else:
            current = (current or "") + char
        i += 1
    if current is not None:
        words.append(current)
    words = [word.replace("%%", "%") for word in words]
    for word in words[1:]:
        assert not re.search(r"(?<!\$)(\$\$)*\$[A-Za-z_{]", word), f"systemd would substitute a variable in {word!r}"
    return [words[0], *(word.replace("$$", "$") for word in words[1:])]


def _team(root: Path, **roles: dict[str, Any]) -> Project:
    root.mkdir(parents=True, exist_ok=True)
    project = Project(root)
    project.configure(roles or {"builder": {}})
    return project


def _console_script(folder: Path) -> Path:
    """An `orchestrator` program as pip installs one: a script that calls `orchestrator.cli:main`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "orchestrator"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nfrom orchestrator.cli import main\nsys.exit(main())\n", encoding="utf-8"
    )
    script.chmod(0o755)
    return script


def _dry_run(project: Project, program: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(program), "service", "install", "--dry-run", "--root", str(project.root)],
        capture_output=True,
        text=True,
        env=project.env(**env),
        timeout=60,
    )


def test_the_unit_keeps_paths_with_spaces_and_specials_whole(tmp_path: Path) -> None:
    project = _team(tmp_path / "a team $HOME 100%", builder={"timeout": "2h", "grace": "20s"}, pm={})
    program = _console_script(tmp_path / "my bin")
    result = _dry_run(project, program, PATH=f"/opt/with space/bin{os.pathsep}/usr/bin", **_home(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    name = unit_name(project.root)
    assert re.fullmatch(r"orchestrator-a-team-HOME-100-[0-9a-f]{8}\.service", name)
    assert result.stdout.startswith(f"# {tmp_path / 'home' / '.config' / 'systemd' / 'user' / name}\n")
    keys = _unit_lines(result.stdout)
    assert _systemd_split(keys["ExecStart"]) == [str(program), "up", "--plain", "--root", str(project.root)]
    assert keys["WorkingDirectory"].replace("%%", "%") == str(project.root)
    # the PATH as captured, with the orchestrator's own folder first
    assert _systemd_split(keys["Environment"]) == [f"PATH={program.parent}:/opt/with space/bin:/usr/bin"]
    assert keys["KillMode"] == "process"
    assert keys["Restart"] == "on-failure"
    assert keys["RestartPreventExitStatus"] == "1 2 3 5 70"
    assert keys["TimeoutStopSec"] == f"{7200 + 20 + 30}s"  # the longest timeout + its grace + the margin
    assert keys["WantedBy"] == "default.target"
    # nothing was written, nothing was run
    assert not (tmp_path / "home" / ".config").exists()
    assert "#   systemctl --user enable --now " + name in result.stdout


def test_a_second_root_of_the_same_name_gets_its_own_unit(tmp_path: Path) -> None:
    assert unit_name(tmp_path / "one" / "team") != unit_name(tmp_path / "two" / "team")
    assert unit_name(Path("/")).startswith("orchestrator-team-")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    project = _team(tmp_path / "a team $HOME 100%")
    program = _console_script(tmp_path / "my bin")
    result = _dry_run(project, program, **_home(tmp_path))
    assert result.returncode == 0, result.stderr
    unit = tmp_path / unit_name(project.root)
    unit.write_text(result.stdout, encoding="utf-8")  # all the dry run prints besides the unit is comments
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    verify = subprocess.run(
        ["systemd-analyze", "--user", "verify", str(unit)],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        timeout=60,
    )
    said = verify.stdout + verify.stderr
    if verify.returncode != 0 and unit.name not in said:
        pytest.skip(f"systemd-analyze cannot verify user units here: {said.strip()}")
    # it exits 0 even after a setting it ignored ("Failed to parse ..., ignoring"): every complaint names the unit
    assert verify.returncode == 0 and unit.name not in said, said


def test_install_writes_the_unit_and_enables_it_and_uninstall_removes_it(tmp_path: Path) -> None:
    project = _team(tmp_path / "team")
    fakes = _fake_tools(tmp_path)
    record = tmp_path / "calls.jsonl"
    env = {**_home(tmp_path), "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}", "FAKE_SYSTEMD_RECORD": str(record)}
    name = unit_name(project.root)
    path = tmp_path / "home" / ".config" / "systemd" / "user" / name

    def calls() -> list[list[str]]:
        found = (
            [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()] if record.exists() else []
        )
        record.unlink(missing_ok=True)
        return found

    installed = project.cli("service", "install", **env)
    assert installed.returncode == 0, installed.stderr
    assert path.is_file()
    assert _unit_lines(path.read_text(encoding="utf-8"))["KillMode"] == "process"
    user = getpass.getuser()
    assert calls() == [
        ["systemctl", "--user", "show-environment"],
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", name],
        ["loginctl", "show-user", user, "-p", "Linger"],
    ]
    assert f"wrote {path}" in installed.stdout
    assert f"loginctl enable-linger {user}" in installed.stdout  # Linger=no: it says what to run
    lingering = project.cli("service", "install", FAKE_SYSTEMD_LINGER="yes", **env)
    assert lingering.returncode == 0 and "enable-linger" not in lingering.stdout
    calls()

    status = project.cli("service", "status", **env)
    assert status.returncode == 0, status.stderr
    assert "active (running)" in status.stdout
    assert calls()[-1] == ["systemctl", "--user", "status", "--no-pager", name]
    logs = project.cli("service", "logs", "-n", "5", **env)
    assert logs.returncode == 0, logs.stderr
    assert calls() == [["journalctl", "--user", "-u", name, "-n", "5"]]

    removed = project.cli("service", "uninstall", **env)
    assert removed.returncode == 0, removed.stderr
    assert not path.exists()
    assert calls() == [
        ["systemctl", "--user", "show-environment"],
        ["systemctl", "--user", "disable", "--now", name],
        ["systemctl", "--user", "daemon-reload"],
    ]
    nothing = project.cli("service", "uninstall", **env)
    assert nothing.returncode == 0 and "nothing to do" in nothing.stdout
    assert calls() == []
    gone = project.cli("service", "status", **env)
    assert gone.returncode == 1 and "no service is installed" in gone.stderr


def test_a_failing_systemctl_is_one_line_naming_the_command(tmp_path: Path) -> None:
    project = _team(tmp_path / "team")
    fakes = _fake_tools(tmp_path)
    env = {
        **_home(tmp_path),
        "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}",
        "FAKE_SYSTEMD_RECORD": str(tmp_path / "calls.jsonl"),
        "FAKE_SYSTEMD_FAIL": "enable",
    }
    result = project.cli("service", "install", **env)
    assert result.returncode == 1
    name = unit_name(project.root)
    assert result.stderr.splitlines() == [
        f"orchestrator: `systemctl --user enable --now {name}` failed (exit 1): Failed to enable unit: Access denied"
    ]


def test_without_systemd_it_says_so_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    project = _team(tmp_path / "team")
    empty = tmp_path / "no tools"
    empty.mkdir()
    unit = tmp_path / "home" / ".config" / "systemd" / "user" / unit_name(project.root)

    def refused(*command: str, **env: str) -> str:
        result = project.cli("service", *command, **_home(tmp_path), **env)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1, lines
        return lines[0]

    assert refused("install", PATH=str(empty)).startswith("orchestrator: systemd is not available here (no systemctl")
    assert not unit.exists()
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\n", encoding="utf-8")  # uninstall and status act on an installed unit
    for command in ("uninstall", "status", "logs"):
        assert refused(command, PATH=str(empty)).startswith("orchestrator: systemd is not available here (no ")
    assert unit.read_text(encoding="utf-8") == "[Service]\n"

    # systemctl is there, but no user manager answers (a container, `su` without a login)
    unit.unlink()
    line = refused(
        "install",
        PATH=f"{_fake_tools(tmp_path)}{os.pathsep}{os.environ['PATH']}",
        FAKE_SYSTEMD_RECORD=str(tmp_path / "calls.jsonl"),
        FAKE_SYSTEMD_FAIL="show-environment",
    )
    assert line == (
        "orchestrator: no systemd user manager answers here (systemctl --user: Failed to connect to bus: No medium "
        "found): log in through a session that starts one (ssh or a desktop login, not su or a container shell)"
    )
    assert not unit.exists()


def test_install_refuses_a_team_that_could_not_start(tmp_path: Path) -> None:
    project = _team(tmp_path / "team", builder={"command": ["no-such-agent-program"]})
    result = project.cli("service", "install", "--dry-run", **_home(tmp_path))
    assert result.returncode == 2
    assert "roles.builder.command: 'no-such-agent-program' not found on PATH" in result.stderr
    assert result.stdout == ""


def test_a_program_path_systemd_cannot_start_is_refused(tmp_path: Path) -> None:
    project = _team(tmp_path / "team")
    program = _console_script(tmp_path / "it's here")
    result = _dry_run(project, program, **_home(tmp_path))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"orchestrator: {program}: systemd starts only a program with an absolute path free of quotes, "
        "backslashes, dollars and control characters; install the orchestrator under such a path"
    ]
