"""Adoption's rules through the replay harness: recorded exits end runs by the ordinary rules, on the injected clock.

A dead orchestrator's database and folders are set up by hand; ``recover`` with the
supervisor's real ``Adopter`` then runs through the real loop, with the manual clock and
fake agents for whatever starts afterwards.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import wait_for
from orchestrator.agents import keeper
from orchestrator.core.clock import iso
from orchestrator.supervisor.adoption import EXEC_WAIT, POLL
from orchestrator.supervisor.recovery import recover
from replay import Replay


def play(tmp_path: Path, scenario: Any) -> Any:
    return asyncio.run(scenario(tmp_path))


def left_by_a_dead_orchestrator(r: Replay, name: str, state: str = "running", attempt: int = 1, ran: float = 10) -> int:
    (r.config.role_dir("builder") / "active" / name).write_text(f"---\nid: {name[:-3]}\n---\nbody\n")
    run_id = r.sup.store.insert_run(
        role="builder", memos=[name], memo_ids=[name[:-3]], state=state, attempt=attempt, seq=1
    )
    started = iso(r.clock.now() - timedelta(seconds=ran))
    r.sup.store.update_run(run_id, started_at=started)
    r.sup.store.record_attempt(run_id, attempt, started_at=started)
    r.sup.store.set_memo_attempts("builder", name, attempt)
    return run_id


def exit_record(r: Replay, run_id: int, attempt: int, text: str) -> None:
    path = keeper.exit_path(r.config.state_dir, run_id, attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def until(condition: Any, what: str, timeout: float = 10.0) -> None:
    """Let the loop run, in real time, until ``condition()`` holds; fail naming ``what`` after ``timeout`` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def restart(r: Replay) -> None:
    adopter = r.sup.make_adopter()
    await recover(r.config, r.sup.store, r.console, r.sup.lc, adopter)
    await r.settle()
    adopter.start()  # as the loop starts every feature once it serves
    await r.settle()


def test_a_recorded_success_is_archived_and_never_run_again(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root)
        run_id = left_by_a_dead_orchestrator(r, "A-1.md")
        exit_record(r, run_id, 1, "exit 0\n")
        await restart(r)
        assert r.folder("builder", "archive") == ["A-1.md"]
        assert r.spawner.agents == [], "no agent started"
        assert r.sup.store.run(run_id)["state"] == "succeeded"
        spent = keeper.exit_path(r.config.state_dir, run_id, 1)
        wait_for(lambda: not spent.exists(), timeout=5, what="the spent record removed")
        r.close()

    play(tmp_path, scenario)


def test_a_recorded_failure_is_retried_after_its_backoff(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 2, "backoff": ["5s"]}}})
        run_id = left_by_a_dead_orchestrator(r, "F-1.md")
        exit_record(r, run_id, 1, "exit 3\n")
        await restart(r)
        assert r.state("F-1") == "retry_wait"
        assert r.spawner.agents == []
        await r.advance(4.9)
        assert r.spawner.agents == []
        await r.advance(0.1)
        assert r.agent("F-1").spec.attempt == 2, "the next attempt, not a rerun of the first"
        await r.exit("F-1", 0)
        assert r.folder("builder", "archive") == ["F-1.md"]
        r.close()

    play(tmp_path, scenario)


def test_a_run_that_waited_for_its_retry_waits_on_for_the_rest_of_its_pause_keeping_its_number(tmp_path: Path) -> None:
    """Found by a user-view review: a crash during a retry's pause returned the memo, which ran again at once as a
    new run (its backoff lost: a failing API hit again at every restart), though a retry keeps its run's number."""

    async def scenario(root: Path) -> None:
        role = {"backend": "sdk", "retry_resumes": True, "retry": {"max": 2, "backoff": ["60s"]}}
        r = Replay(root, {"builder": role})
        run_id = left_by_a_dead_orchestrator(r, "W-1.md", state="retry_wait")
        due = iso(r.clock.now() + timedelta(seconds=40))  # failed 20 s before the crash
        r.sup.store.update_run(run_id, next_attempt_at=due, reason="exit 3", session_id="S-1", cost_usd=1.5)
        await restart(r)
        assert r.state("W-1") == "retry_wait" and r.folder("builder", "active") == ["W-1.md"]
        (shown,) = r.sup.view(False).to_json()["runs"]
        assert shown["started_at"] is not None, "its first start is kept"
        assert f"recovery: run {run_id} (W-1) waits on for its retry, due in 40s" in r.console.text
        await r.advance(39.9)
        assert r.spawner.agents == [], "the rest of its pause is kept"
        await r.advance(0.1)
        agent = r.agent("W-1")
        assert (agent.spec.run_id, agent.spec.attempt) == (run_id, 2), "its next attempt, in the same run"
        assert agent.spec.resume == "S-1", "retry_resumes: the session of the attempt before the restart goes on"
        agent.result = {"session_id": "S-1", "cost_usd": 2.0}  # the resumed session's running total
        await r.exit("W-1", 0)
        assert r.sup.store.run(run_id)["cost_usd"] == 2.0
        assert r.folder("builder", "archive") == ["W-1.md"]
        r.close()

    play(tmp_path, scenario)


