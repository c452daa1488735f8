"""The core's team events through the real loop on a manual clock (``tests/replay.py``): a usage-limit pause and
its end, a held memo, a stall and a daily budget are each announced once as a typed ``TeamEvent``, the one
thing notifications listen to."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestrator.core.agent import UsageLimit
from orchestrator.core.team_events import TeamEvent
from replay import Replay


def listen(r: Replay) -> list[TeamEvent]:
    heard: list[TeamEvent] = []
    r.sup.lc.team_events.listeners.append(heard.append)
    return heard


def test_a_pause_and_its_end_are_announced(tmp_path: Path) -> None:
    async def scenario() -> None:
        r = Replay(tmp_path, {"builder": {"retry": {"max": 3, "backoff": ["1s"]}}})
        heard = listen(r)
        await r.drop("builder", "a.md")
        agent = r.agent("a")
        agent.usage_limit = UsageLimit("five_hour", r.clock.now().timestamp() + 3600, "rate limited (429)")
        agent.failure_reason = "rate limited (429)"
        await r.exit("a", 1)
        assert [e.kind for e in heard] == ["paused"]
        assert heard[0].reason.startswith("account team paused: usage limit (five_hour)")
        await r.advance(3600)
        assert [e.kind for e in heard] == ["paused", "resumed"]
        r.close()

    asyncio.run(scenario())


def test_a_held_memo_is_announced_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        r = Replay(tmp_path, {"builder": {}, "reviewer": {}}, limits={"chain_depth": 1})
        heard = listen(r)
        await r.drop("builder", "m0.md", front={"id": "m0", "from": "owner"})
        await r.exit("m0", 0)
        await r.drop("reviewer", "m1.md", front={"id": "m1", "from": "builder", "reply_to": "m0"})
        await r.exit("m1", 0)
        await r.drop("builder", "m2.md", front={"id": "m2", "from": "reviewer", "reply_to": "m1", "subject": "s"})
        await r.drop("builder", "m3.md", front={"id": "m3", "from": "reviewer", "reply_to": "m1"})
        assert r.folder("builder", "held") == ["m2.md", "m3.md"]
        (held,) = heard  # one per chain, as the notice
        assert (held.kind, held.role, held.memo, held.subject) == ("held", "builder", "m2.md", "s")
        assert "limits.chain_depth (1)" in held.reason
        r.close()

    asyncio.run(scenario())


def test_a_stall_is_announced(tmp_path: Path) -> None:
    async def scenario() -> None:
        r = Replay(tmp_path, {"writer": {"backend": "sdk", "stall_timeout": "90s"}})
        heard = listen(r)
        await r.drop("writer", "S-1.md", front={"subject": "quiet"})
        r.agent("S-1").output_at = r.clock.now().timestamp()
        await r.advance(90)
        assert [(e.kind, e.role, e.memo, e.subject) for e in heard] == [("stalled", "writer", "S-1.md", "quiet")]
        assert heard[0].reason.startswith("stalled: no output for 90s")
        r.close()

    asyncio.run(scenario())


def test_a_daily_budget_is_announced_once_a_day_across_restarts(tmp_path: Path) -> None:
    """Defect: every start of ``up`` on a day the budget was spent told the team again (the notice came anew)."""
    from orchestrator.core.events import Tick

    role = {"builder": {"budget": {"per_day_usd": 1.0}}}

    async def scenario() -> None:
        r = Replay(tmp_path, role)
        heard = listen(r)
        await r.drop("builder", "c1.md")
        r.agent("c1").result = {"cost_usd": 1.5, "session_id": "s1"}
        await r.exit("c1", 0)
        r.sup.post(Tick())
        await r.settle()
        assert [e.kind for e in heard] == ["budget"] and "builder" in r.sup.budgets.current
        r.close()

        again = Replay(tmp_path, role, start=r.clock.now())  # the same day, a new orchestrator
        heard = listen(again)
        again.sup.post(Tick())
        await again.settle()
        assert "builder" in again.sup.budgets.current, "still blocked"
        assert heard == [], "told once already today"
        assert "budget: role builder spent $1.50" in again.console.text, "the new start's log still says why"
        again.close()

        later = Replay(tmp_path, role, start=r.clock.now())
        heard = listen(later)
        await later.advance(24 * 3600)  # the next day: the block is gone, then spent again
        later.sup.post(Tick())
        await later.drop("builder", "c2.md")
        later.agent("c2").result = {"cost_usd": 1.5, "session_id": "s2"}
        await later.exit("c2", 0)
        later.sup.post(Tick())
        await later.settle()
        assert [e.kind for e in heard] == ["budget"], "a new day's block is news"
        later.close()

    asyncio.run(scenario())
