"""The supervisor's rules as scripted event histories through the real loop (``tests/replay.py``).

No agent process starts and no real time passes: the clock is stepped and the fake
agents exit when the script says. The real-process tests prove the same behaviour end
to end; these prove the rules exactly, including the timing-sensitive ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.events import CancelRequested, InterruptRequested, StopRequested, Tick
from orchestrator.core.states import ALLOWED, IllegalTransition, RunState, check_transition
from orchestrator.supervisor.recovery import recover
from replay import Boom, Replay

Scenario = Callable[[Path], Awaitable[list[tuple[RunState, RunState]]]]


def play(tmp_path: Path, scenario: Callable[[Path], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario(tmp_path))


# ------------------------------------------------------------------ retries, timeouts, crash loops
def test_retries_follow_the_backoff_on_the_injected_clock(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 3, "backoff": ["2s", "6s"]}}})
        await r.drop("builder", "B-1.md")
        await r.exit("B-1", 1)
        assert r.state("B-1") == "retry_wait"
        assert r.clock.pending() == [2.0]
        await r.advance(1.99)
        assert len(r.spawner.agents) == 1, "not before its backoff"
        await r.advance(0.01)
        assert r.agent("B-1").spec.attempt == 2
        await r.exit("B-1", 1)
        assert r.clock.pending()[0] == 6.0, "the backoff grows"
        await r.advance(6)
        await r.exit("B-1", 0)
        assert r.folder("builder", "archive") == ["B-1.md"]
        attempts = r.sup.store.attempts(r.sup.store.history()[-1]["run_id"])
        assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "failed"), (2, "failed"), (3, "succeeded")]
        assert "B-1 retry 1 of 3 in 2s" in r.console.text and "B-1 retry 2 of 3 in 6s" in r.console.text
        r.close()

    play(tmp_path, scenario)


def test_retries_run_out_into_failed_with_the_reason(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 1, "backoff": ["1s"]}}, "pm": {}}, notify="pm")
        await r.drop("builder", "B-2.md")
        await r.exit("B-2", 4)
        await r.advance(1)
        await r.exit("B-2", 4)
        assert r.folder("builder", "failed") == ["B-2.md"]
        reason = (r.config.role_dir("builder") / "failed" / "B-2.reason").read_text()
        assert reason.startswith("failed: exit code 4") and reason.count(": failed, exit code 4,") == 2
        assert any(name.startswith(tuple("0123456789abcdef")) for name in r.folder("pm", "inbox")), "pm is told"
        r.close()

    play(tmp_path, scenario)


def test_a_long_run_resets_the_crash_count(tmp_path: Path) -> None:
    """Failures within the crash window count; one after it resets the count; the third in a row ends with 3."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"pm": {"critical": True, "crash": {"window": "2s", "max": 3}}})

        async def fail(name: str, ran: float, folder: str = "failed") -> None:
            await r.drop("pm", f"{name}.md")
            await r.advance(ran)
            await r.exit(name, 1)
            assert f"{name}.md" in r.folder("pm", folder)

        await fail("P-1", 0.5)
        await fail("P-2", 1.9)
        assert r.sup.outcomes.crashes.counts["pm"] == 2
        await fail("P-3", 2.5)  # fails, but after the window: not a crash, and the count starts again
        assert r.sup.outcomes.crashes.counts["pm"] == 0
        await fail("P-4", 0.1)
        await fail("P-5", 0.1)
        assert r.sup.outcomes.crashes.counts["pm"] == 2 and r.sup.ending is None
        await fail("P-6", 0.1, folder="inbox")  # ending: the memo waits in the inbox for the next start
        assert r.sup.ending == "graceful" and r.sup.exit_code == 3
        assert "critical role pm crashed 3 times in a row" in r.console.text
        assert r.sup.done.is_set()
        r.close()

    play(tmp_path, scenario)


def test_a_timeout_stops_the_agent_and_fails_without_retry(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"timeout": "30m", "grace": "3s", "retry": {"max": 2, "backoff": ["1s"]}}})
        await r.drop("builder", "T-1.md")
        await r.advance(30 * 60 - 1)
        assert r.state("T-1") == "running"
        await r.advance(1)
        assert r.folder("builder", "failed") == ["T-1.md"]
        assert r.spawner.stops == [(r.agent("T-1").spec.run_id, 3.0, False)]
        assert "T-1 passed its timeout of 1800s; stopping it" in r.console.text
        assert len(r.spawner.agents) == 1, "a timed-out run is not retried"
        r.close()

    play(tmp_path, scenario)