def test_a_retry_taken_back_adds_its_spend_to_the_attempts_before_the_restart(tmp_path: Path) -> None:
    """Found by a review: the run waiting for its retry was rebuilt without its figures, so the retry's overwrote
    the run's totals (history and the daily budget under-counted the attempts before the restart); and one due
    already started in the middle of recovery, before the features had started."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"backend": "sdk", "retry": {"max": 2, "backoff": ["60s"]}}})
        run_id = left_by_a_dead_orchestrator(r, "W-2.md", state="retry_wait")
        r.sup.store.update_run(run_id, next_attempt_at=iso(r.clock.now()), session_id="S-1", cost_usd=1.5)
        adopter = r.sup.make_adopter()
        await recover(r.config, r.sup.store, r.console, r.sup.lc, adopter)
        await r.advance(1)
        assert r.spawner.agents == [], "due already, but not started in the middle of recovery"
        adopter.start()  # the loop serves
        await r.advance(0.01)
        agent = r.agent("W-2")
        assert agent.spec.resume is None, "a retry that does not resume starts a new session"
        agent.result = {"session_id": "S-2", "cost_usd": 0.5}
        await r.exit("W-2", 0)
        assert r.sup.store.run(run_id)["cost_usd"] == 2.0, "both sessions' spend"
        r.close()

    play(tmp_path, scenario)


def test_a_retry_taken_back_that_resumes_the_last_of_two_sessions_keeps_the_first_ones_spend(tmp_path: Path) -> None:
    """Found by a review: the run's whole total was filed under its last session, which the resumed retry
    replaced: S-1 spent 1.0 and S-2 0.5, the retry resumed S-2 (0.8 in all), and the run's total was 0.8."""

    async def scenario(root: Path) -> None:
        role = {"backend": "sdk", "retry_resumes": True, "retry": {"max": 3, "backoff": ["60s"]}}
        r = Replay(root, {"builder": role})
        run_id = left_by_a_dead_orchestrator(r, "W-3.md", state="retry_wait", attempt=2)
        r.sup.store.update_run(
            run_id,
            next_attempt_at=iso(r.clock.now()),
            session_id="S-2",
            cost_usd=1.5,
            session_figures={"cost_usd": 0.5},
        )
        await restart(r)
        await r.advance(0.01)
        agent = r.agent("W-3")
        assert agent.spec.resume == "S-2"
        agent.result = {"session_id": "S-2", "cost_usd": 0.8}
        await r.exit("W-3", 0)
        assert r.sup.store.run(run_id)["cost_usd"] == pytest.approx(1.8), "S-1's 1.0 and S-2's 0.8"
        r.close()

    play(tmp_path, scenario)


def test_a_keeper_that_stopped_its_agent_at_the_timeout_ends_the_run_as_timed_out(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 2, "backoff": ["1s"]}}})
        run_id = left_by_a_dead_orchestrator(r, "T-1.md")
        exit_record(r, run_id, 1, "signal 15 timeout\n")
        await restart(r)
        assert r.folder("builder", "failed") == ["T-1.md"]
        assert r.sup.store.run(run_id)["state"] == "timed_out"
        await r.advance(5)
        assert r.spawner.agents == [], "a timed-out run is not retried"
        r.close()

    play(tmp_path, scenario)


def test_recovery_restart_ignores_the_records(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, recovery="restart")
        run_id = left_by_a_dead_orchestrator(r, "R-1.md")
        exit_record(r, run_id, 1, "exit 0\n")
        await restart(r)
        assert r.folder("builder", "inbox") == ["R-1.md"]
        assert r.sup.store.run(run_id)["state"] == "returned"
        r.close()

    play(tmp_path, scenario)


