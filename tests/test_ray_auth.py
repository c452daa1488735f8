"""Ray's token authentication: a memo runs on a cluster that requires a token, and a missing token is found first.

Marked ``ray``: one node with ``RAY_AUTH_MODE=token`` and a token of its own (about 15-20 s to start). The
orchestrator sends the same token from ``RAY_AUTH_TOKEN`` (a wrong one is refused: exit 30); ``doctor`` and
``up`` with the mode on and no token anywhere (an empty home) say so in one line.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Project, wait_for

pytest.importorskip("ray")

from ray_cluster import LocalCluster  # noqa: E402

pytestmark = pytest.mark.ray
START = 90.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    nodes = LocalCluster(second_node=False, env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex})
    yield nodes
    left = nodes.stop()
    assert left == [], f"Ray processes still alive after the cluster was stopped: {left}"


def configure(project: Project, cluster: LocalCluster) -> None:
    env = {"STANDIN_RECORD": str(project.record)}
    project.configure({"builder": {"env": env}}, executor={"kind": "ray", "address": cluster.address})


def test_a_memo_runs_on_a_cluster_with_token_authentication(project: Project, cluster: LocalCluster) -> None:
    configure(project, cluster)
    orch = project.up(**cluster.env)
    project.drop("builder", "t.md", {"agent": {"say": "authenticated"}})
    wait_for(lambda: project.folder("builder", "archive") == ["t.md"], START, "t.md archived")
    assert orch.stop() == 0, orch.output
    (run,) = json.loads(project.cli("history", "--json").stdout)["runs"]
    assert run["state"] == "succeeded" and run["node"]


def test_doctor_and_up_say_when_the_token_is_missing(project: Project, cluster: LocalCluster, tmp_path: Path) -> None:
    configure(project, cluster)
    home = tmp_path / "home"  # no ~/.ray/auth_token there
    home.mkdir()
    no_token = {**cluster.env, "RAY_AUTH_TOKEN": "", "HOME": str(home)}
    doctor = project.cli("doctor", "--json", **no_token)
    assert doctor.returncode != 0
    (finding,) = [f for f in json.loads(doctor.stdout) if f["check"] == "ray-token"]
    assert finding["status"] == "fail" and "RAY_AUTH_MODE=token is set, but there is no token" in finding["detail"]
    checked = project.cli("config", "check", **no_token)  # defect: it said "valid", and `up` refused
    assert checked.returncode == 2 and "there is no token" in checked.stderr, checked.stderr
    up = project.up(wait_ready=False, **no_token)
    assert up.wait(START) == 2
    lines = up.output.strip().splitlines()
    assert len(lines) == 1 and "there is no token" in lines[0], up.output
    assert "Traceback" not in up.output
    with_token = project.cli("doctor", "--json", **cluster.env)
    (finding,) = [f for f in json.loads(with_token.stdout) if f["check"] == "ray-token"]
    assert finding["status"] == "ok"


def test_the_cluster_refuses_a_wrong_token_and_up_says_so_in_one_line(project: Project, cluster: LocalCluster) -> None:
    # what makes the first test mean something: this cluster does check the token
    configure(project, cluster)
    up = project.up(wait_ready=False, **{**cluster.env, "RAY_AUTH_TOKEN": uuid.uuid4().hex})
    assert up.wait(START) == 30
    lines = up.output.strip().splitlines()
    assert len(lines) == 1 and "refused this orchestrator's token" in lines[0], up.output
