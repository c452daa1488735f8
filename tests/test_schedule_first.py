"""A task's first period through the real loop with a manual clock (``tests/replay.py``): a daily or weekly task
never done is due in the day or week it first appears in (``first: now``, the default), or only from its next
occurrence (``first: next``); after downtime it is one wake, and a DST switch neither doubles nor drops it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml

from orchestrator.config import load_config
from orchestrator.core.errors import ConfigError
from orchestrator.schedule import view
from replay import Replay


def play(tmp_path: Path, scenario: Callable[[Path], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario(tmp_path))


def at(text: str, tz: str = "UTC") -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz))


async def start(root: Path, roles: dict[str, Any], now: datetime, **top: Any) -> Replay:
    r = Replay(root, roles, **top)
    r.clock._wall = now  # the manual clock starts where the scenario says
    r.wakes.start()
    await r.advance(0)
    return r


def carried(r: Replay, role: str = "rin") -> list[list[str]]:
    """The tasks of each wake the role was started for, in order (from the records: a memo that ran is gone)."""
    db = r.sup.store.db
    out = []
    for agent in r.spawner.agents:
        memo = agent.spec.memo_paths[0]
        if agent.spec.role.name == role and memo.name.startswith("wake-"):
            (tasks,) = db.execute("SELECT tasks FROM wake_memos WHERE name = ?", (memo.name,)).fetchone()
            out.append(json.loads(tasks))
    return out


async def finish_all(r: Replay) -> None:
    """Every agent still running succeeds."""
    for agent in r.spawner.agents:
        agent.exit(0)
    await r.settle()


DIARY = {"diary": {"daily": "21:00", "text": "Write today's diary."}}


def test_a_daily_task_first_seen_before_its_time_is_due_at_that_time_today(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = await start(root, {"rin": {"wake": {"every": "30m"}, "tasks": DIARY}}, at("2026-12-01T10:00"))
        await r.advance(10.5 * 3600)  # 20:30
        assert carried(r) == []
        await r.advance(1800)  # 21:00
        assert carried(r) == [["diary"]]
        await finish_all(r)
        await r.advance(2.5 * 3600)
        assert carried(r) == [["diary"]], "done today"
        r.close()

    play(tmp_path, scenario)


def test_a_daily_task_first_seen_after_its_time_is_due_at_once(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = await start(root, {"rin": {"tasks": DIARY}}, at("2026-12-01T22:30"))  # no heartbeat: due-driven
        assert carried(r) == [["diary"]], "added at 22:30, a daily 21:00 is due now, not tomorrow"
        shown = view.schedule(r.config, at("2026-12-01T22:31"))["roles"]["rin"]["tasks"][0]
        assert shown["due_now"] and shown["next_due"] == "2026-12-01T21:00:00.000+00:00", shown
        await finish_all(r)
        await r.advance(22 * 3600)  # tomorrow 20:30
        assert carried(r) == [["diary"]]
        shown = view.schedule(r.config, r.clock.now())["roles"]["rin"]["tasks"][0]
        assert not shown["due_now"] and shown["next_due"] == "2026-12-02T21:00:00.000+00:00", shown
        await r.advance(1800 + 60)
        assert carried(r) == [["diary"], ["diary"]]
        r.close()

    play(tmp_path, scenario)


def test_schedule_shows_a_never_done_daily_task_due_now_without_a_database(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "rin.md").write_text("$tasks\n", encoding="utf-8")
    tasks = {**DIARY, "later": {"daily": "21:00", "first": "next"}}
    (tmp_path / "roles.yaml").write_text(yaml.safe_dump({"timezone": "UTC", "roles": {"rin": {"tasks": tasks}}}))
    shown = view.schedule(load_config(tmp_path), at("2026-12-01T22:30"))["roles"]["rin"]["tasks"]
    assert [(t["name"], t["due_now"], t["next_due"]) for t in shown] == [
        ("diary", True, "2026-12-01T21:00:00.000+00:00"),
        ("later", False, "2026-12-02T21:00:00.000+00:00"),
    ]
    assert [t["rule"] for t in shown] == ["daily 21:00:00", "daily 21:00:00, first: next"]


def test_after_downtime_one_wake_not_one_per_missed_day(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        roles = {"rin": {"wake": {"every": "30m"}, "tasks": DIARY}}
        r = await start(root, roles, at("2026-12-01T20:30"))
        await r.advance(1800)
        assert carried(r) == [["diary"]]
        await finish_all(r)
        r.close()
        # three evenings missed (the machine was off): one wake when it is back, then the next evening
        r = await start(root, roles, at("2026-12-04T22:00"))
        await r.advance(60)
        assert carried(r) == [["diary"]]
        await finish_all(r)
        await r.advance(22 * 3600)  # 20:00 the day after
        assert carried(r) == [["diary"]]
        await r.advance(3600)
        assert carried(r) == [["diary"], ["diary"]]
        await finish_all(r)
        r.close()
        # back in the morning after two evenings missed: they are one wake at once, today's comes at 21:00
        r = await start(root, roles, at("2026-12-08T10:00"))
        await r.advance(60)
        assert carried(r) == [["diary"]]
        await finish_all(r)
        await r.advance(10.5 * 3600)  # 20:31
        assert carried(r) == [["diary"]]
        await r.advance(1800)
        assert carried(r) == [["diary"], ["diary"]]
        r.close()

    play(tmp_path, scenario)


def test_dst_spring_gap_a_time_in_the_skipped_hour_on_first_sight(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        # Europe/Berlin, 2026-03-29: 02:00 CET -> 03:00 CEST, so 02:10 lands at 03:10 and 02:45 at 03:45 that day
        roles = {
            "rin": {"tasks": {"early": {"daily": "02:10", "text": "e"}}},
            "kai": {"tasks": {"late": {"daily": "02:45", "text": "l"}}},
        }
        r = await start(root, roles, at("2026-03-29T03:20", "Europe/Berlin"), timezone="Europe/Berlin")
        assert carried(r, "rin") == [["early"]], "03:10 has passed: due at once"
        assert carried(r, "kai") == []
        await finish_all(r)
        await r.advance(20 * 60)  # 03:40
        assert carried(r, "kai") == []
        await r.advance(6 * 60)  # 03:46
        assert carried(r, "kai") == [["late"]]
        await finish_all(r)
        await r.advance(22 * 3600 + 10 * 60)  # 2026-03-30 01:56 CEST
        assert (carried(r, "rin"), carried(r, "kai")) == ([["early"]], [["late"]]), "once on the day of the switch"
        await r.advance(15 * 60)  # 02:11
        assert carried(r, "rin") == [["early"], ["early"]] and carried(r, "kai") == [["late"]]
        await r.advance(35 * 60)  # 02:46
        assert carried(r, "kai") == [["late"], ["late"]]
        r.close()

    play(tmp_path, scenario)


def test_dst_autumn_repeat_first_seen_in_the_first_pass_fires_once(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        # Europe/Berlin, 2026-10-25: 03:00 CEST -> 02:00 CET, so 02:30 happens twice; it counts at its first pass
        roles = {"rin": {"wake": {"every": "10m"}, "tasks": {"late": {"daily": "02:30", "text": "t"}}}}
        r = await start(root, roles, at("2026-10-25T02:40", "Europe/Berlin"), timezone="Europe/Berlin")
        assert carried(r) == [["late"]], "02:30 CEST has passed: due at once"
        for _ in range(12):  # two hours of wall time, through the repeated 02:00-03:00
            await finish_all(r)
            await r.advance(600)
        assert carried(r) == [["late"]], "the second 02:30 is not a second occurrence"
        r.close()

    play(tmp_path, scenario)


def test_a_weekly_task_on_first_sight_is_due_when_its_day_has_passed_this_week(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        tasks = {
            "review": {"weekly": "mon 09:00", "text": "r"},  # this week's Monday has passed: due now
            "plan": {"weekly": "wed 15:00", "text": "p"},  # later today
            "rest": {"weekly": "sun 10:00", "text": "s"},  # the week ends on Sunday: not yet
        }
        r = await start(root, {"rin": {"tasks": tasks}}, at("2026-12-02T12:00", "Asia/Tokyo"), timezone="Asia/Tokyo")
        assert carried(r) == [["review"]]
        await finish_all(r)
        await r.advance(3 * 3600 - 120)  # 14:58
        assert carried(r) == [["review"]]
        await r.advance(180)
        assert carried(r) == [["review"], ["plan"]]
        await finish_all(r)
        await r.advance(3 * 86400 + 18 * 3600 + 58 * 60)  # Sunday 09:59
        assert len(carried(r)) == 2
        await r.advance(120)
        assert carried(r)[2:] == [["rest"]]
        await finish_all(r)
        await r.advance(23 * 3600)  # Monday 09:01: done last Wednesday, due again this week
        assert carried(r)[3:] == [["review"]]
        r.close()

    play(tmp_path, scenario)


def test_first_next_waits_for_the_next_occurrence_on_the_task_or_for_the_role(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        roles = {
            "rin": {
                "wake": {"every": "30m"},
                "tasks": {
                    "diary": {"daily": "21:00", "text": "d", "first": "next"},
                    "review": {"weekly": "mon 09:00", "text": "r", "first": "next"},
                },
            },
            "kai": {
                "wake": {"every": "30m", "first": "next"},
                "tasks": {
                    "diary": {"daily": "21:00", "text": "d"},
                    "post": {"every": "2h", "text": "p"},
                    "hello": {"every": "2h", "text": "h", "first": "now"},  # the task's own word wins
                },
            },
        }
        r = await start(root, roles, at("2026-12-01T22:30"))  # a Tuesday
        assert carried(r, "rin") == [] and carried(r, "kai") == [["hello"]]
        await finish_all(r)
        await r.advance(2 * 3600)  # 00:30: `post` one period after it first appeared, `hello` again
        assert carried(r, "kai")[1:] == [["hello", "post"]]
        await finish_all(r)
        await r.advance(20 * 3600)  # 20:30
        assert carried(r, "rin") == [] and all("diary" not in tasks for tasks in carried(r, "kai"))
        await finish_all(r)
        await r.advance(1800)  # 21:00
        assert carried(r, "rin") == [["diary"]] and "diary" in carried(r, "kai")[-1]
        for _ in range(8):  # to Sunday 21:00, each wake ending as it comes
            await finish_all(r)
            await r.advance(12 * 3600)
        assert all("review" not in tasks for tasks in carried(r, "rin")), "first seen after Monday 09:00"
        await finish_all(r)
        await r.advance(12 * 3600 + 1800)  # Monday 09:30
        assert ["review"] in carried(r, "rin")
        r.close()

    play(tmp_path, scenario)


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        (
            {"daily": "21:00", "first": "later"},
            "roles.rin.tasks.diary.first: expected now or next (when a task never done is first due), got 'later'",
        ),
        (
            {"once": "2026-12-01T09:00", "first": "next"},
            "roles.rin.tasks.diary.first: applies to daily, weekly and every tasks only",
        ),
    ],
)
def test_a_bad_first_is_a_one_line_error_naming_its_key(tmp_path: Path, task: dict[str, Any], expected: str) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "rin.md").write_text("$tasks\n", encoding="utf-8")
    (tmp_path / "roles.yaml").write_text(yaml.safe_dump({"roles": {"rin": {"tasks": {"diary": task}}}}))
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path)
    assert expected in str(caught.value) and len(str(caught.value).splitlines()) == 1, str(caught.value)