def test_a_daily_budget_blocks_until_the_next_day(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"budget": {"per_day_usd": 1.0}}})
        await r.drop("builder", "C-1.md")
        agent = r.agent("C-1")
        agent.result = {"cost_usd": 1.5, "session_id": "s1"}
        await r.exit("C-1", 0)
        r.sup.post(__import__("orchestrator.core.events", fromlist=["Tick"]).Tick())
        await r.drop("builder", "C-2.md")
        assert len(r.spawner.agents) == 1 and "builder" in r.sup.budgets.current
        hours_left = 24 - r.clock.now().hour
        await r.advance(hours_left * 3600)
        r.sup.post(__import__("orchestrator.core.events", fromlist=["Tick"]).Tick())
        await r.settle()
        assert r.agent("C-2").spec.attempt == 1, "the new day starts the waiting memo"
        r.close()

    play(tmp_path, scenario)


def test_a_daily_budget_counts_the_teams_day_in_its_timezone(tmp_path: Path) -> None:
    """Found by a review: the budget's day was the machine's (UTC here) while wakes and tasks keep the team's
    ``timezone``; a team in Tokyo had its daily budget start again at 09:00 its time."""

    async def scenario(root: Path) -> None:
        start = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)  # 23:00 in Tokyo
        r = Replay(root, {"builder": {"budget": {"per_day_usd": 1.0}}}, start, timezone="Asia/Tokyo")
        await r.drop("builder", "C-1.md")
        r.agent("C-1").result = {"cost_usd": 1.5, "session_id": "s1"}
        await r.exit("C-1", 0)
        await r.drop("builder", "C-2.md")
        assert len(r.spawner.agents) == 1
        assert "new runs wait until 2026-12-01" in r.sup.budgets.current["builder"]
        await r.advance(90 * 60)  # 15:30 UTC, 00:30 on December 1st in Tokyo: still November 30th in UTC
        r.sup.post(Tick())
        await r.settle()
        assert r.agent("C-2").spec.attempt == 1, "Tokyo's new day starts the waiting memo"
        r.close()

    play(tmp_path, scenario)


def test_a_retry_due_but_held_says_so_instead_of_a_time_gone_by(tmp_path: Path) -> None:
    """Found by a review: a retry held by a daily budget showed its next attempt at a time already past."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"budget": {"per_day_usd": 1.0}, "retry": {"max": 2, "backoff": ["60s"]}}})
        await r.drop("builder", "B-1.md")
        r.agent("B-1").result = {"cost_usd": 1.5, "session_id": "s1"}
        await r.exit("B-1", 1)
        r.sup.post(Tick())
        await r.settle()
        (run,) = r.sup.snapshot()["runs"]
        assert run["state"] == "retry_wait" and run["next_attempt_at"] and not run["activity"]
        await r.advance(60)
        (run,) = r.sup.snapshot()["runs"]
        assert run["state"] == "retry_wait" and len(r.spawner.agents) == 1, "the budget holds its retry"
        due = f"retry due since {run['next_attempt_at'][11:19]}; it waits to start"
        assert run["activity"] == f"{due} (a free slot, or a budget, pause or hold below)"
        r.close()

    play(tmp_path, scenario)


def test_fifo_across_roles_under_the_team_limit(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"a": {}, "b": {}}, max_concurrent=1)
        for name, role in (("1.md", "a"), ("2.md", "b"), ("3.md", "a"), ("4.md", "b")):
            await r.drop(role, name)
        for name in ("1", "2", "3", "4"):
            await r.exit(name, 0)
        assert [a.spec.memo_paths[0].name for a in r.spawner.agents] == ["1.md", "2.md", "3.md", "4.md"]
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ loud invariants
def test_an_internal_error_ends_its_run_as_failed_and_keeps_the_memo(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root)
        await r.drop("builder", "X-1.md")
        run = r.run_of("X-1")
        r.sup.post(Boom(run.run_id))  # type: ignore[arg-type]
        await r.settle()
        assert r.folder("builder", "failed") == ["X-1.md"] and r.folder("builder", "active") == []
        row = r.sup.store.run(run.run_id)
        assert row is not None and row["state"] == "failed" and row["reason"].startswith("internal error: TypeError")
        assert "internal error while handling Boom" in r.console.text
        assert r.spawner.stops, "its agent is stopped, not left running"
        assert r.sup.lc.slots.in_use == 0
        await r.drop("builder", "X-2.md")
        await r.exit("X-2", 0)
        assert r.folder("builder", "archive") == ["X-2.md"], "the loop goes on"
        r.close()

    play(tmp_path, scenario)


def test_an_attempt_is_on_record_before_its_agent_is_spawned(tmp_path: Path) -> None:
    """Defect: a kill between the spawn and the pid's record lost the attempt count."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 3, "backoff": ["1s"]}}})
        r.spawner.hold_start = asyncio.Event()  # the spawn never finishes: the orchestrator "dies" here
        await r.drop("builder", "K-1.md")
        run = r.run_of("K-1")
        assert run.state is RunState.STARTING
        row = r.sup.store.run(run.run_id)
        assert row is not None and row["state"] == "starting" and row["attempt"] == 1 and row["pid"] is None
        r.close()
        # the next orchestrator: its recovery keeps the count, so the memo runs next as attempt 2
        r2 = Replay(root, {"builder": {"retry": {"max": 3, "backoff": ["1s"]}}})
        await recover(r2.config, r2.sup.store, r2.console, r2.sup.lc)
        assert r2.folder("builder", "inbox") == ["K-1.md"]
        assert r2.sup.store.memo_attempts("builder", "K-1.md") == 1
        assert "(1 attempt(s) so far)" in r2.console.text
        r2.close()

    play(tmp_path, scenario)


