"""Fail closed: ``recovery: adopt`` without a usable keeper refuses to start, and every start says the mode in force.

The keeper is looked for once per process (``keeper.find``); here it is pointed at
files that are not a keeper, in the process, and switched off for a real ``up``
(``ORCHESTRATOR_KEEPER=off``). A package built without a C compiler is tested as
installed in ``test_install.py``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import Project, wait_for
from orchestrator.agents import keeper
from orchestrator.app import check_recovery
from orchestrator.config import load_config
from orchestrator.core.errors import ConfigError


@pytest.fixture
def keeper_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], keeper.Found]]:
    """Point the keeper's location at a file and look for it again; the real one is looked for after the test."""

    def point(path: Path) -> keeper.Found:
        monkeypatch.setattr(keeper, "BINARY", path)
        keeper.find.cache_clear()
        return keeper.find()

    yield point
    keeper.find.cache_clear()


def refusal(project: Project) -> str:
    with pytest.raises(ConfigError) as caught:
        check_recovery(load_config(project.root))
    assert caught.value.exit_code == 2
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def test_the_packaged_keeper_is_found_and_passes_its_self_check() -> None:
    found = keeper.find()
    assert found == keeper.Found(keeper.BINARY), found.problem
    assert keeper.self_check(keeper.BINARY) is None


@pytest.mark.os_level
def test_a_missing_keeper_refuses_adopt_in_one_line_with_both_ways_out(
    project: Project, tmp_path: Path, keeper_at: Callable[[Path], keeper.Found]
) -> None:
    project.configure()
    missing = tmp_path / "lib" / "orchestrator-keeper"
    assert keeper_at(missing) == keeper.Found(None, f"there is no keeper binary at {missing} {keeper.NO_COMPILER}")
    message = refusal(project)
    assert message.startswith(f"{project.root / 'roles.yaml'}: recovery: adopt needs the keeper, and there is no ")
    assert "would be run again" in message  # what it would cost
    assert "with a C compiler present" in message and "set `recovery: restart`" in message  # the two ways out


def test_with_recovery_restart_no_keeper_is_needed(
    project: Project, tmp_path: Path, keeper_at: Callable[[Path], keeper.Found]
) -> None:
    project.configure(recovery="restart")
    keeper_at(tmp_path / "nothing")
    check_recovery(load_config(project.root))
    mode = keeper.recovery_mode("restart", "local")
    assert mode.line == "recovery: restart (no keeper: runs are repeated after a crash)"


def test_a_keeper_that_is_not_executable_is_refused(
    project: Project, tmp_path: Path, keeper_at: Callable[[Path], keeper.Found]
) -> None:
    project.configure()
    copy = tmp_path / "orchestrator-keeper"
    shutil.copyfile(keeper.BINARY, copy)
    copy.chmod(0o644)
    assert keeper_at(copy).problem == f"the keeper {copy} is not executable"
    assert f"and the keeper {copy} is not executable:" in refusal(project)


@pytest.mark.os_level
def test_a_keeper_for_another_machine_fails_its_self_check(
    project: Project, tmp_path: Path, keeper_at: Callable[[Path], keeper.Found]
) -> None:
    project.configure()
    foreign = tmp_path / "orchestrator-keeper"
    foreign.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(200))  # an ELF header this kernel cannot run
    foreign.chmod(0o755)
    found = keeper_at(foreign)
    assert found.binary is None and found.problem.startswith(f"the keeper {foreign} cannot be started ("), found
    assert found.problem in refusal(project)


def test_a_keeper_that_runs_but_records_nothing_fails_its_self_check(
    project: Project, tmp_path: Path, keeper_at: Callable[[Path], keeper.Found]
) -> None:
    project.configure()
    liar = tmp_path / "orchestrator-keeper"
    liar.write_text("#!/bin/sh\necho 'not a keeper' >&2\nexit 3\n")
    liar.chmod(0o755)
    found = keeper_at(liar)
    assert found == keeper.Found(None, f"the keeper {liar} fails its self-check (exit status 3: not a keeper)")
    assert found.problem in refusal(project)


@pytest.mark.os_level
def test_up_without_a_keeper_exits_2_with_the_one_line(project: Project) -> None:
    project.configure()
    orch = project.up(ORCHESTRATOR_KEEPER="off", wait_ready=False)
    assert orch.wait() == 2
    lines = orch.output.strip().splitlines()
    assert len(lines) == 1, orch.output
    assert "recovery: adopt needs the keeper, and ORCHESTRATOR_KEEPER=off is set:" in lines[0]
    assert "unset ORCHESTRATOR_KEEPER, or set `recovery: restart`" in lines[0]
    assert not (project.root / ".orchestrator" / "pid").exists()


def test_up_and_status_say_the_keeper_in_force(project: Project) -> None:
    project.configure()
    orch = project.up()
    orch.wait_output("orchestrator up:")
    line = next(x for x in orch.output.splitlines() if "orchestrator up:" in x)
    assert line.endswith(f"; recovery: adopt (keeper {keeper.BINARY})"), line
    recovery = project.status()["recovery"]
    assert recovery == {
        "mode": "adopt",
        "keeper": str(keeper.BINARY),
        "executor": "local",
        "summary": f"recovery: adopt (keeper {keeper.BINARY})",
    }
    shown = project.cli("status")
    assert f"recovery: adopt (keeper {keeper.BINARY})" in shown.stdout, shown.stdout
    assert orch.stop() == 0


def test_recovery_restart_without_a_keeper_runs_and_says_so(project: Project) -> None:
    project.configure(recovery="restart")
    orch = project.up(ORCHESTRATOR_KEEPER="off")
    orch.wait_output("recovery: restart (no keeper: runs are repeated after a crash)")
    project.drop("builder", "M-1.md", {"id": "M-1"})
    wait_for(lambda: project.folder("builder", "archive") == ["M-1.md"], what="M-1 archived")
    assert project.status()["recovery"]["keeper"] is None
    assert orch.stop() == 0
