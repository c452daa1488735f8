"""The loop breaker's rules through the real supervisor loop (``tests/replay.py``): no process, no real time.

The ping-pong of two real agents that the breaker stops is in ``tests/test_tools.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.config import load_config
from orchestrator.core.errors import ConfigError
from orchestrator.core.events import MemoSeen
from orchestrator.core.states import RunState
from orchestrator.intake.memo import parse_front_matter
from orchestrator.tools.release import release
from replay import Replay


def play(tmp_path: Path, scenario: Any) -> Any:
    return asyncio.run(scenario(tmp_path))


def memo(memo_id: str, sender: str | None, reply_to: str | None = None) -> dict[str, Any]:
    front: dict[str, Any] = {"id": memo_id}
    if sender is not None:
        front["from"] = sender
    if reply_to is not None:
        front["reply_to"] = reply_to
    return front


def notices(r: Replay, role: str = "lead") -> list[dict[str, Any]]:
    inbox = r.config.role_dir(role) / "inbox"
    out = []
    for path in sorted(inbox.glob("*.md")):
        header = parse_front_matter(path.read_text(encoding="utf-8"))
        if "held" in header.tags:
            out.append({"name": path.name, "from": header.sender, "tags": header.tags, "reply_to": header.reply_to})
    return out


ROLES = {"builder": {}, "reviewer": {}, "lead": {}}


def test_a_chain_deeper_than_the_limit_is_held_with_its_reason_and_one_notice(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, ROLES, notify="lead", limits={"chain_depth": 3})
        await r.drop("builder", "m0.md", front=memo("m0", "owner"))
        await r.exit("m0", 0)
        roles = ["reviewer", "builder"]
        for n in range(1, 4):  # depths 1, 2, 3: within the limit
            role, sender = roles[(n + 1) % 2], roles[n % 2]
            await r.drop(role, f"m{n}.md", front=memo(f"m{n}", sender, f"m{n - 1}"))
            await r.exit(f"m{n}", 0)
        assert r.folder("builder", "archive") == ["m0.md", "m2.md"] and r.folder("reviewer", "archive") == [
            "m1.md",
            "m3.md",
        ]
        await r.drop("builder", "m4.md", front=memo("m4", "reviewer", "m3"))  # depth 4
        assert r.folder("builder", "held") == ["m4.md"], "over the limit: held, not run"
        assert len(r.spawner.agents) == 4
        reason = (r.config.role_dir("builder") / "held" / "m4.reason").read_text(encoding="utf-8")
        assert reason.startswith("held: its reply_to chain is deeper than limits.chain_depth (3)")
        assert "orchestrator release m4" in reason
        told = notices(r)
        assert len(told) == 1 and told[0]["from"] == "orchestrator" and told[0]["tags"] == ("held",)
        assert told[0]["reply_to"] == "m4"

        # a second branch of the same conversation, as deep: held too, but the lead is not told again
        await r.drop("reviewer", "x4.md", front=memo("x4", "builder", "m3"))
        assert r.folder("reviewer", "held") == ["x4.md"]
        assert len(notices(r)) == 1, "one notice per chain"
        # the owner and the orchestrator are never held, however deep
        await r.drop("reviewer", "o5.md", front=memo("o5", "owner", "m4"))
        await r.drop("reviewer", "n5.md", front=memo("n5", "orchestrator", "m4"))
        assert r.folder("reviewer", "active") == ["n5.md", "o5.md"]
        r.close()

    play(tmp_path, scenario)


def test_pair_rate_holds_the_memo_over_the_rate_within_a_sliding_window(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, ROLES, notify="lead", limits={"pair_rate": "3/h"})
        for n in range(3):
            await r.drop("reviewer", f"p{n}.md", front=memo(f"p{n}", "Builder"))
            await r.exit(f"p{n}", 0)
            await r.advance(600)
        await r.drop("reviewer", "p3.md", front=memo("p3", "builder"))
        assert r.folder("reviewer", "held") == ["p3.md"], "the 4th memo builder -> reviewer within an hour"
        reason = (r.config.role_dir("reviewer") / "held" / "p3.reason").read_text(encoding="utf-8")
        assert "builder already sent reviewer 3 memos within 1h, the limits.pair_rate (3/1h)" in reason
        # another pair, and the same pair the other way round, are not affected
        await r.drop("builder", "q0.md", front=memo("q0", "reviewer"))
        await r.drop("reviewer", "q1.md", front=memo("q1", "lead"))
        assert r.folder("builder", "active") == ["q0.md"] and r.folder("reviewer", "active") == ["q1.md"]
        # an hour after the first memo, the window has room again (the held one did not count)
        await r.advance(3600 - 1800 + 1)
        await r.drop("reviewer", "p4.md", front=memo("p4", "builder"))
        assert "p4.md" in r.folder("reviewer", "active")
        await r.drop("reviewer", "p5.md", front=memo("p5", "builder"))
        assert r.folder("reviewer", "held") == ["p3.md", "p5.md"]
        assert len(notices(r)) == 2, "p3 and p5 reply to nothing: two conversations, one notice each"
        r.close()

    play(tmp_path, scenario)


def test_a_released_memo_runs_and_is_not_held_again_at_once(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, ROLES, notify="lead", limits={"pair_rate": "1/h", "chain_depth": None})
        await r.drop("builder", "a.md", front=memo("a", "reviewer"))
        await r.drop("builder", "b.md", front=memo("b", "reviewer"))
        assert r.folder("builder", "held") == ["b.md"]
        done = release(root, "b", who="tester")
        assert [d["memo"] for d in done] == ["b.md"] and r.folder("builder", "held") == []
        assert not (r.config.role_dir("builder") / "held" / "b.reason").exists()
        assert r.folder("builder", "inbox") == ["b.md"]
        r.sup.handle(MemoSeen("builder", r.config.role_dir("builder") / "inbox" / "b.md", complete=True))
        await r.settle()
        assert r.folder("builder", "active") == ["a.md", "b.md"], "the release is on record: b runs"
        await r.drop("builder", "c.md", front=memo("c", "reviewer"))
        assert r.folder("builder", "held") == ["c.md"], "a release lets one memo through, not the pair"
        r.close()

    play(tmp_path, scenario)


def test_a_memo_returned_to_the_inbox_is_not_counted_twice(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, ROLES, limits={"pair_rate": "1/h"})
        path = await r.drop("builder", "a.md", front=memo("a", "reviewer"))
        # as recovery does after a crash: the claimed memo goes back to the inbox and is claimed again
        run = r.run_of("a")
        active = run.memos[0].path
        r.agent("a").alive = False
        r.sup.lc.finish(run, RunState.RETURNED, reason="returned by the test")
        assert path.exists() and not active.exists()
        r.sup.handle(MemoSeen("builder", path, True))
        await r.settle()
        assert r.folder("builder", "active") == ["a.md"], "checked and counted once: not over 1/h"
        assert not (r.config.role_dir("builder") / "held").exists()
        r.close()

    play(tmp_path, scenario)


def test_limits_have_defaults_and_bad_values_name_the_key(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "b.md").write_text("x", encoding="utf-8")

    def write(limits: Any) -> None:
        data: dict[str, Any] = {"roles": {"b": {}}}
        if limits is not None:
            data["limits"] = limits
        (tmp_path / "roles.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")

    write(None)
    limits = load_config(tmp_path).limits
    assert (limits.chain_depth, limits.pair_rate) == (40, (20, 3600.0))
    write({"pair_rate": "5/30m", "chain_depth": 3})
    limits = load_config(tmp_path).limits
    assert (limits.chain_depth, limits.pair_rate) == (3, (5, 1800.0))
    (tmp_path / "roles.yaml").write_text("roles: {b: {}}\nlimits: {pair_rate: off, chain_depth: null}\n")
    limits = load_config(tmp_path).limits
    assert (limits.chain_depth, limits.pair_rate) == (None, None)
    for bad, key in (({"pair_rate": "many"}, "limits.pair_rate"), ({"chain_depth": 0}, "limits.chain_depth")):
        write(bad)
        with pytest.raises(ConfigError, match=rf"roles.yaml: {key}: "):
            load_config(tmp_path)
    write({"chain_dept": 3})
    with pytest.raises(ConfigError, match=r"limits.chain_dept: unknown key"):
        load_config(tmp_path)