def test_forbidden_transitions_raise() -> None:
    for old in RunState:
        for new in RunState:
            if new in ALLOWED[old]:
                check_transition(old, new)
            else:
                with pytest.raises(IllegalTransition):
                    check_transition(old, new)


# ------------------------------------------------------------------ every edge of the table, walked
async def _cancel(r: Replay, memo: str) -> dict[str, Any]:
    reply = await r.request(CancelRequested, memo=memo)
    await r.settle()
    return reply.result()


async def walk_success_failure_retry(root: Path) -> list[Any]:
    r = Replay(root, {"builder": {"retry": {"max": 1, "backoff": ["1s"]}}, "zero": {"retry": {"max": 0}}})
    await r.drop("builder", "ok.md")
    await r.exit("ok", 0)  # QUEUED->STARTING->RUNNING->SUCCEEDED
    await r.drop("builder", "retry.md")
    await r.exit("retry", 1)  # RUNNING->RETRY_WAIT
    await r.advance(1)  # RETRY_WAIT->STARTING
    await r.exit("retry", 1)  # RUNNING->FAILED
    await r.drop("zero", "badbytes.md", body="ok")
    bad = r.config.role_dir("zero") / "inbox" / "bin.md"
    bad.write_bytes(b"\xff\xfe not utf-8")
    r.sup.post(__import__("orchestrator.core.events", fromlist=["MemoSeen"]).MemoSeen("zero", bad, True))
    await r.settle()  # QUEUED->FAILED (rejected)
    assert "bin.md" in r.folder("zero", "failed")
    r.close()
    return r.console.edges


async def walk_start_failures(root: Path) -> list[Any]:
    r = Replay(root, {"builder": {"retry": {"max": 1, "backoff": ["1s"]}}})
    r.spawner.refuse = "no such command"
    await r.drop("builder", "s.md")  # STARTING->RETRY_WAIT
    await r.advance(1)  # STARTING->FAILED
    assert r.folder("builder", "failed") == ["s.md"]
    r.spawner.refuse = None
    r.spawner.hold_start = asyncio.Event()
    await r.drop("builder", "c.md")
    answer = await r.request(CancelRequested, memo="c")  # STARTING->CANCELLING
    r.spawner.hold_start.set()
    await r.settle()  # CANCELLING->CANCELLED once started and stopped
    assert answer.result()["previous_state"] == "starting" and r.folder("builder", "cancelled") == ["c.md"]
    r.spawner.hold_start = asyncio.Event()
    await r.drop("builder", "f.md")
    await r.request(StopRequested, force=True)  # STARTING->STOPPING
    r.spawner.hold_start.set()
    await r.settle()  # STOPPING->RETURNED
    assert r.folder("builder", "inbox") == ["f.md"]
    r.close()
    return r.console.edges


async def walk_start_fails_while_ending(root: Path) -> list[Any]:
    r = Replay(root, {"builder": {"retry": {"max": 1, "backoff": ["1s"]}}})
    r.spawner.hold_start = asyncio.Event()
    r.spawner.refuse = "gone"
    await r.drop("builder", "e.md")
    await r.request(StopRequested)  # graceful
    r.spawner.hold_start.set()
    await r.settle()  # STARTING->RETURNED
    assert r.folder("builder", "inbox") == ["e.md"]
    r.close()
    return r.console.edges


