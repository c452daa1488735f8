"""Wakes on a schedule through the real loop with a manual clock (``tests/replay.py``): heartbeats, daily and
weekly rules across DST, clock jumps, coalescing, done only on success, quiet hours, probes and jobs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import yaml

from orchestrator.config import when
from orchestrator.schedule import records, rules
from orchestrator.schedule.probes import Probe, ProbeResult
from replay import Replay


def play(tmp_path: Path, scenario: Callable[[Path], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario(tmp_path))


def at(text: str, tz: str = "UTC") -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz))


def wakes(r: Replay, role: str) -> list[str]:
    return sorted(n for n in r.folder(role, "inbox") + r.folder(role, "active") if n.startswith("wake-"))


def front(r: Replay, path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8").split("---")[1])


def wake_agents(r: Replay) -> list[Any]:
    return [a for a in r.spawner.agents if a.spec.memo_paths[0].name.startswith("wake-")]


async def start(root: Path, roles: dict[str, Any], now: datetime, **top: Any) -> Replay:
    r = Replay(root, roles, **top)
    r.clock._wall = now  # the manual clock starts where the scenario says
    r.wakes.tz = ZoneInfo(top.get("timezone", "UTC"))
    r.wakes.start()
    await r.advance(0)
    return r


def test_a_heartbeat_that_finds_nothing_to_do_writes_nothing_and_counts_the_skip(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = await start(root, {"rin": {"wake": {"every": "30m"}}}, at("2026-11-30T09:00"), timezone="UTC")
        assert r.spawner.agents == [] and wakes(r, "rin") == []
        await r.advance(3 * 1800)
        assert r.spawner.agents == [], "an idle heartbeat costs nothing"
        assert records.skips(r.sup.store.db, "rin") == {"idle": 4}
        assert r.wakes.status()["rin"]["last_reason"].startswith("idle")
        assert max(r.clock.pending()) <= 60, "one timer, never sleeping past a minute"
        r.close()

    play(tmp_path, scenario)


def test_daily_task_fires_once_a_day_and_is_done_only_when_the_run_succeeds(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        roles = {"rin": {"wake": {"every": "30m"}, "tasks": {"diary": {"daily": "21:00", "text": "Write the diary."}}}}
        r = await start(root, roles, at("2026-11-30T20:10"), timezone="UTC")
        await r.advance(1800)  # 20:40: not yet
        assert wake_agents(r) == []
        await r.advance(1800)  # 21:10
        agent = wake_agents(r)[0]
        memo = agent.spec.memo_paths[0]
        header = front(r, memo)
        assert header["tasks"] == ["diary"] and header["subject"] == "Wake: diary" and header["tags"] == ["wake"]
        assert "## Tasks" in memo.read_text() and "Write the diary." in memo.read_text()
        await r.advance(1800)  # 21:40: the first wake still runs: coalesced, not a second
        assert len(wake_agents(r)) == 1
        assert records.skips(r.sup.store.db, "rin").get("coalesced") == 1
        agent.exit(1)  # failed for good (retry max 0): nothing is marked
        await r.settle()
        assert records.done(r.sup.store.db, "rin")["diary"]["done_at"] is None
        await r.advance(1800)  # 22:10: due again
        second = wake_agents(r)[1]
        assert front(r, second.spec.memo_paths[0])["tasks"] == ["diary"]
        second.exit(0)
        await r.settle()
        done = records.done(r.sup.store.db, "rin")["diary"]
        assert done["done_at"] is not None and done["seq"] == 2
        await r.advance(4 * 1800)  # the rest of the evening: done today, no wake
        assert len(wake_agents(r)) == 2
        await r.advance(24 * 3600)  # tomorrow after 21:00: once more
        assert len(wake_agents(r)) == 3
        r.close()

    play(tmp_path, scenario)


def test_at_most_max_tasks_by_priority_the_rest_wait_for_the_next_wake(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        tasks = {
            "a-once": {"once": "2026-11-30T08:00:00+00:00", "text": "o"},
            "b-every": {"every": "2h", "text": "e"},
            "c-daily": {"daily": "08:00", "text": "d"},
            "d-weekly": {"weekly": "mon 08:00", "text": "w"},
            "e-post": {"every": "2h", "text": "p", "priority": 500},
        }
        r = await start(
            root, {"rin": {"wake": {"every": "30m", "max_tasks": 2}, "tasks": tasks}}, at("2026-11-30T07:59")
        )
        # 07:59, the first tick: only the `every` tasks (never done) are due yet
        first = wake_agents(r)[0]
        assert front(r, first.spec.memo_paths[0])["tasks"] == ["e-post", "b-every"]
        first.exit(0)
        await r.settle()
        await r.advance(1800)  # 08:29: weekly > daily > once, two of them
        second = wake_agents(r)[1]
        assert front(r, second.spec.memo_paths[0])["tasks"] == ["d-weekly", "c-daily"]
        second.exit(0)
        await r.settle()
        await r.advance(1800)  # 08:59: the one left
        third = wake_agents(r)[2]
        assert front(r, third.spec.memo_paths[0])["tasks"] == ["a-once"]
        r.close()

    play(tmp_path, scenario)


def test_quiet_hours_keep_tasks_out_unless_they_are_marked(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        tasks = {
            "post": {"every": "1h", "text": "p"},
            "night-words": {"every": "1h", "text": "n", "in_quiet_hours": True},
        }
        r = await start(
            root,
            {"rin": {"wake": {"every": "30m", "quiet_hours": "02:00-06:00"}, "tasks": tasks}},
            at("2026-11-30T02:10"),
        )
        await r.advance(0)
        agent = wake_agents(r)[0]
        assert front(r, agent.spec.memo_paths[0])["tasks"] == ["night-words"]
        agent.exit(0)
        await r.settle()
        await r.advance(1800)
        assert len(wake_agents(r)) == 1
        assert records.skips(r.sup.store.db, "rin").get("quiet hours") == 1
        r.close()

    play(tmp_path, scenario)


def test_after_downtime_one_wake_never_a_backlog(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        roles = {"rin": {"wake": {"every": "30m", "skip_when_idle": False}}}
        r = await start(root, roles, at("2026-11-30T09:00"))
        assert len(wake_agents(r)) == 1
        wake_agents(r)[0].exit(0)
        await r.settle()
        r.close()
        # a day later (the machine slept): one wake at start, not 48
        r2 = await start(root, roles, at("2026-12-01T09:00"))
        assert len(wake_agents(r2)) == 1
        await r2.advance(60)
        assert len(wake_agents(r2)) == 1
        r2.close()

    play(tmp_path, scenario)


def test_a_clock_that_jumps_neither_fires_twice_nor_misses(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        roles = {"rin": {"wake": {"every": "30m"}, "tasks": {"diary": {"daily": "21:00", "text": "d"}}}}
        r = await start(root, roles, at("2026-11-30T20:00"))
        r.clock._wall += timedelta(hours=1, minutes=5)  # suspend or NTP: the wall moves, the monotonic clock not
        await r.advance(60)  # within a minute the timer looks again
        assert len(wake_agents(r)) == 1
        wake_agents(r)[0].exit(0)
        await r.settle()
        r.clock._wall -= timedelta(hours=1)  # and back: 20:06 again
        await r.advance(3 * 3600)
        assert len(wake_agents(r)) == 1, "done today: a clock going back does not fire it again"
        r.close()

    play(tmp_path, scenario)


def test_dst_gap_and_repeat_fire_once() -> None:
    tz = ZoneInfo("America/New_York")
    gap = when.Rule("daily", at=when.parse_time_of_day("02:30"))
    # 2026-03-08: 02:00 -> 03:00 (02:30 does not exist); the task is due once, at 03:30 EDT
    anchor = datetime(2026, 3, 7, 12, 0, tzinfo=tz)
    first = rules.due_at(gap, datetime(2026, 3, 7, 2, 31, tzinfo=tz).astimezone(UTC), anchor, tz)
    assert first is not None and first.astimezone(tz).isoformat() == "2026-03-08T03:30:00-04:00"
    after = rules.due_at(gap, first + timedelta(minutes=1), anchor, tz)
    assert after is not None and after.astimezone(tz).date().isoformat() == "2026-03-09"
    # 2026-11-01: 01:00-02:00 happens twice; 01:30 counts at its first pass only
    repeat = when.Rule("daily", at=when.parse_time_of_day("01:30"))
    due = rules.due_at(repeat, datetime(2026, 10, 31, 2, 0, tzinfo=tz).astimezone(UTC), anchor, tz)
    assert due is not None and due.astimezone(tz).isoformat() == "2026-11-01T01:30:00-04:00"
    second_pass = datetime(2026, 11, 1, 6, 31, tzinfo=UTC)  # 01:31 EST, the repeat
    again = rules.due_at(repeat, due + timedelta(minutes=1), anchor, tz)
    assert again is not None and again > second_pass


def test_dst_repeat_through_the_loop_fires_once(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        roles = {"rin": {"wake": {"every": "10m"}, "tasks": {"late": {"daily": "01:30", "text": "t"}}}}
        r = await start(root, roles, at("2026-11-01T00:50", "America/New_York"), timezone="America/New_York")
        # done yesterday, so that the first pass of today's 01:30 is what makes it due
        r.wakes.db.execute("UPDATE task_done SET done_at = '2026-10-31T01:35:00-04:00'")
        for _ in range(18):  # three hours of wall time through the repeated hour
            await r.advance(600)
            for agent in wake_agents(r):
                agent.exit(0)
            await r.settle()
        assert len(wake_agents(r)) == 1
        r.close()

    play(tmp_path, scenario)


def test_weekly_task_on_its_weekday(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        roles = {"rin": {"tasks": {"review": {"weekly": "sun 10:00", "text": "r"}}}}  # no heartbeat: due-driven
        r = await start(root, roles, at("2026-11-27T09:00"), timezone="Asia/Tokyo")  # a Friday
        assert r.clock.pending() == [60.0]
        await r.advance(2 * 86400 + 3600 - 9 * 3600)  # Sunday 10:00 in Tokyo is 01:00 UTC
        assert len(wake_agents(r)) == 1
        wake_agents(r)[0].exit(0)
        await r.settle()
        await r.advance(6 * 86400)
        assert len(wake_agents(r)) == 1
        await r.advance(86400)
        assert len(wake_agents(r)) == 2
        r.close()

    play(tmp_path, scenario)


def test_a_failing_signal_holds_the_wake_and_tells_the_notify_role_once(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        roles = {
            "rin": {"wake": {"every": "30m"}, "signals": {"mail": {"command": ["true"]}}},
            "pm": {},
        }
        r = Replay(root, roles, notify="pm")
        outcome: dict[str, Any] = {"ok": False, "out": ""}

        async def fake(probes: list[Probe], _root: Path) -> list[ProbeResult]:
            return [
                ProbeResult(p, outcome["ok"], output=outcome["out"], problem="exit status 1: no network")
                for p in probes
            ]

        r.wakes.probe_runner = fake
        r.wakes.start()
        await r.settle()
        await r.advance(1800)
        assert wakes(r, "rin") == []
        assert "rin" in r.sup.holds.snapshot() and "no network" in r.sup.holds.snapshot()["rin"]["wake"]
        assert len(r.folder("pm", "inbox")) + len(r.folder("pm", "active")) == 1, "one notice, not one per tick"
        outcome.update(ok=True, out="2 new mails")
        await r.advance(1800)
        assert "rin" not in r.sup.holds.snapshot()
        assert len([a for a in r.spawner.agents if a.spec.role.name == "pm"]) == 2, "and one when it recovers"
        memo = wake_agents(r)[0].spec.memo_paths[0]
        assert "## Signals" in memo.read_text() and "2 new mails" in memo.read_text()
        assert front(r, memo)["tasks"] == []
        r.close()

    play(tmp_path, scenario)


def test_a_wall_clock_that_goes_back_does_not_stall_the_heartbeat(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = await start(root, {"rin": {"wake": {"every": "30m"}}}, at("2026-11-30T09:00"))
        assert records.skips(r.sup.store.db, "rin") == {"idle": 1}
        await r.advance(600)  # 09:10
        r.clock._wall -= timedelta(hours=1)  # NTP or a restored snapshot: 08:10 again
        await r.advance(33 * 60)  # 08:43 by the wall: one period and the timer's minute after the jump
        assert records.skips(r.sup.store.db, "rin") == {"idle": 2}, "the next tick came within one period"
        await r.advance(30 * 60)
        assert records.skips(r.sup.store.db, "rin") == {"idle": 3}, "and the ones after it, never two at once"
        r.close()

    play(tmp_path, scenario)


def test_the_default_zone_is_the_machines_with_its_dst_rules(monkeypatch: Any) -> None:
    from orchestrator.config.schedule import zone

    monkeypatch.setenv("TZ", "America/New_York")
    tz = zone(None)
    winter, summer = datetime(2026, 1, 15, 12, tzinfo=tz), datetime(2026, 7, 15, 12, tzinfo=tz)
    assert winter.utcoffset() == timedelta(hours=-5) and summer.utcoffset() == timedelta(hours=-4)
    daily = when.Rule("daily", at=when.parse_time_of_day("21:00"))
    before = datetime(2026, 3, 7, 22, 0, tzinfo=tz).astimezone(UTC)  # the evening before the spring change
    after = rules.due_at(daily, before, before, tz)
    assert after is not None and after.astimezone(tz).strftime("%Y-%m-%d %H:%M") == "2026-03-08 21:00"
    monkeypatch.setenv("TZ", "JST-9")  # a POSIX rule, not a zone name: the offset the C library has for it
    time.tzset()
    try:
        assert datetime(2026, 1, 15, tzinfo=zone(None)).utcoffset() == timedelta(hours=9)
    finally:
        monkeypatch.undo()  # TZ as it was, and the C library told so
        time.tzset()


def test_a_manual_wake_of_an_unknown_task_says_so_first_and_a_refused_one_counts_no_skip(tmp_path: Path) -> None:
    """Found by a user-view review: `wake --task nosuch` while a wake was queued said `coalesced`, and a person's
    refused wake was counted as a heartbeat's skip."""
    from orchestrator.core.errors import ControlError, UsageError
    from orchestrator.core.events import WakeRequested

    async def ask(r: Replay, task: str | None) -> asyncio.Future[Any]:
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        r.sup.post(WakeRequested("rin", task, "pat", reply))
        await r.settle()
        return reply

    async def scenario(root: Path) -> None:
        roles = {"rin": {"wake": {"every": "30m"}, "tasks": {"diary": {"daily": "21:00", "text": "d"}}}}
        r = await start(root, roles, at("2026-11-30T09:00"), timezone="UTC")
        before = records.skips(r.sup.store.db, "rin")
        assert (await ask(r, "diary")).result()
        unknown = (await ask(r, "nosuch")).exception()
        assert isinstance(unknown, UsageError) and "role rin has no task 'nosuch'" in str(unknown), unknown
        coalesced = (await ask(r, None)).exception()
        assert isinstance(coalesced, ControlError) and "coalesced" in str(coalesced)
        assert records.skips(r.sup.store.db, "rin") == before, "a person's refused wake is no tick's skip"
        r.close()

    play(tmp_path, scenario)
