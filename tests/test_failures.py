"""When things go wrong: retries with backoff, agents that die, crash loops, timeouts, signals and bad input.

Every test checks the promise: each memo ends in exactly one of archive/, failed/ or
cancelled/, or is still waiting in inbox/; and each failure mode says so in one clear line.
The rules (backoffs, retries, crash loops, timeouts) are replays through the real loop on a
stepped clock (``tests/replay.py``); the real-process tests keep what the OS does: signals,
trees, a killed orchestrator. Their backoffs are fractions of a second; waits poll with deadlines.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import signal
import stat
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import DEADLINE, STAND_IN, Orchestrator, Project, pid_alive, wait_for
from faults import faulty_classify, faulty_inotify_classify
from orchestrator.core.events import MemoSeen
from orchestrator.intake import watcher as watchdog_watcher
from orchestrator.intake.inotify import InotifyWatcher, make_watcher
from orchestrator.store import Store
from replay import Replay

FOLDERS = ("inbox", "active", "archive", "failed", "cancelled")


def where(project: Project | Replay, role: str, name: str) -> list[str]:
    """The folders that hold ``name`` for ``role``: the promise says exactly one."""
    return [folder for folder in FOLDERS if name in project.folder(role, folder)]


def attempts_of(project: Project, run_id: int) -> list[dict]:
    store = Store(project.root / ".orchestrator" / "state.db", readonly=True)
    try:
        return store.attempts(run_id)
    finally:
        store.close()


def reason_of(project: Project, role: str, name: str) -> str:
    """The reason file beside a memo in failed/ (written just after the memo's move)."""
    path = project.root / "memo" / role / "failed" / (name.removesuffix(".md") + ".reason")
    wait_for(path.exists, what=f"{path.name}")
    return path.read_text(encoding="utf-8")


def lines_with(output: str, text: str) -> list[str]:
    return [line for line in output.splitlines() if text in line]


def one_line(orch: Orchestrator | str, text: str) -> str:
    """The one line of the orchestrator's output (or of a replay's console text) that contains ``text``
    (waited for in a real orchestrator's: it may follow a move)."""
    if isinstance(orch, Orchestrator):
        orch.wait_output(text)
    output = orch.output if isinstance(orch, Orchestrator) else orch
    found = lines_with(output, text)
    assert len(found) == 1, f"{len(found)} lines with {text!r}:\n{output}"
    return found[0]


def play(tmp_path: Path, scenario: Callable[[Path], Awaitable[None]]) -> None:
    """A replay (``tests/replay.py``): the rules of retries, crash loops and timeouts need no process nor real time."""
    asyncio.run(scenario(tmp_path))


def seconds_between(earlier: str, later: str) -> float:
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


def all_dead(pids: list[int]) -> bool:
    return not any(pid_alive(pid) for pid in pids)


def sigint_pending(pid: int) -> bool:
    """Whether a SIGINT sent to ``pid`` still waits for delivery (ShdPnd in /proc/<pid>/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return bool(int(fields["ShdPnd"].strip(), 16) & (1 << (signal.SIGINT - 1)))


# ------------------------------------------------------------------ retries
def test_fail_twice_then_succeed_with_growing_backoff(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 3, "backoff": ["0.2s", "0.6s"]}}})
        await r.drop("builder", "B-1.md", front={"id": "B-1", "subject": "flaky"})
        await r.exit("B-1", 1)
        # the pause before each retry is its backoff on the clock, and the backoffs grow
        assert r.clock.pending() == pytest.approx([0.2])
        await r.advance(0.19)
        assert len(r.spawner.agents) == 1, "not before its backoff"
        await r.advance(0.01)
        await r.exit("B-1", 1)
        assert r.clock.pending() == pytest.approx([0.6])
        await r.advance(0.6)
        await r.exit("B-1", 0)
        assert where(r, "builder", "B-1.md") == ["archive"]

        assert [a.spec.attempt for a in r.spawner.agents] == [1, 2, 3]
        assert len({a.spec.run_id for a in r.spawner.agents}) == 1, "every attempt belongs to one run"
        attempts = r.sup.store.attempts(r.spawner.agents[0].spec.run_id)
        assert [(a["attempt"], a["outcome"], a["exit_code"]) for a in attempts] == [
            (1, "failed", 1),
            (2, "failed", 1),
            (3, "succeeded", 0),
        ]
        one_line(r.console.text, "B-1 attempt 1 failed: exit code 1")
        one_line(r.console.text, "B-1 retry 1 of 3 in 0.2s")
        one_line(r.console.text, "B-1 retry 2 of 3 in 0.6s")
        await r.advance(60)
        assert len(r.spawner.agents) == 3, "nothing runs after the success"
        r.close()

    play(tmp_path, scenario)


def test_a_reused_memo_name_starts_again_at_attempt_one(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 1, "backoff": ["0.05s"]}}})
        await r.drop("builder", "N.md", front={"id": "N-1"})
        await r.exit("N", 0)
        assert r.folder("builder", "archive") == ["N.md"]
        await r.drop("builder", "N.md", front={"id": "N-2"})
        await r.exit("N", 1)
        await r.advance(0.05)
        await r.exit("N", 0)
        assert r.folder("builder", "archive") == ["N.1.md", "N.md"]
        await r.drop("builder", "N.md", front={"id": "N-3"})  # archived as N.2.md: a clash must not carry a count
        await r.exit("N", 0)
        assert len(r.folder("builder", "archive")) == 3
        assert [a.spec.attempt for a in r.spawner.agents] == [1, 1, 2, 1]
        r.close()

    play(tmp_path, scenario)


def test_retries_run_out_memo_to_failed_with_reason_and_notice(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 3, "backoff": ["0.05s"]}}, "pm": {}}, notify="pm")
        await r.drop("builder", "B-2.md", front={"id": "B-2", "subject": "hopeless"})
        for attempt in (1, 2, 3, 4):
            log = r.run_of("B-2").log_path
            assert log is not None
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a", encoding="utf-8") as out:  # what the agent writes, as the stand-in would
                out.write(f"trying B-2 (attempt {attempt})\n")
            await r.exit("B-2", 1)
            await r.advance(0.05)
        assert where(r, "builder", "B-2.md") == ["failed"]

        assert [a.spec.attempt for a in r.spawner.agents if a.spec.role.name == "builder"] == [1, 2, 3, 4]
        reason = (r.config.role_dir("builder") / "failed" / "B-2.reason").read_text(encoding="utf-8")
        assert reason.startswith("failed: exit code 1\n")
        for attempt in (1, 2, 3, 4):
            assert f"  {attempt}: failed, exit code 1," in reason
        assert "trying B-2 (attempt 4)" in reason, "the reason file ends with the agent's last log lines"
        one_line(r.console.text, "failed B-2: exit code 1; moved to failed/")
        one_line(r.console.text, "told pm: ")

        # the notice wakes the notify role like any memo; it names the memo and why
        [notice] = [n for n in r.folder("pm", "inbox") if "-failed-" in n]
        text = (r.config.role_dir("pm") / "inbox" / notice).read_text(encoding="utf-8")
        assert "subject: 'Failed: hopeless'" in text.replace('"', "'")
        assert "B-2.md" in text and "exit code 1" in text
        r.sup.post(MemoSeen("pm", r.config.role_dir("pm") / "inbox" / notice, complete=True))  # as the watcher
        await r.settle()
        assert r.agent(notice).spec.role.name == "pm", "the notice is handed to pm"

        # the orchestrator goes on serving
        await r.drop("builder", "B-3.md", front={"id": "B-3"})
        await r.exit("B-3", 0)
        assert where(r, "builder", "B-3.md") == ["archive"]
        assert r.sup.ending is None
        r.close()

    play(tmp_path, scenario)


def test_no_notice_when_the_failing_role_is_the_notify_role(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"pm": {}, "builder": {}}, notify="pm")
        await r.drop("pm", "P-1.md", front={"id": "P-1"})
        await r.exit("P-1", 2)
        assert where(r, "pm", "P-1.md") == ["failed"]
        assert "failed: exit code 2" in (r.config.role_dir("pm") / "failed" / "P-1.reason").read_text()
        await r.drop("pm", "P-2.md", front={"id": "P-2"})
        await r.exit("P-2", 0)
        assert where(r, "pm", "P-2.md") == ["archive"]
        for folder in FOLDERS:
            assert [n for n in r.folder("pm", folder) if n not in ("P-1.md", "P-2.md")] == []
        assert "told pm" not in r.console.text
        assert len(r.spawner.agents) == 2, "no notice ever reached an agent"
        r.close()

    play(tmp_path, scenario)


@pytest.mark.os_level
def test_agent_killed_by_a_signal_we_did_not_send_is_a_failure(project):
    project.configure({"builder": {"retry": {"max": 1, "backoff": ["0.05s"]}}})
    orch = project.up()
    project.drop("builder", "K-1.md", {"id": "K-1", "agent": {"kill_self": "SIGKILL", "kill_attempts": 1}})
    project.drop("builder", "K-2.md", {"id": "K-2", "agent": {"kill_self": "SIGSEGV"}})
    wait_for(lambda: where(project, "builder", "K-1.md") == ["archive"], what="K-1 archived on its retry")
    wait_for(lambda: where(project, "builder", "K-2.md") == ["failed"], what="K-2 in failed/")

    by_memo: dict[str, list[int]] = {}
    for record in project.records():
        by_memo.setdefault(Path(record["memo"]).name, []).append(record["attempt"])
    assert by_memo == {"K-1.md": [1, 2], "K-2.md": [1, 2]}
    one_line(orch, "K-1 attempt 1 failed: killed by SIGKILL (not sent by the orchestrator)")
    one_line(orch, "K-2 attempt 2 failed: killed by SIGSEGV (not sent by the orchestrator)")
    reason = reason_of(project, "builder", "K-2.md")
    assert reason.startswith("failed: killed by SIGSEGV")
    assert f"exit code {-signal.SIGSEGV}," in reason
    assert orch.stop() == 0


def test_an_agent_that_cannot_be_started_is_a_failed_attempt_and_retried(project):
    wrapper = project.root / "agent.sh"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {STAND_IN} "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    bad_interpreter = project.root / "broken.sh"
    bad_interpreter.write_text("#!/nonexistent/interpreter\n", encoding="utf-8")
    bad_interpreter.chmod(0o755)
    retry = {"max": 2, "backoff": ["0.05s"]}
    project.configure(
        {
            "builder": {"command": [str(wrapper)], "retry": retry},
            "broken": {"command": [str(bad_interpreter)], "retry": retry},
        }
    )
    orch = project.up()
    wrapper.chmod(0o644)  # start-up checks passed; now it can no longer be executed
    project.drop("builder", "S-1.md", {"id": "S-1"})
    project.drop("broken", "S-2.md", {"id": "S-2"})
    wait_for(lambda: where(project, "builder", "S-1.md") == ["failed"], what="S-1 in failed/")
    wait_for(lambda: where(project, "broken", "S-2.md") == ["failed"], what="S-2 in failed/")
    assert project.records() == [], "no agent ever ran"
    for attempt in (1, 2, 3):
        one_line(orch, f"S-1 attempt {attempt} failed: could not start the agent")
        one_line(orch, f"S-2 attempt {attempt} failed: could not start the agent")
    assert "is not an executable file (role builder)" in one_line(orch, "S-1 attempt 1 failed: could not start")
    assert "No such file or directory (the file exists: is the interpreter on its #! line missing?)" in one_line(
        orch, "S-2 attempt 1 failed: could not start the agent: cannot start"
    )
    reason = reason_of(project, "builder", "S-1.md")
    assert reason.startswith("failed: could not start the agent")
    assert reason.count(": failed, exit code -,") == 3

    wrapper.chmod(0o755)  # fixed: the orchestrator is still serving
    project.drop("builder", "S-3.md", {"id": "S-3"})
    wait_for(lambda: where(project, "builder", "S-3.md") == ["archive"], what="S-3 archived")
    assert orch.stop() == 0


def test_a_role_folder_removed_after_start_up_fails_the_attempt_with_its_name(project):
    folder = project.root / "work"
    folder.mkdir()
    project.configure({"builder": {"cwd": "work", "retry": {"max": 1, "backoff": ["0.05s"]}}})
    orch = project.up()
    folder.rmdir()  # start-up checked it; now the keeper cannot enter it
    project.drop("builder", "S-1.md", {"id": "S-1"})
    wait_for(lambda: where(project, "builder", "S-1.md") == ["failed"], what="S-1 in failed/")
    assert project.records() == [], "no agent ever ran"
    line = one_line(orch, "S-1 attempt 1 failed: could not start the agent")
    assert f"cannot enter the folder {folder} of role builder: No such file or directory" in line
    folder.mkdir()  # put back: the orchestrator is still serving
    project.drop("builder", "S-2.md", {"id": "S-2"})
    wait_for(lambda: where(project, "builder", "S-2.md") == ["archive"], what="S-2 archived")
    assert orch.stop() == 0


def test_an_unexpected_error_while_starting_fails_the_attempt_instead_of_stranding_the_memo(tmp_path: Path) -> None:
    """Say starting raises what no start should: the run must not hold its slot forever with its memo in active/."""

    async def scenario(root: Path) -> None:
        unhandled: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: unhandled.append(context))
        r = Replay(root, {"builder": {"max_concurrent": 1}})
        r.spawner.break_on = "U-1"
        await r.drop("builder", "U-1.md", front={"id": "U-1"})
        assert where(r, "builder", "U-1.md") == ["failed"]
        reason = (r.config.role_dir("builder") / "failed" / "U-1.reason").read_text(encoding="utf-8")
        assert "could not start the agent: injected fault" in reason
        await r.drop("builder", "U-2.md", front={"id": "U-2"})  # the slot was given back, the next memo runs
        await r.exit("U-2", 0)
        assert where(r, "builder", "U-2.md") == ["archive"]
        assert one_line(r.console.text, "ERROR starting run").endswith("(details in the log)")  # one line here
        r.close()
        gc.collect()
        assert unhandled == [], "no task ended with an exception nobody retrieved"

    play(tmp_path, scenario)


@pytest.mark.internal_error_expected
def test_a_log_folder_that_cannot_be_made_returns_the_memo_and_holds_the_role(project):
    """The state folder is the orchestrator's: a log it cannot open is not the memo's fault, so the memo goes
    back to its inbox (no attempt used, nothing in failed/) and the role waits before it tries again."""
    project.configure({"builder": {"max_concurrent": 1}})
    orch = project.up()
    logs = project.root / ".orchestrator" / "logs"
    if logs.exists():
        shutil.rmtree(logs)
    logs.write_text("not a folder", encoding="utf-8")
    project.drop("builder", "U-1.md", {"id": "U-1"})
    orch.wait_output("cannot open the run's log")
    wait_for(lambda: where(project, "builder", "U-1.md") == ["inbox"], what="U-1 back in its inbox")
    assert project.folder("builder", "failed") == []
    logs.unlink()  # repaired: the role's next try runs it
    wait_for(lambda: where(project, "builder", "U-1.md") == ["archive"], what="U-1 archived", timeout=30)
    assert orch.stop() == 0
    assert "Traceback" not in orch.output


@pytest.mark.os_level
def test_the_sweep_of_an_attempts_leftovers_spares_the_retry(project):
    """Attempt 1 exits leaving a child that ignores SIGTERM; while its ladder waits the grace, attempt 2 runs."""
    project.configure({"builder": {"grace": "1.5s", "retry": {"max": 1, "backoff": ["0.1s"]}}})
    orch = project.up()
    project.drop("builder", "L-1.md", {"id": "L-1", "agent": {"fail_attempts": 1, "stubborn_child": 1, "sleep": 0.6}})
    wait_for(lambda: where(project, "builder", "L-1.md") == ["archive"], what="L-1 archived by its second attempt")
    first = next(r for r in project.records() if r["attempt"] == 1)
    wait_for(lambda: all_dead(first["children"]), what="attempt 1's leftover child killed after the grace")
    assert [r["attempt"] for r in project.records()] == [1, 2]
    orch.wait_output("processes left in its group after exit")
    assert orch.stop() == 0


# ------------------------------------------------------------- crash loops
def test_critical_role_crash_loop_ends_the_orchestrator_with_status_3(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        roles = {
            "pm": {"critical": True, "crash": {"window": "10s", "max": 3}, "retry": {"max": 5, "backoff": ["0.05s"]}},
            "builder": {},
        }
        r = Replay(root, roles)
        await r.drop("builder", "B-9.md", front={"id": "B-9"})
        await r.drop("pm", "P-1.md", front={"id": "P-1"})
        for _ in range(3):
            await r.exit("P-1", 1)
            await r.advance(0.05)
        one_line(r.console.text, "critical role pm crashed 3 times in a row")
        # it ends once the running agent finishes; nothing new starts meanwhile
        assert not r.sup.done.is_set() and r.sup.exit_code == 3
        await r.drop("builder", "B-10.md", front={"id": "B-10"})
        await r.advance(1)
        await r.exit("B-9", 0)
        assert r.sup.done.is_set() and r.sup.exit_code == 3
        assert [a.spec.attempt for a in r.spawner.agents if a.spec.role.name == "pm"] == [1, 2, 3]
        assert [a.spec.memo_paths[0].name for a in r.spawner.agents if a.spec.role.name == "builder"] == ["B-9.md"]
        assert where(r, "pm", "P-1.md") == ["inbox"], "the memo waits in the inbox for the next start"
        assert where(r, "builder", "B-9.md") == ["archive"]
        assert where(r, "builder", "B-10.md") == ["inbox"]
        r.close()

    play(tmp_path, scenario)


def test_a_critical_role_that_cannot_start_is_a_crash_loop_too(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        crash = {"window": "10s", "max": 3}
        r = Replay(root, {"pm": {"critical": True, "crash": crash, "retry": {"max": 5, "backoff": ["0.05s"]}}})
        r.spawner.refuse = "/x/agent.sh is not an executable file (role pm)"
        await r.drop("pm", "P-1.md", front={"id": "P-1"})
        for _ in range(3):
            await r.advance(0.05)
        assert r.sup.done.is_set() and r.sup.exit_code == 3
        one_line(r.console.text, "critical role pm crashed 3 times in a row")
        assert where(r, "pm", "P-1.md") == ["inbox"]
        assert r.spawner.agents == []
        r.close()

    play(tmp_path, scenario)


def test_up_exits_with_status_3_after_a_crash_loop_of_a_role_that_cannot_start(project):
    """The rule is replayed above; this is the process's side: `up` itself ends with status 3 and says so."""
    wrapper = project.root / "agent.sh"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {STAND_IN} "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    crash = {"window": "10s", "max": 3}
    project.configure({"pm": {"command": [str(wrapper)], "critical": True, "crash": crash, "retry": {"max": 5}}})
    orch = project.up()
    wrapper.chmod(0o644)
    project.drop("pm", "P-1.md", {"id": "P-1"})
    assert orch.wait() == 3
    one_line(orch, "critical role pm crashed 3 times in a row")
    one_line(orch, "orchestrator exits with status 3")
    assert where(project, "pm", "P-1.md") == ["inbox"]
    assert project.records() == []


# the crash window itself (a long run resets the count) is proven without timing in tests/test_replay.py


# ---------------------------------------------------------------- timeouts
@pytest.mark.os_level
def test_timeout_kills_the_whole_tree_and_fails_without_retry(project):
    project.configure({"builder": {"timeout": "0.5s", "grace": "0.3s", "retry": {"max": 2, "backoff": ["0.05s"]}}})
    orch = project.up()
    project.drop(
        "builder",
        "T-1.md",
        {"id": "T-1", "subject": "slow", "agent": {"sleep": 60, "grandchild": True, "ignore_term": True}},
    )
    wait_for(lambda: where(project, "builder", "T-1.md") == ["failed"], what="T-1 in failed/")
    [record] = project.records()
    assert record["children"]
    assert all_dead([record["pid"], *record["children"]]), "agent and grandchild are dead"
    reason = reason_of(project, "builder", "T-1.md")
    assert reason.startswith("timed_out: timed out after 0.5s (attempt 1)")
    one_line(orch, "T-1 passed its timeout of 0.5s; stopping it")
    one_line(orch, "timed_out T-1: timed out after 0.5s")
    orch.wait_output("grace of 0.3s over; SIGKILL")
    [run] = [r for r in project.status()["recent"] if r["memo"] == "T-1.md"]
    assert run["state"] == "timed_out" and "timed out after 0.5s" in run["reason"]
    assert orch.stop() == 0
    assert len(project.records()) == 1, "a timed-out run is not retried"


def test_timeout_is_retried_with_retry_timeouts(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        settings = {
            "timeout": "0.5s",
            "grace": "0.2s",
            "retry_timeouts": True,
            "retry": {"max": 1, "backoff": ["0.05s"]},
        }
        r = Replay(root, {"builder": settings})
        await r.drop("builder", "T-2.md", front={"id": "T-2"})
        await r.advance(0.5)
        assert r.spawner.stops == [(r.agent("T-2", 1).spec.run_id, 0.2, False)], "attempt 1 is stopped at its timeout"
        await r.advance(0.05)
        await r.exit("T-2", 0)
        assert where(r, "builder", "T-2.md") == ["archive"]
        assert [a.spec.attempt for a in r.spawner.agents] == [1, 2]
        one_line(r.console.text, "T-2 passed its timeout of 0.5s; stopping it")
        one_line(r.console.text, "T-2 timed out after 0.5s (attempt 1); retry 1 of 1 in 0.05s (retry_timeouts)")
        r.close()

    play(tmp_path, scenario)


# --------------------------------------------------- the orchestrator dies
@pytest.mark.os_level
def test_orchestrator_killed_mid_run_then_restarted(project):
    # the stop-and-requeue way, kept as `recovery: restart`; adoption (the default) is in test_keeper.py
    project.configure({"builder": {}}, recovery="restart")
    first = project.up()
    project.drop(
        "builder",
        "R-1.md",
        {"id": "R-1", "agent": {"sleep_by_attempt": {1: 120}, "grandchild": True, "record_peers": True}},
    )
    [orphan] = wait_for(lambda: project.records(), what="the first agent started")
    first.proc.kill()
    first.wait()
    assert pid_alive(orphan["pid"]) and all(pid_alive(p) for p in orphan["children"]), "the agent outlived us"
    assert where(project, "builder", "R-1.md") == ["active"]

    second = project.up()
    wait_for(lambda: where(project, "builder", "R-1.md") == ["archive"], what="R-1 archived after the restart")
    assert all_dead([orphan["pid"], *orphan["children"]]), "the orphan and its grandchild were stopped"
    records = project.records()
    assert [r["attempt"] for r in records] == [1, 2], "the attempt count was kept"
    assert records[1]["peers"] == [], "no other agent of R-1 was alive when the second one started"
    one_line(second, "warning: R-1.md was in active/ when the orchestrator stopped; back in the inbox")
    second.wait_output(f"recovery: run {orphan['run_id']} was running when the orchestrator stopped; stopped its agent")
    assert second.stop() == 0
    assert len(project.records()) == 2


@pytest.mark.os_level
def test_three_sigints_return_running_memos_and_kill_their_trees(project):
    project.configure({"builder": {}})
    orch = project.up()
    for name in ("I-1.md", "I-2.md"):
        agent = {"sleep": 120, "grandchild": True, "ignore_term": True}
        project.drop("builder", name, {"id": name[:-3], "agent": agent})
    records = wait_for(lambda: len(project.records()) == 2 and project.records(), what="both agents started")
    for _ in range(3):
        orch.signal(signal.SIGINT)
        # signals sent back to back merge into one; a person's presses do not: wait for each to be taken
        wait_for(lambda: not sigint_pending(orch.proc.pid), what="the SIGINT delivered")
    assert orch.wait() == 1
    for record in records:
        assert all_dead([record["pid"], *record["children"]])
    assert where(project, "builder", "I-1.md") == ["inbox"]
    assert where(project, "builder", "I-2.md") == ["inbox"]
    out = orch.output
    one_line(orch, "ending now: Ctrl-C pressed 3 times")
    assert len(lines_with(out, "to the inbox: the orchestrator was force-stopped")) == 2


@pytest.mark.os_level
def test_sigterm_is_graceful(project):
    project.configure({"builder": {"max_concurrent": 1}})
    orch = project.up()
    release = project.root / "release"
    project.drop("builder", "G-1.md", {"id": "G-1", "agent": {"until_file": str(release)}})
    wait_for(lambda: project.records(), what="G-1 started")
    project.drop("builder", "G-2.md", {"id": "G-2"})
    wait_for(lambda: "G-2.md" in project.status().get("queued_memos", {}).get("builder", []), what="G-2 queued")
    orch.signal(signal.SIGTERM)
    orch.wait_output("ending: signal SIGTERM; waiting for 1 running agent(s)")
    assert orch.proc.poll() is None, "it waits for the running agent"
    release.touch()
    assert orch.wait() == 0
    assert where(project, "builder", "G-1.md") == ["archive"], "the running agent finished its work"
    assert where(project, "builder", "G-2.md") == ["inbox"], "queued work waits for the next start"
    assert len(project.records()) == 1


# --------------------------------------------------------------- bad input
def test_undeliverable_memos_go_to_failed_and_never_reach_an_agent(project):
    project.configure({"builder": {}}, max_memo_bytes=300)
    orch = project.up()
    inbox = project.root / "memo" / "builder" / "inbox"
    (inbox / ".binary.md.tmp").write_bytes(b"\xff\xfe\x00\x01 not text \x80\n")
    os.rename(inbox / ".binary.md.tmp", inbox / "binary.md")
    project.drop("builder", "big.md", body="x" * 400)
    target = project.root / "elsewhere.md"
    target.write_text("---\nid: elsewhere\n---\nsecret\n", encoding="utf-8")
    os.symlink(target, inbox / "link.md")
    os.mkfifo(inbox / "pipe.md")
    (inbox / "broken.md").write_text("---\nsubject: [unclosed\nid: {\n---\nstill a memo\n", encoding="utf-8")
    project.drop("builder", "good.md", {"id": "good"})

    expected = {
        "binary.md": "not UTF-8 text",
        "big.md": "larger than max_memo_bytes (300)",
        "link.md": "symbolic link",
        "pipe.md": "not a regular file",
    }
    for name in expected:
        wait_for(lambda n=name: where(project, "builder", n) == ["failed"], what=f"{name} in failed/")
    for name in ("broken.md", "good.md"):
        wait_for(lambda n=name: where(project, "builder", n) == ["archive"], what=f"{name} archived")
    for name, why in expected.items():
        reason = reason_of(project, "builder", name)
        assert reason.startswith("not delivered: ") and why in reason, reason
        assert why in one_line(orch, f"{name} not delivered: ")
    assert sorted(Path(r["memo"]).name for r in project.records()) == ["broken.md", "good.md"]
    assert "delivering it anyway" in one_line(orch, "broken.md: front matter is not valid YAML")
    assert target.read_text(encoding="utf-8").endswith("secret\n"), "a symlink's target is never touched"
    failed = project.root / "memo" / "builder" / "failed"
    assert (failed / "link.md").is_symlink()
    assert stat.S_ISFIFO(os.lstat(failed / "pipe.md").st_mode)
    assert "Traceback" not in orch.output and "ERROR" not in orch.output
    assert orch.stop() == 0


def test_a_memo_deleted_before_its_claim_is_simply_gone(project):
    project.configure({"builder": {"max_concurrent": 1}})
    orch = project.up()
    release = project.root / "release"
    project.drop("builder", "D-1.md", {"id": "D-1", "agent": {"until_file": str(release)}})
    wait_for(lambda: project.records(), what="D-1 started")
    doomed = project.drop("builder", "D-2.md", {"id": "D-2"})
    wait_for(lambda: "D-2.md" in project.status().get("queued_memos", {}).get("builder", []), what="D-2 queued")
    doomed.unlink()
    orch.wait_output("D-2.md left the inbox before it was claimed")
    release.touch()
    wait_for(lambda: where(project, "builder", "D-1.md") == ["archive"], what="D-1 archived")
    project.drop("builder", "D-3.md", {"id": "D-3"})
    wait_for(lambda: where(project, "builder", "D-3.md") == ["archive"], what="D-3 archived")
    assert where(project, "builder", "D-2.md") == []
    assert [Path(r["memo"]).name for r in project.records()] == ["D-1.md", "D-3.md"]
    assert "ERROR" not in orch.output and "Traceback" not in orch.output
    assert orch.stop() == 0


# ------------------------------------------------------------- the watcher
@pytest.mark.parametrize("watcher", ["inotify", "watchdog"])
def test_an_exception_in_event_handling_does_not_stop_later_memos(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watcher: str
) -> None:
    """The real watcher (the loop's inotify reader, or watchdog's thread) over a real inbox, feeding the real loop
    of a replay, with its classification made to raise for one memo: that costs a rescan, which still runs the
    memo, and every memo runs exactly once."""
    monkeypatch.setenv("ORCHESTRATOR_WATCHER", watcher)
    monkeypatch.setattr(InotifyWatcher, "classify", faulty_inotify_classify(InotifyWatcher.classify, "faultme"))
    monkeypatch.setattr(watchdog_watcher, "classify", faulty_classify(watchdog_watcher.classify, "faultme"))

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}})
        live = make_watcher({"builder": r.config.role_dir("builder")}, r.sup.post)
        live.start()
        try:
            inbox = r.config.role_dir("builder") / "inbox"
            for name in ("F-faultme.md", "F-plain.md"):
                tmp = inbox / f".{name}.tmp"
                tmp.write_text(f"---\nid: {name[:-3]}\n---\nbody\n", encoding="utf-8")
                os.utime(tmp, (time.time() - 60, time.time() - 60))  # settled, when a rescan finds it
                os.rename(tmp, inbox / name)

            async def archived(*names: str) -> None:
                deadline = time.monotonic() + DEADLINE
                while True:
                    for agent in list(r.spawner.agents):
                        if agent.alive:
                            agent.exit(0)
                    await asyncio.sleep(0.01)
                    if all(where(r, "builder", n) == ["archive"] for n in names):
                        return
                    assert time.monotonic() < deadline, f"{names} not archived: {r.console.text}"

            await archived("F-faultme.md", "F-plain.md")
            assert "rescan: error while handling" in r.console.text
            tmp = inbox / ".F-later.md.tmp"
            tmp.write_text("---\nid: F-3\n---\nbody\n", encoding="utf-8")
            os.rename(tmp, inbox / "F-later.md")
            await archived("F-later.md")
            names = [a.spec.memo_paths[0].name for a in r.spawner.agents]
            assert sorted(names) == ["F-faultme.md", "F-later.md", "F-plain.md"], "each ran exactly once"
        finally:
            live.stop()
        r.close()

    play(tmp_path, scenario)


