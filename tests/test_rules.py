"""The pure parts of the supervisor as units: slots and picking, budgets, the failure rules, the manual clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest

from conftest import Project, loud_lines
from orchestrator.config import Role
from orchestrator.core.agent import describe_exit
from orchestrator.core.clock import ManualClock
from orchestrator.store import Store
from orchestrator.supervisor import budgets, rules
from orchestrator.supervisor.slots import SlotError, Slots, Waiting, pick


def test_slots_respect_the_role_and_the_team_limits() -> None:
    slots = Slots({"a": 2, "b": 1}, total=2)
    assert slots.free("a") and slots.free("b")
    slots.take("a")
    slots.take("b")
    assert not slots.free("b"), "role limit"
    assert not slots.free("a"), "team limit"
    slots.release("b")
    assert slots.free("a") and slots.in_use == 1
    slots.release("a")
    with pytest.raises(SlotError):
        slots.release("a")


def test_pick_takes_the_oldest_allowed_across_roles() -> None:
    slots = Slots({"a": 1, "b": 1, "c": 1}, total=5)
    waiting = [Waiting("a", 5, False), Waiting("b", 3, True), Waiting("c", 1, False)]
    assert pick(waiting, slots) == Waiting("c", 1, False)
    assert pick(waiting, slots, blocked=["c"]) == Waiting("b", 3, True)
    slots.take("b")
    assert pick(waiting, slots, blocked=["c"]) == Waiting("a", 5, False)
    assert pick([], slots) is None


def test_daily_budget_blocks_per_role_and_for_the_team() -> None:
    now = datetime(2026, 11, 30, 23, 59).astimezone()
    out = budgets.blocks(now, {"builder": 1.0, "pm": 5.0}, 3.0, {"builder": 1.2, "pm": 1.0}, team_spent=2.9)
    assert set(out) == {"builder"} and "new runs wait until 2026-12-01" in out["builder"]
    out = budgets.blocks(now, {}, 3.0, {}, team_spent=3.0)
    assert set(out) == {budgets.TEAM} and "the team spent $3.00 of its $3.00" in out[budgets.TEAM]
    estimated = budgets.blocks(now, {"builder": 1.0}, None, {"builder": 1.2}, 0.0, frozenset({"builder"}))
    assert "role builder spent ~$1.20 (estimated in part from `prices`) of its $1.00" in estimated["builder"]
    assert budgets.blocked_roles(out, ["a", "b"]) == ["a", "b"]
    assert budgets.blocked_roles({"a": "x"}, ["a", "b"]) == ["a"]
    assert budgets.day_start(now).hour == 0
    # the team's day (timezone: Asia/Tokyo) on a UTC machine: the spend of today counts from 15:00 UTC, Tokyo's midnight
    late = datetime(2026, 11, 30, 15, 30, tzinfo=UTC)
    assert budgets.counted_since(late, ZoneInfo("Asia/Tokyo")) == "2026-12-01T00:00:00.000+09:00"
    assert budgets.counted_since(late, None) == "2026-11-30T00:00:00.000+00:00"
    assert "new runs wait until 2026-12-02" in budgets.blocks(late, {}, 1.0, {}, 1.0, zone=ZoneInfo("Asia/Tokyo"))["*"]


def _role(**settings: object) -> Role:
    return Role.model_validate({"name": "r", "prompt": "p.md", **settings})


def test_after_failure_retries_gives_up_or_returns() -> None:
    role = _role(retry={"max": 2, "backoff": ["1s", "4s"]})
    assert rules.after_failure(role, 1, ending=False) == rules.Decision(rules.Next.RETRY, 1.0)
    assert rules.after_failure(role, 2, ending=False) == rules.Decision(rules.Next.RETRY, 4.0)
    assert rules.after_failure(role, 3, ending=False).next is rules.Next.GIVE_UP
    assert rules.after_failure(role, 1, ending=True).next is rules.Next.RETURN
    assert rules.after_failure(role, 1, ending=False, retry=False).next is rules.Next.GIVE_UP
    assert rules.after_failure(role, 1, ending=False, timed_out=True).next is rules.Next.GIVE_UP
    again = _role(retry={"max": 1}, retry_timeouts=True)
    assert rules.after_failure(again, 1, ending=False, timed_out=True).next is rules.Next.RETRY


def test_crash_counter_counts_quick_failures_in_a_row() -> None:
    roles = {"pm": _role(name="pm", critical=True, crash={"window": "2s", "max": 2}), "b": _role(name="b")}
    crashes = rules.CrashCounter(roles)
    assert not crashes.note("pm", 0.5, failed=True)
    assert not crashes.note("pm", 3.0, failed=True), "a long run resets"
    assert crashes.counts["pm"] == 0
    assert not crashes.note("pm", 0.1, failed=True)
    assert crashes.note("pm", 0.1, failed=True)
    assert not crashes.note("b", 0.1, failed=True), "only critical roles count"
    assert describe_exit(-9) == "killed by SIGKILL (not sent by the orchestrator)"
    assert describe_exit(4) == "exit code 4"


def test_manual_clock_fires_timers_in_due_order_as_it_passes_them() -> None:
    clock = ManualClock()
    fired: list[tuple[str, float]] = []
    start = clock.monotonic()
    clock.call_later(2, lambda: fired.append(("b", clock.monotonic() - start)))
    clock.call_later(1, lambda: fired.append(("a", clock.monotonic() - start)))
    cancelled = clock.call_later(1.5, lambda: fired.append(("never", 0.0)))
    cancelled.cancel()
    wall = clock.now()
    clock.advance(1.5)
    assert fired == [("a", 1.0)]
    clock.advance(10)
    assert fired == [("a", 1.0), ("b", 2.0)]
    assert (clock.now() - wall).total_seconds() == pytest.approx(11.5)


def test_the_harness_fails_a_test_whose_orchestrator_printed_a_bug(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    out = tmp_path / "up.out"
    out.write_text("2026-11-30 09:00:00 ERROR internal error while handling RunExited: boom (details in the log)\n")
    proj.procs.append(SimpleNamespace(output=out.read_text()))  # type: ignore[arg-type]
    assert loud_lines(proj) == [out.read_text().strip()]
    proj.procs[0] = SimpleNamespace(output="2026-11-30 09:00:00 done B-1 in 0.1s\n")  # type: ignore[call-overload]
    assert loud_lines(proj) == []


def test_the_days_spend_is_counted_by_instant_across_a_change_of_the_clocks(tmp_path: Path) -> None:
    """Found by a review: the day's start and the runs' times were compared as text, each with its own offset, so on
    the days a zone's clocks change (Europe/Berlin here) yesterday's late run counted today, or today's first did
    not; and in a zone whose clocks go back from 01:00 to midnight, the day began at the second midnight."""
    berlin = ZoneInfo("Europe/Berlin")
    store = Store(tmp_path / "state.db")
    try:
        for day, now in (("2025-10-25", datetime(2025, 10, 26, 12, 0)), ("2025-03-29", datetime(2025, 3, 30, 12, 0))):
            yesterday = datetime.fromisoformat(f"{day}T23:30").replace(tzinfo=berlin)
            today = (yesterday + timedelta(hours=1)).astimezone(berlin)  # 00:30 of the day after, Berlin's time
            for at, cost in ((yesterday, 5.0), (today, 1.0)):
                run_id = store.insert_run(
                    role="r", backend="command", memos=["m.md"], memo_ids=[None], state="succeeded", attempt=1
                )
                store.update_run(run_id, started_at=at.isoformat(timespec="milliseconds"), cost_usd=cost)
            here = now.replace(tzinfo=berlin)
            here = here.astimezone(timezone(here.utcoffset() or timedelta()))  # as SystemClock.now(): a fixed offset
            since = budgets.counted_since(here, berlin)
            assert store.spent_since(since) == 1.0, (day, since)
            store.db.execute("DELETE FROM runs")
    finally:
        store.close()
    havana = ZoneInfo("America/Havana")  # 2025-11-02: 01:00 goes back to 00:00
    repeated = datetime(2025, 11, 2, 0, 30, fold=1, tzinfo=havana)
    assert budgets.day_start(repeated, havana).utcoffset() == timedelta(hours=-4), "the day's first midnight"