async def walk_running_ends(root: Path) -> list[Any]:
    r = Replay(root, {"builder": {"timeout": "10s", "retry": {"max": 1, "backoff": ["1s"]}}})
    await r.drop("builder", "c.md")
    await _cancel(r, "c")  # RUNNING->CANCELLING->CANCELLED
    await r.drop("builder", "t.md")
    await r.advance(10)  # RUNNING->TIMING_OUT->TIMED_OUT
    await r.drop("builder", "w.md")
    await r.exit("w", 1)
    await _cancel(r, "w")  # RETRY_WAIT->CANCELLED
    await r.drop("builder", "q1.md")
    await r.drop("builder", "g.md")
    await r.request(StopRequested)  # graceful: g keeps running
    await r.exit("g", 1)  # RUNNING->RETURNED (the last attempt failed while ending)
    await r.exit("q1", 0)
    r.close()
    return r.console.edges


async def walk_queued_cancel_and_retry_return(root: Path) -> list[Any]:
    r = Replay(root, {"builder": {"max_concurrent": 1, "retry": {"max": 1, "backoff": ["1s"]}}})
    await r.drop("builder", "busy.md")
    await r.drop("builder", "waits.md")
    answer = await _cancel(r, "waits")  # the run on record: QUEUED->CANCELLED
    assert answer["previous_state"] == "queued"
    await r.exit("busy", 1)  # RETRY_WAIT
    await r.request(StopRequested)  # RETRY_WAIT->RETURNED
    assert r.folder("builder", "inbox") == ["busy.md"]
    r.close()
    return r.console.edges


async def walk_force(root: Path) -> list[Any]:
    r = Replay(root, {"builder": {"timeout": "5s"}, "sdk": {"backend": "sdk"}})
    await r.drop("builder", "run.md")
    await r.drop("builder", "slow.md")
    r.spawner.hold_stop = asyncio.Event()
    await r.advance(5)  # both TIMING_OUT, their stops held
    await _cancel_nowait(r, "slow")  # TIMING_OUT->CANCELLING
    await r.request(StopRequested, force=True)  # run: TIMING_OUT->STOPPING
    r.spawner.hold_stop.set()
    await r.settle()  # STOPPING->RETURNED, CANCELLING->CANCELLED
    r.close()
    return r.console.edges


async def _cancel_nowait(r: Replay, memo: str) -> None:
    await r.request(CancelRequested, memo=memo)


async def walk_force_running_and_interrupting(root: Path) -> list[Any]:
    r = Replay(root, {"builder": {}, "sdk": {"backend": "sdk"}})
    await r.drop("builder", "a.md")
    await r.drop("sdk", "i.md")
    await r.request(InterruptRequested, memo="i")  # RUNNING->INTERRUPTING
    await r.request(StopRequested, force=True)  # RUNNING->STOPPING, INTERRUPTING->STOPPING
    assert r.folder("builder", "inbox") == ["a.md"] and r.folder("sdk", "inbox") == ["i.md"]
    r.close()
    return r.console.edges


async def walk_interrupts(root: Path) -> list[Any]:
    r = Replay(
        root,
        {
            "sdk": {"backend": "sdk", "timeout": "10s", "retry": {"max": 1, "backoff": ["1s"]}},
            "once": {"backend": "sdk", "retry": {"max": 0}},
        },
    )
    await r.drop("sdk", "x.md")
    answer = await r.request(InterruptRequested, memo="x")
    await r.exit("x", 3)  # INTERRUPTING->CANCELLED
    assert answer.result()["state"] == "cancelled"
    await r.drop("sdk", "y.md")
    await r.request(InterruptRequested, memo="y")
    await r.exit("y", 0)  # INTERRUPTING->SUCCEEDED
    await r.drop("sdk", "z.md")
    r.agent("z").refuse_interrupt = True
    refused = await r.request(InterruptRequested, memo="z")  # INTERRUPTING->RUNNING
    assert isinstance(refused.exception(), Exception) and r.state("z") == "running"
    r.agent("z").refuse_interrupt = False
    await r.request(InterruptRequested, memo="z")
    await _cancel(r, "z")  # INTERRUPTING->CANCELLING
    await r.drop("sdk", "t.md")
    await r.request(InterruptRequested, memo="t")
    await r.advance(10)  # INTERRUPTING->TIMING_OUT
    await r.drop("sdk", "f.md")
    await r.request(InterruptRequested, memo="f")
    r.agent("f").interrupted = False  # a tell came after the interrupt: its failure is a failure
    await r.exit("f", 1)  # INTERRUPTING->RETRY_WAIT
    await r.drop("once", "o.md")
    await r.request(InterruptRequested, memo="o")
    r.agent("o").interrupted = False
    await r.exit("o", 1)  # INTERRUPTING->FAILED
    await r.drop("once", "g.md")
    await r.request(InterruptRequested, memo="g")
    r.agent("g").interrupted = False
    await r.request(StopRequested)
    await r.exit("g", 1)  # INTERRUPTING->RETURNED
    r.close()
    return r.console.edges


