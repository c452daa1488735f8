"""A change of ``executor:`` across a restart while a run is under way: refused, so its memo never runs twice.

Real processes: ``up`` is killed with SIGKILL while its stand-in agent runs under its keeper, and started again
under ``executor: ray``. No cluster is needed: the refusal comes before any connection, and a start it lets through
meets an address nobody serves (exit 30). The other way round (a run on Ray, a start here) is in
``test_ray_restart.py``, on a real cluster.
"""

from __future__ import annotations

import signal

import pytest

from conftest import Project, pid_alive, wait_for

pytestmark = pytest.mark.os_level
NOBODY = {"kind": "ray", "address": "127.0.0.1:1"}  # a Ray start that gets past the check fails there, at once


def test_a_start_on_ray_is_refused_while_a_run_started_here_is_under_way_and_local_takes_it_back(
    project: Project,
) -> None:
    project.configure({"builder": {}})
    gate = project.root / "gate"
    orch = project.up()
    project.drop("builder", "A-1.md", {"id": "A-1", "agent": {"until": str(gate)}})
    (record,) = wait_for(project.records, what="the agent started")
    orch.signal(signal.SIGKILL)
    orch.wait()

    project.configure({"builder": {}}, executor=NOBODY)
    checked = project.cli("config", "check")  # the same refusal, before anyone tries (defect: it said "valid")
    assert checked.returncode == 2 and "run 1 (builder: A-1.md) is still under way here" in checked.stderr, checked
    refused = project.cli("up", "--plain")
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.splitlines()
    assert "roles.yaml: executor: ray, but the last `up` started with executor: local" in line, line
    assert "run 1 (builder: A-1.md) is still under way here" in line, line
    assert "`orchestrator up --rerun-unfinished`" in line and "Traceback" not in refused.stderr
    assert pid_alive(record["pid"]) and project.folder("builder", "active") == ["A-1.md"]  # nothing touched

    project.configure({"builder": {}})  # the way out: the executor that started it takes it back
    orch = project.up()
    orch.wait_output("adopted its live agent")
    gate.touch()
    wait_for(lambda: project.folder("builder", "archive") == ["A-1.md"], what="A-1 archived")
    assert orch.stop() == 0
    assert len(project.records()) == 1  # run once

    project.configure({"builder": {}}, executor=NOBODY)  # nothing under way: the switch is the person's to make
    switched = project.cli("up", "--plain")
    assert switched.returncode == 30 and "cannot reach the Ray cluster" in switched.stderr, switched.stderr


def test_up_rerun_unfinished_starts_under_the_new_executor_and_says_what_it_leaves(project: Project) -> None:
    project.configure({"builder": {}})
    orch = project.up()
    for name in ("B-1.md", "B-2.md"):
        project.drop("builder", name, {"agent": {"sleep": 60}})
    wait_for(lambda: len(project.records()) == 2, what="two agents started")
    orch.signal(signal.SIGKILL)
    orch.wait()

    project.configure({"builder": {}}, executor=NOBODY)
    refused = project.cli("up", "--plain")
    assert refused.returncode == 2 and "runs 1 (builder: B-1.md), 2 (builder: B-2.md) are" in refused.stderr
    started = project.cli("up", "--plain", "--rerun-unfinished")
    assert started.returncode == 30, started.stderr  # past the check, to the cluster nobody serves
    assert "warning: up --rerun-unfinished: runs 1 (builder: B-1.md), 2 (builder: B-2.md) of executor: local" in (
        started.stdout + started.stderr
    )
    # that start failed before its recovery took the runs over: they are still local ones, and local takes them back
    project.configure({"builder": {}})
    orch = project.up()
    wait_for(lambda: orch.output.count("adopted its live agent") == 2, what=f"both taken back:\n{orch.output}")
    orch.signal(signal.SIGKILL)
    orch.wait()
