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