def test_an_adopted_agent_keeps_the_timeout_of_its_first_start(tmp_path: Path) -> None:
    """A live agent (a real process carrying the run's marks) that ran 100 s of a 120 s timeout has 20 s left."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"timeout": "120s", "grace": "1s"}})
        run_id = left_by_a_dead_orchestrator(r, "L-1.md", ran=100)
        env = {
            **os.environ,
            "ORCHESTRATOR_ROOT": str(r.config.root),
            "ORCHESTRATOR_RUN_ID": str(run_id),
            "ORCHESTRATOR_ATTEMPT": "1",
        }
        agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
        try:
            # Popen returns once the exec has begun; on a busy machine its environment shows milliseconds later
            wait_for(lambda: psutil.Process(agent.pid).environ().get("ORCHESTRATOR_RUN_ID") == str(run_id), what="exec")
            r.sup.store.update_run(run_id, pid=agent.pid, create_time=psutil.Process(agent.pid).create_time())
            await restart(r)
            assert r.state("L-1") == "running" and r.folder("builder", "active") == ["L-1.md"]
            assert r.run_of("L-1").pid == agent.pid
            assert f"adopted its live agent (pid {agent.pid})" in r.console.text
            assert r.clock.pending() == [20.0]
            await r.advance(19.9)
            assert r.state("L-1") == "running" and r.spawner.stops == []
            await r.advance(0.1)
            assert r.spawner.stops == [(run_id, 1.0, False)]
            assert r.folder("builder", "failed") == ["L-1.md"]
        finally:
            agent.send_signal(signal.SIGKILL)
            agent.wait(5)
        r.close()

    play(tmp_path, scenario)


def test_an_adopted_agent_is_watched_for_stalls_again(tmp_path: Path) -> None:
    """Its ``stall_timeout`` counts again from the restart (what it wrote meanwhile was not watched)."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"timeout": "120s", "grace": "1s", "stall_timeout": "7s"}})
        run_id = left_by_a_dead_orchestrator(r, "S-1.md", ran=100)
        env = {
            **os.environ,
            "ORCHESTRATOR_ROOT": str(r.config.root),
            "ORCHESTRATOR_RUN_ID": str(run_id),
            "ORCHESTRATOR_ATTEMPT": "1",
        }
        agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
        try:
            wait_for(lambda: psutil.Process(agent.pid).environ().get("ORCHESTRATOR_RUN_ID") == str(run_id), what="exec")
            r.sup.store.update_run(run_id, pid=agent.pid, create_time=psutil.Process(agent.pid).create_time())
            await restart(r)
            assert r.state("S-1") == "running"
            assert sorted(r.clock.pending()) == [7.0, 20.0]  # the stall check and what is left of the timeout
        finally:
            agent.send_signal(signal.SIGKILL)
            agent.wait(5)
        r.close()

    play(tmp_path, scenario)


def a_keeper_before_its_agents_exec(r: Replay, run_id: int) -> subprocess.Popen[bytes]:
    """A process that looks like the run's keeper (its name, its marks) and has no agent: what recovery meets
    when the orchestrator died between a keeper's fork and its agent's exec."""
    env = {
        "KEEPER_ORCHESTRATOR_ROOT": str(r.config.root),
        "KEEPER_ORCHESTRATOR_RUN_ID": str(run_id),
        "KEEPER_ORCHESTRATOR_ATTEMPT": "1",
    }
    return subprocess.Popen([keeper.BINARY.name, "60"], executable="/bin/sleep", env=env)


def test_adoption_waits_for_a_keeper_on_the_clock_and_the_loop_runs_meanwhile(tmp_path: Path) -> None:
    """Its polls are awaited on the injected clock: recovery is parked until the clock moves, the loop is free."""

    async def scenario(root: Path) -> None:
        r = Replay(root)
        run_id = left_by_a_dead_orchestrator(r, "K-1.md")
        fake = a_keeper_before_its_agents_exec(r, run_id)
        try:
            recovering = asyncio.ensure_future(restart(r))
            await r.settle()  # this coroutine runs again: recovery did not hold the loop
            # its first look reads every process of the machine: on a loaded one, give it real time to get to its wait
            await until(lambda: bool(r.clock.pending()) or recovering.done(), "recovery's first look")
            assert not recovering.done(), "recovery ended without waiting for the keeper"
            assert r.clock.pending() == pytest.approx([POLL]), "the wait is not a timer on the injected clock"
            await r.advance(POLL)
            await until(lambda: bool(r.clock.pending()) or recovering.done(), "recovery's second look")
            assert not recovering.done() and r.clock.pending() == pytest.approx([POLL]), (
                "each look waits on the clock again"
            )
            exit_record(r, run_id, 1, "exit 0\n")  # the keeper writes its record
            await r.advance(POLL)
            await asyncio.wait_for(recovering, 5)
            assert r.folder("builder", "archive") == ["K-1.md"], "finished as its keeper recorded"
            assert r.spawner.agents == []
        finally:
            fake.kill()
            fake.wait(5)
        r.close()

    play(tmp_path, scenario)


def test_adoption_gives_up_on_a_silent_keeper_after_its_wait_of_clock_time(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root)
        run_id = left_by_a_dead_orchestrator(r, "K-2.md")
        fake = a_keeper_before_its_agents_exec(r, run_id)
        try:
            recovering = asyncio.ensure_future(restart(r))
            await r.settle()
            await r.advance(EXEC_WAIT - 0.1)
            assert not recovering.done(), "gave up before its wait was over"
            await r.advance(0.2)  # the wait for the agent's exec is over; the wait for the record starts
            assert not recovering.done() and r.clock.pending() == pytest.approx([POLL])
            await r.advance(EXEC_WAIT + 0.1)
            await asyncio.wait_for(recovering, 5)
            assert r.folder("builder", "inbox") == ["K-2.md"] and r.sup.store.run(run_id)["state"] == "returned"
        finally:
            fake.kill()
            fake.wait(5)
        r.close()

    play(tmp_path, scenario)