async def walk_timeouts(root: Path) -> list[Any]:
    r = Replay(root, {"builder": {"timeout": "5s", "retry_timeouts": True, "retry": {"max": 1, "backoff": ["1s"]}}})
    await r.drop("builder", "t.md")
    await r.advance(5)  # TIMING_OUT->RETRY_WAIT (retry_timeouts)
    assert r.state("t") == "retry_wait"
    r.spawner.hold_stop = asyncio.Event()
    await r.advance(1)
    await r.advance(5)  # attempt 2 times out, its stop held
    await r.request(StopRequested)  # graceful ending during the timeout's ladder
    r.spawner.hold_stop.set()
    await r.settle()  # TIMING_OUT->RETURNED
    assert r.folder("builder", "inbox") == ["t.md"]
    r.close()
    return r.console.edges


async def walk_internal_errors(root: Path) -> list[Any]:
    r = Replay(root, {"builder": {"timeout": "5s", "retry": {"max": 1, "backoff": ["9s"]}}})

    async def boom(memo: str) -> None:
        r.sup.post(Boom(r.run_of(memo).run_id))  # type: ignore[arg-type]
        await r.settle()

    r.spawner.hold_start = asyncio.Event()
    await r.drop("builder", "s.md")
    await boom("s")  # STARTING->FAILED
    r.spawner.hold_start.set()
    await r.settle()
    r.spawner.hold_start = None
    await r.drop("builder", "w.md")
    await r.exit("w", 1)
    await boom("w")  # RETRY_WAIT->FAILED
    r.spawner.hold_stop = asyncio.Event()
    await r.drop("builder", "c.md")
    await _cancel_nowait(r, "c")
    await boom("c")  # CANCELLING->FAILED
    await r.drop("builder", "t.md")
    await r.advance(5)
    await boom("t")  # TIMING_OUT->FAILED
    await r.drop("builder", "i.md")
    run = r.run_of("i")
    r.sup.lc.transition(run, RunState.INTERRUPTING)  # as an interrupt would
    await boom("i")  # INTERRUPTING->FAILED
    await r.drop("builder", "f.md")
    await r.request(StopRequested, force=True)
    await boom("f")  # STOPPING->FAILED
    r.spawner.hold_stop.set()
    await r.settle()
    assert r.sup.lc.slots.in_use == 0 and not r.sup.runs
    r.close()
    return r.console.edges


async def walk_recovery(root: Path) -> list[Any]:
    r = Replay(root, {"builder": {}})
    store = r.sup.store
    (r.config.role_dir("builder") / "active" / "q.md").write_text("q\n", encoding="utf-8")
    store.insert_run(
        role="builder",
        memos=["q.md"],
        memo_ids=[None],
        state="queued",
        attempt=1,
        created_at="2026-11-30T09:00:00.000+00:00",
    )
    gone = r.root / "memo" / "retired" / "active"
    gone.mkdir(parents=True)
    (gone / "g.md").write_text("g\n", encoding="utf-8")
    store.insert_run(
        role="retired",
        memos=["g.md"],
        memo_ids=[None],
        state="cancelling",
        attempt=1,
        created_at="2026-11-30T09:00:00.000+00:00",
    )
    await recover(r.config, store, r.console, r.sup.lc)  # QUEUED->RETURNED, CANCELLING->RETURNED (role gone)
    assert r.folder("builder", "inbox") == ["q.md"]
    assert not r.sup.runs and r.sup.lc.slots.in_use == 0
    r.close()
    return r.console.edges