@pytest.mark.parametrize("remove", ["inbox", "role folder"])
def test_an_inbox_deleted_and_recreated_keeps_working(project, remove):
    project.configure({"builder": {}})
    orch = project.up()
    project.drop("builder", "W-1.md", {"id": "W-1"})
    wait_for(lambda: where(project, "builder", "W-1.md") == ["archive"], what="W-1 archived")
    role_dir = project.root / "memo" / "builder"
    if remove == "inbox":
        shutil.rmtree(role_dir / "inbox")
    else:  # moved away first: the orchestrator makes a missing inbox again at once, which would break rm -rf
        os.rename(role_dir, project.root / "trash")
        shutil.rmtree(project.root / "trash")
    (role_dir / "inbox").mkdir(parents=True, exist_ok=True)
    project.drop("builder", "W-2.md", {"id": "W-2"})
    wait_for(lambda: where(project, "builder", "W-2.md") == ["archive"], what="W-2 archived after the re-creation")
    orch.wait_output("rescan: folder" if remove == "inbox" else "restarting it and rescanning the inboxes")
    project.drop("builder", "W-3.md", {"id": "W-3"})
    wait_for(lambda: where(project, "builder", "W-3.md") == ["archive"], what="W-3 archived")
    assert sorted(Path(r["memo"]).name for r in project.records()) == ["W-1.md", "W-2.md", "W-3.md"]
    assert "Traceback" not in orch.output
    assert orch.stop() == 0


