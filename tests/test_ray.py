"""The Ray executor against a real local Ray cluster: a head and a second node, started once for this module.

Marked ``ray``: starting the cluster takes about 20-30 s on a loaded 2-core
machine, each test 5-20 s after that (the orchestrator's own start includes
importing Ray and joining the cluster); the three sdk tests (the fake Claude CLI as
``cli_path``) add about 30 s. Everything runs on this machine, so
"on the worker" pids are checked here; the cluster is stopped at the end and
every process it started is checked dead.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import Orchestrator, Project, dead, wait_for

pytest.importorskip("ray")

from ray_cluster import ENV, LocalCluster  # noqa: E402

pytestmark = pytest.mark.ray
START = 60.0  # an orchestrator's first start on Ray: import, join, and the first worker's start


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    nodes = LocalCluster()
    yield nodes
    left = nodes.stop()
    assert left == [], f"Ray processes still alive after the cluster was stopped: {left}"


def configure(project: Project, cluster: LocalCluster, roles: dict[str, dict[str, Any]], **executor: Any) -> None:
    """Every role's env carries the stand-in's record files: a role's env is what travels to the worker."""
    env = {"STANDIN_RECORD": str(project.record), "STANDIN_ENDS": str(project.root / "ends.jsonl")}
    for settings in roles.values():
        settings.setdefault("env", {}).update(env)
    project.configure(roles, executor={"kind": "ray", "address": cluster.address, **executor})


def records(project: Project, name: str) -> list[dict[str, Any]]:
    return [r for r in project.records() if Path(r["memo"] or "").name == name]


def ends(project: Project) -> list[dict[str, Any]]:
    path = project.root / "ends.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def history(project: Project) -> list[dict[str, Any]]:
    result = project.cli("history", "--json")
    assert result.returncode == 0, result.stderr
    runs: list[dict[str, Any]] = json.loads(result.stdout)["runs"]
    return runs


def on_a_worker(project: Project, memo: str) -> tuple[dict[str, Any], psutil.Process, psutil.Process]:
    """The first attempt of ``memo`` once its agent runs: its record, its process, and the Ray worker (its wrapper's
    process) that started it."""
    (first,) = wait_for(lambda: records(project, memo), START, "attempt 1 on a worker")
    agent = psutil.Process(first["pid"])
    worker = agent.parent()
    assert worker is not None and "orchestrator" not in " ".join(worker.cmdline())  # the Ray worker, not the head
    return first, agent, worker


