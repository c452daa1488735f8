"""The kill ladder (procs.py) against real processes, without an orchestrator.

Each test builds a small process tree with ``sys.executable``, names it with a
``Target`` the way the supervisor does, runs ``stop_tree`` and checks by pid and
create time that everything of the run is dead and nothing else was touched.
The test process is not a subreaper, so an orphan here goes to init: exactly the
case where only the group kill or the environment mark can still find it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import dead, wait_for
from orchestrator.agents import proc_table, procs

# A leader (own session) that starts what its argv asks for, prints the pids as one JSON line, then sleeps.
LEADER = r"""
import json, os, signal, subprocess, sys, time
spec = json.loads(sys.argv[1])
if spec.get("ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
out = {"leader": os.getpid()}
if spec.get("child"):
    out["child"] = subprocess.Popen(["sleep", "300"]).pid
if spec.get("stubborn_child"):
    code = "import signal,sys,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(300)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    out["child"] = p.pid
if spec.get("orphan"):
    middle = subprocess.Popen([sys.executable, "-c",
        "import subprocess; p = subprocess.Popen(['sleep', '300']); print(p.pid, flush=True)"],
        stdout=subprocess.PIPE, text=True)
    out["orphan"] = int(middle.stdout.readline())
    out["middle"] = middle.pid
    middle.wait()
if spec.get("setsid"):
    middle = subprocess.Popen([sys.executable, "-c",
        "import os, subprocess; p = subprocess.Popen(['sleep', '300'], start_new_session=True); print(p.pid, flush=True)"],
        stdout=subprocess.PIPE, text=True)
    out["setsid"] = int(middle.stdout.readline())
    middle.wait()
if spec.get("escape_on_term"):  # at SIGTERM: leave a setsid child behind (it keeps the run's marks), then exit
    import psutil  # imported before the handler is set: a second SIGTERM (group, then pid) must not meet it half-imported

    escaping = []

    def escape(*_):
        if escaping:  # the ladder may signal the group and the pid: act once (SIG_IGN would pass to the child)
            return
        escaping.append(True)
        p = subprocess.Popen(["sleep", "300"], start_new_session=True)
        with open(spec["escape_on_term"], "w") as f:
            f.write(f"{p.pid} {psutil.Process(p.pid).create_time()}")
        os._exit(0)
    signal.signal(signal.SIGTERM, escape)
if spec.get("zombie"):
    z = subprocess.Popen(["true"])
    out["zombie"] = z.pid  # never waited for: it stays a zombie while the leader lives
print(json.dumps(out), flush=True)
time.sleep(300)
"""


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Trees:
    """Starts leaders and remembers every pid they report, so teardown can kill whatever a failing test left."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.popens: list[subprocess.Popen[str]] = []
        self.pids: dict[int, float] = {}

    def env(self, run_id: int | None, root: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
        if run_id is not None:
            env["ORCHESTRATOR_RUN_ID"] = str(run_id)
            env["ORCHESTRATOR_ROOT"] = str(root or self.root)
        return env

    def start(self, run_id: int | None = None, root: Path | None = None, **spec: Any) -> dict[str, int]:
        proc = subprocess.Popen(
            [sys.executable, "-c", LEADER, json.dumps(spec)],
            stdout=subprocess.PIPE,
            text=True,
            env=self.env(run_id, root),
            start_new_session=True,
        )
        self.popens.append(proc)
        assert proc.stdout is not None
        pids = json.loads(proc.stdout.readline())
        for key, pid in pids.items():
            if key not in ("middle", "zombie"):
                self.pids[pid] = psutil.Process(pid).create_time()
        return pids

    def ctime(self, pid: int) -> float:
        return self.pids[pid]

    def target(self, pids: dict[str, int], run_id: int | None = None, pgid: bool = True) -> procs.Target:
        leader = pids["leader"]
        return procs.Target(procs.ProcRef(leader, self.ctime(leader)), leader if pgid else None, run_id, str(self.root))

    def cleanup(self) -> None:
        for pid, ctime in self.pids.items():
            if not dead(pid, ctime):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.popens:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
            if proc.stdout:
                proc.stdout.close()


@pytest.fixture
def trees(tmp_path: Path):
    made = Trees(tmp_path)
    yield made
    made.cleanup()


def test_group_kill_ends_the_agent_and_its_child(trees: Trees) -> None:
    pids = trees.start(child=True)
    leader, child = pids["leader"], pids["child"]
    assert os.getpgid(child) == leader

    report = run(procs.stop_tree(trees.target(pids), grace=5.0))

    assert dead(leader, trees.ctime(leader)) and dead(child, trees.ctime(child))
    assert {leader, child} <= set(report.pids)
    assert report.escalated is False and report.survivors == []
    assert procs.find_tree(trees.target(pids)) == {}


def test_grandchild_whose_parent_exited_is_found_by_its_group(trees: Trees) -> None:
    pids = trees.start(orphan=True)
    leader, orphan = pids["leader"], pids["orphan"]
    # the case this covers: the tree walk from the agent cannot see it, only its process group can
    assert orphan not in {p.pid for p in psutil.Process(leader).children(recursive=True)}
    assert os.getpgid(orphan) == leader
    assert orphan in procs.find_tree(trees.target(pids))

    report = run(procs.stop_tree(trees.target(pids), grace=5.0))

    assert dead(orphan, trees.ctime(orphan)) and dead(leader, trees.ctime(leader))
    assert orphan in report.pids and report.survivors == []


def test_orphan_is_found_by_group_even_after_the_agent_is_gone(trees: Trees) -> None:
    pids = trees.start(orphan=True)
    leader, orphan = pids["leader"], pids["orphan"]
    os.kill(leader, signal.SIGKILL)
    wait_for(lambda: dead(leader, trees.ctime(leader)), what="the leader dead")
    target = trees.target(pids)
    assert target.root is not None and target.root.process() is None
    assert procs.group_has_members(leader)

    report = run(procs.stop_tree(target, grace=5.0))

    assert dead(orphan, trees.ctime(orphan))
    assert report.pids == [orphan]
    assert procs.find_tree(target) == {}


def test_setsid_grandchild_is_found_by_run_id_and_root_in_its_environment(trees: Trees, tmp_path: Path) -> None:
    run_id = 7
    pids = trees.start(run_id=run_id, setsid=True)
    leader, escaped = pids["leader"], pids["setsid"]
    # left the group and the tree: only the environment still ties it to the run
    assert os.getsid(escaped) == escaped and os.getpgid(escaped) != leader
    assert escaped not in {p.pid for p in psutil.Process(leader).children(recursive=True)}
    # decoys: the same run id under another project root, and a run id that merely starts with the same digits
    other_root = trees.start(run_id=run_id, root=tmp_path / "elsewhere")["leader"]
    longer_id = trees.start(run_id=77)["leader"]

    assert escaped not in procs.find_tree(trees.target(pids, run_id=None))
    report = run(procs.stop_tree(trees.target(pids, run_id=run_id), grace=5.0))

    assert dead(escaped, trees.ctime(escaped)) and dead(leader, trees.ctime(leader))
    assert escaped in report.pids
    assert not dead(other_root, trees.ctime(other_root)), "a process of another project root was killed"
    assert not dead(longer_id, trees.ctime(longer_id)), "run 77 was killed for run 7"
    assert other_root not in report.pids and longer_id not in report.pids


def test_setsid_process_is_found_with_no_agent_and_no_group(trees: Trees) -> None:
    """What recovery does after a crash: only the run id is known."""
    pids = trees.start(run_id=31, setsid=True)
    leader, escaped = pids["leader"], pids["setsid"]
    report = run(procs.stop_tree(procs.Target(None, None, 31, str(trees.root)), grace=5.0))
    assert dead(escaped, trees.ctime(escaped)) and dead(leader, trees.ctime(leader))
    assert set(report.pids) == {leader, escaped}


def test_process_ignoring_sigterm_is_killed_after_the_grace(trees: Trees) -> None:
    pids = trees.start(ignore_term=True, child=True)
    leader, child = pids["leader"], pids["child"]
    grace = 0.3
    lines: list[str] = []

    report = run(procs.stop_tree(trees.target(pids), grace=grace, log=lines.append))

    assert dead(leader, trees.ctime(leader)) and dead(child, trees.ctime(child))
    assert report.escalated is True and report.survivors == []
    assert report.seconds >= grace  # it did wait the grace before SIGKILL
    assert lines[0].startswith("SIGTERM to process group") and any("SIGKILL" in line for line in lines), lines


def test_child_ignoring_sigterm_is_killed_after_the_grace_when_the_agent_obeys(trees: Trees) -> None:
    pids = trees.start(stubborn_child=True)
    leader, child = pids["leader"], pids["child"]
    report = run(procs.stop_tree(trees.target(pids), grace=0.3))
    assert dead(leader, trees.ctime(leader)) and dead(child, trees.ctime(child))
    assert report.escalated is True


def test_no_escalation_when_sigterm_is_enough(trees: Trees) -> None:
    pids = trees.start()
    report = run(procs.stop_tree(trees.target(pids), grace=30.0))
    assert dead(pids["leader"], trees.ctime(pids["leader"]))
    assert report.escalated is False
    assert report.seconds < 30.0  # it did not sit out the grace period once everything was dead


def test_a_reused_pid_is_never_signalled(trees: Trees) -> None:
    pids = trees.start(child=True)
    leader = pids["leader"]
    # the pid we remember belongs to a process started at another time: a reused pid
    stale = procs.ProcRef(leader, trees.ctime(leader) - 1000.0)
    assert stale.process() is None
    assert procs.ProcRef(leader, trees.ctime(leader)).process() is not None
    assert procs.ProcRef.of(leader) == procs.ProcRef(leader, trees.ctime(leader))

    report = run(procs.stop_tree(procs.Target(stale, None, None, str(trees.root)), grace=0.2))

    assert report.pids == [] and report.escalated is False
    assert not dead(leader, trees.ctime(leader)) and not dead(pids["child"], trees.ctime(pids["child"]))


def test_zombies_are_not_counted_as_alive(trees: Trees) -> None:
    pids = trees.start(zombie=True)
    leader, zombie = pids["leader"], pids["zombie"]
    wait_for(lambda: psutil.Process(zombie).status() == psutil.STATUS_ZOMBIE, what="the zombie")
    target = trees.target(pids)
    assert procs.ProcRef.of(zombie) is not None
    assert procs.ProcRef.of(zombie).process() is None  # type: ignore[union-attr]
    assert set(procs.find_tree(target)) == {leader}

    report = run(procs.stop_tree(target, grace=5.0))

    assert zombie not in report.pids and report.escalated is False and report.survivors == []
    assert dead(leader, trees.ctime(leader))


def test_a_tree_of_only_zombies_is_already_stopped(trees: Trees) -> None:
    pids = trees.start()
    leader = pids["leader"]
    os.kill(leader, signal.SIGKILL)
    wait_for(lambda: psutil.Process(leader).status() == psutil.STATUS_ZOMBIE, what="the leader a zombie")
    procs.spare(leader)  # our own child: the Popen object reaps it, as asyncio does for the agent
    try:
        assert procs.find_tree(trees.target(pids)) == {}
        report = run(procs.stop_tree(trees.target(pids), grace=5.0))
        assert report.pids == [] and report.escalated is False
        assert psutil.Process(leader).status() == psutil.STATUS_ZOMBIE, "reap_orphans reaped a spared child"
    finally:
        procs.unspare(leader)


def test_reap_orphans_collects_zombie_children_but_not_spared_ones() -> None:
    spared = subprocess.Popen(["true"])
    loose = subprocess.Popen(["true"])
    try:
        procs.spare(spared.pid)
        for proc in (spared, loose):
            wait_for(lambda p=proc: psutil.Process(p.pid).status() == psutil.STATUS_ZOMBIE, what="a zombie")
        procs.reap_orphans()
        assert psutil.Process(spared.pid).status() == psutil.STATUS_ZOMBIE
        assert not psutil.pid_exists(loose.pid) or psutil.Process(loose.pid).status() != psutil.STATUS_ZOMBIE
    finally:
        procs.unspare(spared.pid)
        assert spared.wait(5) == 0
        loose.wait(5)


def test_group_has_members(trees: Trees) -> None:
    pids = trees.start()
    assert procs.group_has_members(pids["leader"])
    assert not procs.group_has_members(None)
    run(procs.stop_tree(trees.target(pids), grace=5.0))
    assert not procs.group_has_members(pids["leader"])


def test_a_setsid_child_started_during_the_ladder_is_found_once_the_known_tree_is_gone(
    trees: Trees, tmp_path: Path
) -> None:
    """The agent's last act at SIGTERM is a child in a session of its own: the ladder reads /proc once more after
    the processes it knew are gone, and that reading finds it by the run's marks."""
    said = tmp_path / "escapee"
    pids = trees.start(run_id=12, escape_on_term=str(said))
    report = run(procs.stop_tree(trees.target(pids, run_id=12), grace=5.0))

    pid, created = said.read_text().split()
    trees.pids[int(pid)] = float(created)  # killed at teardown should the ladder have missed it
    assert int(pid) in report.pids
    assert dead(int(pid), float(created)) and dead(pids["leader"], trees.ctime(pids["leader"]))
    assert report.escalated is False


def test_stops_under_way_share_their_readings_of_proc(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopping many trees at once reads /proc a few times in all, not a few times for each of them."""
    started = [trees.start(run_id=40 + k, child=True) for k in range(8)]
    readings: list[float] = []
    real = proc_table.read_table

    def counted() -> proc_table.ProcTable:
        readings.append(1)
        return real()

    monkeypatch.setattr(proc_table, "read_table", counted)

    async def stop_all() -> list[procs.KillReport]:
        targets = [trees.target(pids, run_id=40 + k) for k, pids in enumerate(started)]
        return list(await asyncio.gather(*(procs.stop_tree(t, grace=5.0) for t in targets)))

    reports = run(stop_all())

    for pids, report in zip(started, reports, strict=True):
        assert {pids["leader"], pids["child"]} <= set(report.pids)
        assert dead(pids["leader"], trees.ctime(pids["leader"])) and dead(pids["child"], trees.ctime(pids["child"]))
    assert 1 <= len(readings) <= 6, f"{len(readings)} readings of /proc for 8 stops (each needs 2 of its own)"


def test_a_settled_process_environment_is_read_once(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run marks of a process that has run a moment are kept while it lives; a young one's are read again
    (it may still be between its fork and its exec, showing its parent's environment)."""
    leader = trees.start(run_id=51)["leader"]
    target = procs.Target(None, None, 51, str(trees.root))
    read: list[int] = []
    real = proc_table.read_marks
    monkeypatch.setattr(proc_table, "read_marks", lambda pid: (read.append(pid), real(pid))[1])

    monkeypatch.setattr(proc_table, "SETTLED", 3600.0)  # nothing has run that long: every pass reads it again
    assert set(procs.find_tree(target)) == {leader} and set(procs.find_tree(target)) == {leader}
    assert read.count(leader) == 2

    monkeypatch.setattr(proc_table, "SETTLED", 0.0)
    read.clear()
    assert set(procs.find_tree(target)) == {leader} and set(procs.find_tree(target)) == {leader}
    assert read.count(leader) == 1