# -------------------------------------------------------------- visibility
def test_status_shows_retry_wait_with_next_attempt_and_failed_reasons(project):
    project.configure({"builder": {"retry": {"max": 1, "backoff": ["3s"]}}}, max_concurrent=1)
    orch = project.up()
    project.drop("builder", "V-1.md", {"id": "V-1", "agent": {"exit": 4}})

    def waiting() -> dict | None:
        runs = [r for r in project.status()["runs"] if r["memo"] == "V-1.md" and r["state"] == "retry_wait"]
        return runs[0] if runs else None

    run = wait_for(waiting, what="V-1 in retry_wait")
    assert run["next_attempt_at"] and run["attempt"] == 1 and run["pid"] is None  # not its dead agent's
    human = project.cli("status")
    assert human.returncode == 0
    assert "retry_wait" in human.stdout and run["next_attempt_at"][:19] in human.stdout
    orch.wait_output("V-1 retry 1 of 1 in 3s")
    # waiting for a retry holds no slot: with max_concurrent 1, other work runs meanwhile
    project.drop("builder", "V-2.md", {"id": "V-2"})
    wait_for(lambda: where(project, "builder", "V-2.md") == ["archive"], what="V-2 archived")
    wait_for(lambda: where(project, "builder", "V-1.md") == ["failed"], what="V-1 in failed/")
    starts = [(Path(r["memo"]).name, r["attempt"]) for r in sorted(project.records(), key=lambda r: r["start"])]
    assert starts == [("V-1.md", 1), ("V-2.md", 1), ("V-1.md", 2)]
    [recent] = [r for r in project.status()["recent"] if r["memo"] == "V-1.md"]
    assert recent["state"] == "failed" and recent["reason"] == "exit code 4" and recent["exit_code"] == 4
    assert "exit code 4" in project.cli("status").stdout
    assert orch.stop() == 0
    # the database still answers with the orchestrator gone
    [recent] = [r for r in project.status()["recent"] if r["memo"] == "V-1.md"]
    assert recent["state"] == "failed" and recent["reason"] == "exit code 4"


def test_status_with_no_orchestrator_shows_no_pid_for_a_run_waiting_for_its_retry(project):
    """Its last agent is dead; the database keeps that pid until the next attempt, and status read it from there."""
    project.configure({"builder": {"retry": {"max": 1, "backoff": ["1h"]}}})
    orch = project.up()
    project.drop("builder", "W-1.md", {"id": "W-1", "agent": {"exit": 4}})
    wait_for(lambda: [r["state"] for r in project.status()["runs"]] == ["retry_wait"], what="W-1 waiting to retry")
    orch.signal(signal.SIGKILL)
    orch.wait()
    offline = project.status()
    assert offline["running"] is False
    assert [(r["memo"], r["state"], r["pid"]) for r in offline["runs"]] == [("W-1.md", "retry_wait", None)]