def gone(pid: int) -> bool:
    """No such process, or a zombie (its parent has not reaped it yet)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stop(orch: Orchestrator) -> None:
    assert orch.stop() == 0, orch.output


def test_a_memo_runs_on_a_worker_is_archived_once_and_status_and_history_show_the_node(
    project: Project, cluster: LocalCluster
) -> None:
    gate = project.root / "gate"
    configure(project, cluster, {"builder": {}})
    orch = project.up(**ENV)
    project.drop("builder", "a.md", {"id": "A-1", "agent": {"say": "hello from the worker", "until": str(gate)}})
    (record,) = wait_for(lambda: records(project, "a.md"), START, "the agent to start on a worker")
    assert not record["memo"].startswith(str(project.root))  # its memo is a copy the task carried, not a shared file
    status = wait_for(
        lambda: (lambda s: s if s["nodes"] and s["runs"][0]["state"] == "running" else None)(project.status()),
        what="a running run with its node",
    )
    (run,) = status["runs"]
    node = status["nodes"][str(run["run_id"])]
    assert run["pid"] == record["pid"] and "/" in node  # ip/node-id
    shown = project.cli("status", COLUMNS="250")  # wide enough that no cell wraps
    assert f"{record['pid']} on {node}" in shown.stdout, shown.stdout
    gate.touch()
    wait_for(lambda: project.folder("builder", "archive") == ["a.md"], what="a.md archived")
    log = (project.root / ".orchestrator" / "logs").glob("*builder*")
    assert "hello from the worker (attempt 1)" in "".join(p.read_text() for p in log)  # streamed back to the head
    (done,) = history(project)
    assert done["state"] == "succeeded" and done["node"] == node and done["attempt"] == 1
    stop(orch)
    assert len(records(project, "a.md")) == 1


def test_per_role_caps_hold_under_a_flood_ours_and_rays_custom_resources(
    project: Project, cluster: LocalCluster
) -> None:
    # reviewer: our own cap (max_concurrent 1); builder: only Ray's custom resource caps it (the node has 2)
    configure(
        project,
        cluster,
        {
            "builder": {"resources": {"cpu": 0.5, "custom": {"role_builder": 1}, "node_labels": {"pool": "builders"}}},
            "reviewer": {"max_concurrent": 1, "resources": {"cpu": 0.5}},
        },
    )
    orch = project.up(**ENV)
    for i in range(6):
        project.drop("builder", f"b{i}.md", {"agent": {"sleep": 0.6}})
    for i in range(3):
        project.drop("reviewer", f"r{i}.md", {"agent": {"sleep": 0.6}})
    wait_for(lambda: len(project.folder("builder", "archive")) == 6, 90, "the builders archived")
    wait_for(lambda: len(project.folder("reviewer", "archive")) == 3, 30, "the reviewers archived")
    stop(orch)

    def most_at_once(role: str) -> int:
        spans = [(e["start"], e["end"]) for e in ends(project) if e["role"] == role]
        return max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)

    assert most_at_once("builder") <= 2 and most_at_once("reviewer") == 1
    assert len(project.records()) == 9  # each memo ran once


def test_cancel_returns_when_the_tree_on_the_worker_is_dead_grandchild_and_setsid_escapee_too(
    project: Project, cluster: LocalCluster
) -> None:
    configure(project, cluster, {"builder": {"grace": "0.5s"}})
    orch = project.up(**ENV)
    project.drop(
        "builder",
        "s.md",
        {"id": "S-1", "agent": {"sleep": 120, "ignore_term": True, "grandchild": True, "setsid": True}},
    )
    (record,) = wait_for(lambda: records(project, "s.md"), START, "the agent to start on a worker")
    tree = {pid: psutil.Process(pid).create_time() for pid in [record["pid"], *record["children"]]}
    escapee = record["children"][1]
    wait_for(lambda: os.getsid(escapee) == escapee, what="the setsid grandchild in its own session")

    result = project.cli("cancel", "S-1", "--json")

    assert result.returncode == 0, result.stderr
    assert [pid for pid, created in tree.items() if not dead(pid, created)] == []  # dead when cancel returned
    answer = json.loads(result.stdout)
    assert set(tree) <= set(answer["pids"]) and answer["escalated"] is True and answer["survivors"] == []
    assert project.folder("builder", "cancelled") == ["s.md"]
    assert "reported the tree dead" in orch.output
    stop(orch)


def test_cancelled_attempts_give_their_resources_back_so_more_cancels_than_the_cluster_holds_each_start(
    project: Project, cluster: LocalCluster
) -> None:
    # each attempt takes one of the second node's 2 role_builder: a cancelled attempt's actor that is not let go
    # keeps its unit, and the third memo could never be placed
    builder = {"grace": "0.5s", "resources": {"cpu": 0.5, "custom": {"role_builder": 1}}}
    configure(project, cluster, {"builder": builder})
    orch = project.up(**ENV)
    for i in range(4):
        project.drop("builder", f"c{i}.md", {"id": f"C-{i}", "agent": {"sleep": 120}})
        wait_for(lambda i=i: records(project, f"c{i}.md"), START if i == 0 else 30, f"the agent of c{i}.md to start")
        result = project.cli("cancel", f"C-{i}")
        assert result.returncode == 0, result.stderr
    assert project.folder("builder", "cancelled") == [f"c{i}.md" for i in range(4)]
    stop(orch)
    with sqlite3.connect(project.root / ".orchestrator" / "state.db") as db:
        codes = [code for (code,) in db.execute("SELECT exit_code FROM attempts WHERE outcome = 'cancelled'")]
    assert len(codes) == 4 and None not in codes, codes  # each exit was told before its stop ended the run


def test_a_worker_killed_mid_run_fails_the_attempt_which_is_retried_once_and_its_orphan_is_killed(
    project: Project, cluster: LocalCluster
) -> None:
    configure(project, cluster, {"builder": {"retry": {"max": 2, "backoff": ["0.2s"]}}})
    orch = project.up(**ENV)
    project.drop("builder", "k.md", {"agent": {"sleep_by_attempt": {1: 120, 2: 0.2}}})
    first, orphan, worker = on_a_worker(project, "k.md")
    worker.send_signal(signal.SIGKILL)

    wait_for(lambda: project.folder("builder", "archive") == ["k.md"], 60, "k.md archived after the retry")
    assert [r["attempt"] for r in records(project, "k.md")] == [1, 2]
    wait_for(lambda: not orphan.is_running() or orphan.status() == psutil.STATUS_ZOMBIE, what="the orphan killed")
    orch.wait_output("killed orphaned agent processes")
    assert str(first["pid"]) in orch.output
    assert "attempt 1 failed: the Ray worker" in orch.output
    stop(orch)
    (done,) = history(project)
    assert done["state"] == "succeeded" and done["attempt"] == 2


def test_a_result_after_a_simulated_partition_is_ignored_and_the_memo_archived_once(
    project: Project, cluster: LocalCluster
) -> None:
    # the partition: the wrapper says nothing (no beat for 30 s) while the head gives up after 3 s of silence (the
    # second attempt's agent must start and end within that, on a loaded machine)
    configure(project, cluster, {"builder": {"retry": {"max": 1, "backoff": ["0.1s"]}}}, lost_after="3s", beat="30s")
    orch = project.up(**ENV)
    project.drop("builder", "p.md", {"agent": {"sleep_by_attempt": {1: 8, 2: 0}}})
    wait_for(lambda: project.folder("builder", "archive") == ["p.md"], START, "p.md archived by attempt 2")
    orch.wait_output("came after the head gave this attempt up; ignored", 30)
    assert "attempt 1 failed: no word from the wrapper" in orch.output
    assert [r["attempt"] for r in records(project, "p.md")] == [1, 2]
    assert project.folder("builder", "archive") == ["p.md"] and project.folder("builder", "failed") == []
    first = records(project, "p.md")[0]
    assert gone(first["pid"]), "the silent wrapper stopped its agent when asked"
    stop(orch)
    (done,) = history(project)
    assert done["state"] == "succeeded" and done["attempt"] == 2


def test_a_hung_wrapper_given_up_has_its_actor_killed_and_its_agent_swept_before_the_retry_runs(
    project: Project, cluster: LocalCluster
) -> None:
    """A wrapper that hangs (SIGSTOP: Ray still reaches its node) hears no stop: after ``lost_after`` and a bounded
    wait for its word, the head kills its actor through Ray and a task on its node kills the agent left behind, then
    it ends the attempt, so the retry (on the same node: the role's ``node_labels``) starts only once that agent is
    dead. Before, the hung wrapper's agent ran on beside the retry's for ``reconnect_within``."""
    pinned = {"cpu": 0.5, "node_labels": {"pool": "builders"}}
    roles = {"builder": {"resources": pinned, "retry": {"max": 1, "backoff": ["0.1s"]}}}
    configure(project, cluster, roles, lost_after="3s", reconnect_within="2m")
    orch = project.up(**ENV)
    project.drop("builder", "h.md", {"agent": {"sleep_by_attempt": {1: 120, 2: 0.2}}})
    first, agent, wrapper = on_a_worker(project, "h.md")
    wrapper.suspend()
    try:
        wait_for(lambda: project.folder("builder", "archive") == ["h.md"], 90, "h.md archived by attempt 2")
        assert [r["attempt"] for r in records(project, "h.md")] == [1, 2]
        orch.wait_output("attempt 1 failed: no word from the wrapper")
        lines = orch.output.splitlines()
        swept = next(i for i, line in enumerate(lines) if "killed what the wrapper left: " in line)
        assert str(first["pid"]) in lines[swept].split("killed what the wrapper left: ", 1)[1], lines[swept]
        retry = next(i for i, line in enumerate(lines) if "(run 1, attempt 2)" in line)
        assert swept < retry, "the hung wrapper's agent was killed before the retry started"
        assert dead(agent.pid, agent.create_time())
        wait_for(lambda: dead(wrapper.pid, wrapper.create_time()), 30, "the hung wrapper's worker killed by Ray")
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            wrapper.resume()
    stop(orch)


def test_a_cancel_of_a_hung_wrapper_kills_its_actor_and_a_task_on_its_node_kills_its_agent(
    project: Project, cluster: LocalCluster
) -> None:
    """A wrapper that hangs (SIGSTOP) never hears the stop: after the bound, the head kills its actor through Ray, and
    a task pinned to its node kills the agent it left before the cancel answers. Before, that agent ran on until the
    next wrapper started on its node, for this run never, and the receipt named it a survivor."""
    configure(project, cluster, {"builder": {"grace": "0.5s", "retry": {"max": 0}}})
    orch = project.up(**ENV)
    project.drop("builder", "k.md", {"id": "K-1", "agent": {"sleep": 120, "grandchild": True}})
    first, agent, wrapper = on_a_worker(project, "k.md")
    tree = {pid: psutil.Process(pid).create_time() for pid in [first["pid"], *first["children"]]}
    wrapper.suspend()
    try:
        result = project.cli("cancel", "K-1")
        # its answer waits for the bounds on the wrapper's word and on the task: before, it gave up first (exit 11)
        assert result.returncode == 0, result.stderr
        assert "cancelled" in result.stdout and "survivor" not in result.stdout, result.stdout
        wait_for(lambda: project.folder("builder", "cancelled") == ["k.md"], 60, "k.md cancelled")
        assert [pid for pid, created in tree.items() if not dead(pid, created)] == []  # dead once the run ended
        assert "did not report the tree dead" in orch.output, orch.output
        assert f"killed what the wrapper left: [{first['pid']}" in orch.output, orch.output
        assert "is killed by the next wrapper" not in orch.output
        wait_for(lambda: dead(wrapper.pid, wrapper.create_time()), 30, "the hung wrapper's worker killed by Ray")
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            wrapper.resume()
    stop(orch)


# ---------------------------------------------------------------- sdk roles on Ray


def sdk_role(project: Project, cli: Path, **settings: Any) -> dict[str, Any]:
    """A ``backend: sdk`` role on the fake Claude CLI (``cli_path``, resolved on the worker)."""
    env = {"FAKE_CLAUDE_RECORD": str(project.root / "claude.jsonl"), "FAKE_CLAUDE_COST": "0.25"}
    return {"backend": "sdk", "cli_path": str(cli), "env": env, **settings}


def claude(project: Project, key: str) -> list[Any]:
    """What the fake CLI received (``argv``, ``prompt``, ``pid``, ``control``), in order."""
    path = project.root / "claude.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [entry[key] for entry in map(json.loads, filter(str.strip, lines)) if key in entry]


def live(project: Project, memo: str, **fields: Any) -> dict[str, Any]:
    """The memo's live run once it shows every field given."""

    def found() -> dict[str, Any] | None:
        run = next((r for r in project.status()["runs"] if r["memo"] == memo), None)
        return run if run is not None and all(run.get(k) == v for k, v in fields.items()) else None

    return wait_for(found, START, f"{memo} running with {fields}")  # type: ignore[no-any-return]


def head_transcript(project: Project, run_id: int) -> list[dict[str, Any]]:
    path = project.root / ".orchestrator" / "runs" / str(run_id) / "transcript.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_an_sdk_memo_runs_on_a_worker_takes_a_tell_and_is_archived_once_with_its_figures(
    project: Project, cluster: LocalCluster, fake_cli: Path
) -> None:
    configure(project, cluster, {"writer": sdk_role(project, fake_cli)})
    orch = project.up(**ENV)
    first, second = project.root / "turn1", project.root / "turn2"
    project.drop("writer", "W-1.md", {"id": "W-1"}, body=f"[wait:{first}] first")
    run = live(project, "W-1.md", activity="Bash: echo working")  # the runner's events reach the head
    assert run["backend"] == "sdk" and project.status()["nodes"][str(run["run_id"])]

    told = project.cli("tell", "W-1", f"[wait:{second}] a follow-up")
    assert told.returncode == 0, told.stderr
    first.touch()
    live(project, "W-1.md", cost_usd=0.25, state="running")  # the first turn's result, while the second one runs
    wait_for(lambda: len(claude(project, "prompt")) == 2, what="the follow-up to reach the CLI on the worker")
    second.touch()
    wait_for(lambda: project.folder("writer", "archive") == ["W-1.md"], what="W-1 archived")

    (row,) = history(project)
    assert row["state"] == "succeeded" and row["backend"] == "sdk" and row["node"]
    assert row["cost_usd"] == 0.5 and row["num_turns"] == 2 and row["session_id"]
    assert claude(project, "prompt")[1] == f"[wait:{second}] a follow-up" and len(claude(project, "argv")) == 1
    lines = head_transcript(project, row["run_id"])  # written on the worker, streamed to the head
    assert lines[0]["type"] == "prompt" and "first" in lines[0]["text"]
    assert [line["session_id"] for line in lines if line["type"] == "result"] == [row["session_id"]] * 2
    stop(orch)
    assert project.folder("writer", "archive") == ["W-1.md"] and len(claude(project, "argv")) == 1


