"""The loop breaker's rules through the real supervisor loop (``tests/replay.py``): no process, no real time.

The ping-pong of two real agents that the breaker stops is in ``tests/test_tools.py``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.config import load_config
from orchestrator.core.clock import iso
from orchestrator.core.errors import ConfigError
from orchestrator.core.events import MemoSeen
from orchestrator.core.states import RunState
from orchestrator.intake.memo import parse_front_matter
from orchestrator.store import Store
from orchestrator.supervisor.breaker import CLOCK_SKEW, ensure_tables, written_time
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
        r.sup.post(MemoSeen("builder", r.config.role_dir("builder") / "inbox" / "b.md", complete=True))
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
        r.sup.post(MemoSeen("builder", path, True))
        await r.settle()
        assert r.folder("builder", "active") == ["a.md"], "checked and counted once: not over 1/h"
        assert not (r.config.role_dir("builder") / "held").exists()
        r.close()

    play(tmp_path, scenario)


def test_the_21st_memo_written_within_an_hour_is_held_however_late_it_arrives(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"project-manager": {}, "reviewer": {}})  # the default limits: 20/h
        first = r.clock.now()
        # written every 150 s (the 21st 50 minutes after the first), but arriving every 6 minutes (a slow sync):
        # counted at their claims, only 10 would fall within one hour
        for n in range(21):
            front = memo(f"w{n:02d}", ["project manager", "Project_Manager"][n % 2])  # one sender, however spelled
            front["created_at"] = iso(first + timedelta(seconds=150 * n))
            await r.drop("reviewer", f"w{n:02d}.md", front=front)
            if n < 20:
                await r.exit(f"w{n:02d}", 0)
            await r.advance(360)
        assert r.folder("reviewer", "held") == ["w20.md"], "20 memos written within an hour ran; the 21st waits"
        assert len(r.folder("reviewer", "archive")) == 20
        reason = (r.config.role_dir("reviewer") / "held" / "w20.reason").read_text(encoding="utf-8")
        assert "project-manager already sent reviewer 20 memos within 1h, the limits.pair_rate (20/1h)" in reason
        # a sliding window over written times: a memo written an hour after the first has room again
        late = memo("w21", "project-manager")
        late["created_at"] = iso(first + timedelta(seconds=3600))
        await r.drop("reviewer", "w21.md", front=late)
        assert r.folder("reviewer", "active") == ["w21.md"]
        r.close()

    play(tmp_path, scenario)


def test_a_memo_without_created_at_counts_from_when_it_was_first_seen_not_from_its_claim(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}, "reviewer": {"max_concurrent": 1}})
        inbox = r.config.role_dir("reviewer") / "inbox"
        started: dict[int, int] = {}  # agent -> second it was first seen running
        second, sent = 0, 0
        # builder writes a memo every 150 s; each run of the reviewer takes 6 minutes, so its queue grows and
        # the memos are claimed over two hours: counted at their claims, only 10 would fall within one hour
        while sent < 21 or any(agent.alive for agent in r.spawner.agents):
            if sent < 21 and second >= 150 * sent:
                name = f"s{sent:02d}.md"
                if sent < 20:
                    await r.drop("reviewer", name, front=memo(f"s{sent:02d}", "builder"))
                else:  # the 21st is first seen while still being written, and complete 20 minutes later
                    (inbox / name).write_text("---\nid: s20\nfrom: builder\n---\nbody\n", encoding="utf-8")
                    r.sup.post(MemoSeen("reviewer", inbox / name, complete=False))
                sent += 1
            if second == 3000 + 1200:
                r.sup.post(MemoSeen("reviewer", inbox / "s20.md", complete=True))
            for agent in r.spawner.agents:
                started.setdefault(id(agent), second)
                if agent.alive and second - started[id(agent)] >= 360:
                    agent.exit(0)
            await r.advance(30)
            second += 30
        assert second > 7200, "the queue drained over more than two hours"
        assert r.folder("reviewer", "held") == ["s20.md"], "the 21st memo first seen within an hour is held"
        assert len(r.folder("reviewer", "archive")) == 20
        r.close()

    play(tmp_path, scenario)


def test_memos_of_people_and_scripts_are_never_held_by_pair_rate_but_chain_depth_applies(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, ROLES, notify="lead", limits={"chain_depth": 3}, max_concurrent=60)  # pair_rate: 20/h
        for n in range(25):  # a script and a person, each far past 20 memos within the same second
            await r.drop("builder", f"c{n:02d}.md", front=memo(f"c{n:02d}", "ci-bot"))
            await r.drop("builder", f"a{n:02d}.md", front=memo(f"a{n:02d}", "Alice Smith"))
        assert not (r.config.role_dir("builder") / "held").exists()
        assert len(r.folder("builder", "active")) == 50
        # a conversation of people deeper than chain_depth is still held
        await r.drop("reviewer", "t0.md", front=memo("t0", "alice"))
        await r.exit("t0", 0)
        for n in range(1, 5):
            await r.drop("reviewer", f"t{n}.md", front=memo(f"t{n}", ["bob", "alice"][n % 2], f"t{n - 1}"))
            if n < 4:
                await r.exit(f"t{n}", 0)
        assert r.folder("reviewer", "held") == ["t4.md"]
        reason = (r.config.role_dir("reviewer") / "held" / "t4.reason").read_text(encoding="utf-8")
        assert reason.startswith("held: its reply_to chain is deeper than limits.chain_depth (3)")
        r.close()

    play(tmp_path, scenario)


SEEN = datetime(2026, 11, 30, 9, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("created_at", "written"),
    [
        ("2026-11-30T08:00:00.000+00:00", SEEN - 3600),  # the usual: written before it was seen
        ("2026-11-30T17:00:00+09:00", SEEN - 3600),  # another zone
        ("2026-11-30T08:00:00Z", SEEN - 3600),
        ("2026-11-30 08:00:00", datetime(2026, 11, 30, 8, 0).timestamp()),  # naive: local time
        ("2026-02-13T12:03:00.000+09:00", datetime(2026, 2, 13, 3, 3, tzinfo=UTC).timestamp()),  # months
        ("2026-11-30T09:04:00+00:00", SEEN),  # the writer's clock a little fast: counted when seen
        ("2026-11-30T09:06:00+00:00", SEEN),  # beyond CLOCK_SKEW: not believed
        ("2099-01-01T00:00:00+00:00", SEEN),
        ("1970-01-01T00:00:00+00:00", SEEN),  # a zeroed clock
        ("1999-12-31T23:59:59+00:00", SEEN),
        ("0001-01-01T00:00:00", SEEN),
        ("2026-11-30", SEEN),  # a date alone would put a whole day's memos at midnight
        ("YYYY-MM-DDTHH:MM:SS±ZZ:ZZ", SEEN),  # a template's placeholder (in the real corpus)
        ("yesterday at 5", SEEN),
        ("", SEEN),
        (None, SEEN),
    ],
)
def test_a_memo_counts_at_its_created_at_when_sane_else_when_first_seen(created_at: str | None, written: float) -> None:
    assert CLOCK_SKEW == 300
    assert written_time(created_at, SEEN) == pytest.approx(written)


def test_links_recorded_before_written_times_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE memo_links (role TEXT NOT NULL, name TEXT NOT NULL, memo_id TEXT, reply_to TEXT, sender TEXT,"
        " seen_ts REAL NOT NULL, outcome TEXT NOT NULL, PRIMARY KEY (role, name));"
        "CREATE INDEX memo_links_pair ON memo_links(sender, role, seen_ts);"
        "INSERT INTO memo_links VALUES ('b', 'm.md', 'm', NULL, 'a', 1234.5, 'delivered');"
    )
    old.commit()
    old.close()
    store = Store(path)
    ensure_tables(store.db)  # the breaker's own tables, as its extension makes them at start-up
    rows = store.db.execute("SELECT name, written_ts FROM memo_links").fetchall()
    assert [tuple(row) for row in rows] == [("m.md", 1234.5)], "a claim time is the nearest to a written time they have"
    plan = store.db.execute(
        "EXPLAIN QUERY PLAN SELECT written_ts FROM memo_links WHERE sender = 'a' AND role = 'b' AND written_ts > 0"
    ).fetchall()
    assert "memo_links_pair" in str([tuple(row) for row in plan])
    store.close()
    assert [tuple(r) for r in Store(path).db.execute("SELECT name, written_ts FROM memo_links")] == [("m.md", 1234.5)]


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
