"""Usage limits through the real loop with a manual clock (``tests/replay.py``): the account pauses, its memos
wait with their attempts unchanged, and it resumes at the reset or after a probe (5 minutes, doubling)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.console.live import pause_lines
from orchestrator.core.agent import UsageLimit
from orchestrator.schedule import records
from replay import Replay


def play(tmp_path: Path, scenario: Callable[[Path], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario(tmp_path))


def limit(kind: str = "rate_limit", resets_at: float | None = None) -> UsageLimit:
    return UsageLimit(kind, resets_at, "rate limited by the Anthropic API (429); try again later")


async def hit_limit(r: Replay, memo: str, usage: UsageLimit) -> None:
    agent = r.agent(memo)
    agent.usage_limit = usage
    agent.failure_reason = usage.detail
    await r.exit(memo, 1)


def notices(r: Replay, role: str = "boss") -> list[str]:
    return [n for n in r.folder(role, "inbox") if "usage-limit" in n]


def test_a_usage_limit_with_a_reset_pauses_the_account_until_then_without_using_an_attempt(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        roles = {"builder": {"retry": {"max": 3, "backoff": ["1s"]}}, "boss": {}}
        r = Replay(root, roles, notify="boss")
        await r.drop("builder", "a.md")
        reset = r.clock.now().timestamp() + 3600
        await hit_limit(r, "a", limit("five_hour", reset))
        assert r.folder("builder", "inbox") == ["a.md"] and r.folder("builder", "failed") == []
        assert r.sup.store.memo_attempts("builder", "a.md") == 0, "the limit used no attempt"
        assert len(r.spawner.agents) == 1
        paused = r.sup.snapshot_light()["paused"]
        assert list(paused) == ["team"] and paused["team"]["reason"] == "usage limit (five_hour)"
        assert paused["team"]["until"] is not None and paused["team"]["probe_at"] is None
        assert sorted(paused["team"]["roles"]) == ["boss", "builder"]
        reset_clock = datetime.fromtimestamp(reset, r.clock.now().tzinfo).strftime("%H:%M")
        assert pause_lines({"paused": paused}) == [
            f"paused: usage limit (five_hour) until {reset_clock}; account team: builder, boss"
        ]
        assert len(notices(r)) == 1, "one notice at the pause"
        await r.drop("builder", "b.md")
        await r.advance(3599)
        assert len(r.spawner.agents) == 1, "nothing of the account starts before the reset"
        assert r.console.text.count("paused: usage limit (five_hour)") == 1
        await r.advance(1)
        started = [a.spec.memo_paths[0].name for a in r.spawner.agents[1:]]
        assert "a.md" in started and "b.md" in started, started
        assert r.agent("a").spec.attempt == 1, "its first real attempt"
        assert r.sup.snapshot_light()["paused"] == {}
        assert len(notices(r)) == 2, "and one at the resume"
        assert "resumed after the usage limit (five_hour)" in r.console.text
        r.close()

    play(tmp_path, scenario)


def test_without_a_reset_one_probe_runs_after_the_probe_time_doubling_until_one_gets_through(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"max_concurrent": 5}}, usage_limits={"probe": "5m", "max_probe": "15m"})
        await r.drop("builder", "a.md")
        await hit_limit(r, "a", limit())
        await r.drop("builder", "b.md")
        await r.drop("builder", "c.md")
        assert len(r.spawner.agents) == 1
        assert r.sup.snapshot_light()["paused"]["team"]["probe_at"] is not None
        await r.advance(299)
        assert len(r.spawner.agents) == 1
        await r.advance(1)  # 5 minutes: one probe, the oldest memo, and only it
        assert [a.spec.memo_paths[0].name for a in r.spawner.agents] == ["a.md", "a.md"]
        await hit_limit(r, "a", limit())  # still limited: the next probe waits 10 minutes
        assert r.sup.store.memo_attempts("builder", "a.md") == 0
        await r.advance(599)
        assert len(r.spawner.agents) == 2
        await r.advance(1)
        assert len(r.spawner.agents) == 3
        await hit_limit(r, "a", limit())  # and again: 20 minutes, but at most max_probe (15)
        await r.advance(899)
        assert len(r.spawner.agents) == 3
        await r.advance(1)
        assert len(r.spawner.agents) == 4
        await r.exit("a", 0)  # the probe got through: every waiting memo starts now
        assert sorted(a.spec.memo_paths[0].name for a in r.spawner.agents[4:]) == ["b.md", "c.md"]
        assert r.folder("builder", "archive") == ["a.md"] and r.folder("builder", "failed") == []
        assert r.agent("a").spec.attempt == 1
        assert r.sup.snapshot_light()["paused"] == {}
        r.close()

    play(tmp_path, scenario)


def test_a_role_on_another_account_keeps_running_and_runs_going_keep_going(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        roles = {"builder": {"max_concurrent": 3}, "other": {"account": "second"}}
        r = Replay(root, roles)
        await r.drop("builder", "a.md")
        await r.drop("builder", "going.md")
        await hit_limit(r, "a", limit())
        assert r.state("going") == "running", "a run already going keeps going"
        await r.drop("builder", "b.md")
        await r.drop("other", "x.md")
        assert r.agent("x").spec.role.name == "other", "another account is not paused"
        assert len([a for a in r.spawner.agents if a.spec.role.name == "builder"]) == 2
        await r.exit("going", 0)
        assert r.folder("builder", "archive") == ["going.md"]
        assert r.sup.snapshot_light()["paused"]["team"]["roles"] == ["builder"]
        r.close()

    play(tmp_path, scenario)


def test_heartbeat_ticks_during_a_pause_are_skipped_as_paused(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        roles = {"builder": {}, "rin": {"wake": {"every": "30m", "skip_when_idle": False}}}
        r = Replay(root, roles, timezone="UTC")
        await r.drop("builder", "a.md")
        await hit_limit(r, "a", limit("weekly", r.clock.now().timestamp() + 7200))
        r.wakes.start()
        await r.advance(0)
        await r.advance(1800)
        assert records.skips(r.sup.store.db, "rin") == {"paused": 2}
        assert not [a for a in r.spawner.agents if a.spec.role.name == "rin"]
        assert r.wakes.status()["rin"]["last_reason"].startswith("paused: usage limit (weekly)")
        r.close()

    play(tmp_path, scenario)


def test_ticks_after_a_roles_own_wake_met_the_limit_are_skipped_as_paused_not_coalesced(tmp_path: Path) -> None:
    """Found by a user-view review: the wake that met the limit waits in the inbox, so every later tick said
    `coalesced` and none `paused`, as operations.md promises."""

    async def scenario(root: Path) -> None:
        roles = {"rin": {"wake": {"every": "30m", "skip_when_idle": False}}}
        r = Replay(root, roles, timezone="UTC")
        r.wakes.start()
        await r.advance(0)
        (wake,) = [a for a in r.spawner.agents if a.spec.role.name == "rin"]
        await hit_limit(
            r, wake.spec.memo_paths[0].name.removesuffix(".md"), limit("weekly", r.clock.now().timestamp() + 7200)
        )
        before = records.skips(r.sup.store.db, "rin")
        await r.advance(1800)
        after = records.skips(r.sup.store.db, "rin")
        assert after.get("paused", 0) == before.get("paused", 0) + 1 and after.get("coalesced", 0) == before.get(
            "coalesced", 0
        ), after
        r.close()

    play(tmp_path, scenario)