def test_sdk_interrupt_and_cancel_on_a_worker_reach_the_session_and_leave_nothing_alive(
    project: Project, cluster: LocalCluster, fake_cli: Path
) -> None:
    configure(project, cluster, {"writer": sdk_role(project, fake_cli, grace="10s")})
    orch = project.up(**ENV)
    project.drop("writer", "W-1.md", {"id": "W-1"}, body="[slow] a book")
    run = live(project, "W-1.md", activity="Bash: echo working")
    result = project.cli("interrupt", "W-1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"interrupted W-1 (run {run['run_id']}, role writer): now cancelled"
    assert project.folder("writer", "cancelled") == ["W-1.md"]
    assert claude(project, "control").count("interrupt") == 1
    results = [line for line in head_transcript(project, run["run_id"]) if line["type"] == "result"]
    assert [r["subtype"] for r in results] == ["error_during_execution"]
    refused = project.cli("interrupt", "W-1")
    assert refused.returncode == 7 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr

    project.drop("writer", "W-2.md", {"id": "W-2"}, body="[slow] another")
    run = live(project, "W-2.md", activity="Bash: echo working")
    runner, cli = run["pid"], claude(project, "pid")[-1]
    tree = {pid: psutil.Process(pid).create_time() for pid in (runner, cli)}
    result = project.cli("cancel", "W-2", "--json")
    assert result.returncode == 0, result.stderr
    assert [pid for pid, created in tree.items() if not dead(pid, created)] == []  # dead when cancel returned
    answer = json.loads(result.stdout)
    assert answer["state"] == "cancelled" and answer["survivors"] == [] and runner in answer["pids"]
    assert claude(project, "control").count("interrupt") == 2  # the turn was ended first, as locally
    assert project.folder("writer", "cancelled") == ["W-1.md", "W-2.md"]
    stop(orch)
    assert "internal error" not in orch.output and "Traceback" not in orch.output


def test_an_sdk_retry_on_ray_resumes_the_failed_session_and_counts_its_cost_once(
    project: Project, cluster: LocalCluster, fake_cli: Path
) -> None:
    writer = sdk_role(project, fake_cli, retry={"max": 1, "backoff": ["0.1s"]}, retry_resumes=True)
    writer["env"].update({"FAKE_CLAUDE_FAIL_ATTEMPTS": "1", "FAKE_CLAUDE_SESSIONS": str(project.root / "s.json")})
    configure(project, cluster, {"writer": writer})
    orch = project.up(**ENV)
    project.drop("writer", "W-1.md", {"id": "W-1"})
    wait_for(lambda: project.folder("writer", "archive") == ["W-1.md"], START, "W-1 archived by its retry")
    (row,) = history(project)
    argv = claude(project, "argv")
    results = [line for line in head_transcript(project, row["run_id"]) if line["type"] == "result"]
    assert len(argv) == 2 and f"--resume={results[0]['session_id']}" in argv[1]  # the session, on the worker
    assert (row["attempt"], row["cost_usd"], row["num_turns"]) == (2, 0.5, 2)  # the resumed total, counted once
    stop(orch)