WALKS = [
    walk_success_failure_retry,
    walk_start_failures,
    walk_start_fails_while_ending,
    walk_running_ends,
    walk_queued_cancel_and_retry_return,
    walk_force,
    walk_force_running_and_interrupting,
    walk_interrupts,
    walk_timeouts,
    walk_internal_errors,
    walk_recovery,
]


def test_every_allowed_transition_is_taken_by_some_scenario(tmp_path: Path) -> None:
    taken: set[tuple[RunState, RunState]] = set()
    for number, walk in enumerate(WALKS):
        folder = tmp_path / str(number)
        folder.mkdir()
        taken |= set(play(folder, walk))
    allowed = {(old, new) for old, targets in ALLOWED.items() for new in targets}
    assert taken <= allowed
    missing = sorted(f"{old.value} -> {new.value}" for old, new in allowed - taken)
    assert not missing, f"edges no scenario takes: {missing}"


def test_run_numbers_count_per_role_and_are_kept_by_retries_and_ends(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 1, "backoff": ["1s"]}}, "pm": {}})
        (root / "prompts" / "builder.md").write_text("run $seq of $role\n", encoding="utf-8")
        r.sup.launcher.templates["builder"] = __import__("orchestrator.prompts", fromlist=["x"]).load_template(
            root / "prompts" / "builder.md"
        )
        await r.drop("builder", "a.md")
        await r.exit("a", 0)
        await r.drop("pm", "p.md")
        await r.drop("builder", "b.md")
        await r.exit("b", 1)  # retried: the retry keeps its run's number
        await r.advance(1)
        assert [a.spec.env["ORCHESTRATOR_SEQ"] for a in r.spawner.agents if a.spec.role.name == "builder"] == [
            "1",
            "2",
            "2",
        ]
        assert r.agent("b").spec.prompt.endswith("run 2 of builder\n")
        await _cancel(r, "b")  # cancelled: it keeps its number, the next run gets the next one
        await r.drop("builder", "c.md")
        assert r.agent("c").spec.env["ORCHESTRATOR_SEQ"] == "3"
        assert r.agent("p").spec.env["ORCHESTRATOR_SEQ"] == "1", "each role counts on its own"
        rows = {row["memos"][0]: row["seq"] for row in r.sup.store.history()}
        assert rows == {"a.md": 1, "p.md": 1, "b.md": 2, "c.md": 3}
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ extension points
def test_extension_points_hold_fill_check_and_hook_without_touching_the_core(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}})
        (root / "prompts" / "builder.md").write_text("tasks: $tasks | memory: [$memory] | at $time\n", encoding="utf-8")
        r.sup.launcher.templates["builder"] = __import__("orchestrator.prompts", fromlist=["x"]).load_template(
            root / "prompts" / "builder.md"
        )
        seen: list[tuple[str, str]] = []
        r.sup.lc.before_finish.append(
            lambda run, state, reason: seen.append((run.memos[0].path.parent.name, state.value))
        )
        r.sup.launcher.sections.append(lambda run: {"tasks": f"diary (run {run.seq})"})
        r.sup.launcher.memo_checks.append(lambda role, ref, text: "a loop" if "ping" in text else None)

        r.sup.holds.hold("builder", "preflight", "preflight python3 -c 'import discord' failed")
        await r.drop("builder", "a.md")
        assert r.spawner.agents == [] and r.folder("builder", "inbox") == ["a.md"], "a held role starts nothing"
        assert r.sup.snapshot_light()["holds"] == {
            "builder": {"preflight": "preflight python3 -c 'import discord' failed"}
        }
        r.sup.holds.release("builder", "preflight")
        r.sup.post(__import__("orchestrator.core.events", fromlist=["Tick"]).Tick())
        await r.settle()
        agent = r.agent("a")
        assert agent.spec.prompt.startswith("tasks: diary (run 1) | memory: [] | at ")
        await r.exit("a", 0)
        assert seen == [("active", "succeeded")], "the hook runs before the memo moves"

        await r.drop("builder", "p.md", body="ping")
        assert r.folder("builder", "held") == ["p.md"] and len(r.spawner.agents) == 1
        assert (r.config.role_dir("builder") / "held" / "p.reason").read_text().startswith("held: a loop")

        def broken(event: object) -> None:
            raise RuntimeError("a listener with a bug")

        r.sup.lc.listeners.append(broken)
        await r.drop("builder", "b.md")
        await r.exit("b", 0)
        assert "b.md" in r.folder("builder", "archive"), "a failing listener never stops an end"
        assert "internal error in test_extension_points" in r.console.text
        r.close()

    play(tmp_path, scenario)
