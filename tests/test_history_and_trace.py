"""``history`` and ``trace`` on a long record: the default window of ``history``, its filters served by indexes,
and ``trace`` through the memo index (kept at every claim and move, found again after a hand move, rebuilt by
``gc --reindex``). The records are made by the real loop on the injected clock (``tests/replay.py``)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import Opened
from orchestrator.control import history
from orchestrator.intake import memo_index
from orchestrator.store import Store
from orchestrator.tools import trace
from orchestrator.web import records
from replay import Replay

DAY = 86400.0


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args, "--root", str(root)], capture_output=True, text=True, timeout=60
    )


def memos_of(report: dict[str, Any]) -> list[str]:
    return [run["memo"] for run in report["runs"]]


# ------------------------------------------------------------------ history
@pytest.fixture
def month(tmp_path: Path) -> Path:
    """Runs that happened 30 days, 20 days, 5 days and half a day ago (the last one of reviewer)."""

    async def scenario(root: Path) -> None:
        now = datetime.now().astimezone()
        r = Replay(root, {"builder": {}, "reviewer": {}}, start=now - timedelta(days=30))
        for role, memo, then in (
            ("builder", "M30", 10 * DAY),
            ("builder", "M20", 15 * DAY),
            ("builder", "M05", 4.5 * DAY),
            ("reviewer", "R00", 0),
        ):
            await r.drop(role, f"{memo}.md")
            await r.exit(memo, 0)
            await r.advance(then)
        r.close()

    asyncio.run(scenario(tmp_path))
    return tmp_path


def test_history_shows_the_last_seven_days_and_says_how_to_see_more(month: Path) -> None:
    got = cli(month, "history", "--json")
    assert got.returncode == 0, got.stderr
    report = json.loads(got.stdout)
    assert memos_of(report) == ["M05.md", "R00.md"]
    assert report["totals"]["runs"] == 2
    window = report["window"]
    assert window["default"] is True and window["older"] == 2
    assert "--since DATE" in window["note"] and "--all" in window["note"]
    human = cli(month, "history")
    assert human.returncode == 0, human.stderr
    assert human.stdout.rstrip().splitlines()[-1] == window["note"]
    assert "2 older run(s) not shown" in window["note"]

    def runs(*args: str) -> list[str]:
        done = cli(month, "history", "--json", *args)
        assert done.returncode == 0, done.stderr
        return memos_of(json.loads(done.stdout))

    assert runs("--all") == ["M30.md", "M20.md", "M05.md", "R00.md"]
    assert runs("--limit", "3") == ["M20.md", "M05.md", "R00.md"], "the newest N, oldest first"
    assert runs("--role", "builder") == ["M05.md"]
    assert runs("--role", "builder", "--limit", "2") == ["M20.md", "M05.md"]
    day = lambda days: (datetime.now().astimezone() - timedelta(days=days)).date().isoformat()  # noqa: E731
    assert runs("--since", day(25)) == ["M20.md", "M05.md", "R00.md"]
    assert runs("--since", day(40), "--until", day(15)) == ["M30.md", "M20.md"], "--until DATE: to the end of that day"
    quiet = json.loads(cli(month, "history", "--json", "--all").stdout)["window"]
    assert quiet["default"] is False and quiet["note"] is None
    bad = cli(month, "history", "--until", "someday")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--until 'someday'" in bad.stderr


@pytest.fixture
def busy(tmp_path: Path) -> Path:
    """60 runs of today, one a minute, of two roles in turns."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}, "reviewer": {}}, start=datetime.now().astimezone() - timedelta(hours=2))
        for i in range(60):
            await r.drop("builder" if i % 2 else "reviewer", f"B{i:02d}.md")
            await r.exit(f"B{i:02d}", 0)
            await r.advance(60)
        r.close()

    asyncio.run(scenario(tmp_path))
    return tmp_path


def test_history_shows_the_newest_50_with_the_totals_of_the_period_and_pages_with_before(busy: Path) -> None:
    first = json.loads(cli(busy, "history", "--json").stdout)
    assert memos_of(first) == [f"B{i:02d}.md" for i in range(10, 60)], "the newest 50, oldest first"
    assert first["totals"]["runs"] == 60 and first["totals"]["by_role"]["builder"]["runs"] == 30, "of the period"
    assert first["next_before"] == first["runs"][0]["run_id"]
    note = first["window"]["note"]
    assert (
        note.startswith("50 run(s) shown of the 60 of the last 7 days") and f"--before {first['next_before']}" in note
    )
    human = cli(busy, "history")
    assert human.returncode == 0, human.stderr
    assert human.stdout.rstrip().splitlines()[-1] == note
    assert human.stdout.count("succeeded") == 50, "the table shows the page, not the period"
    rest = json.loads(cli(busy, "history", "--json", "--before", str(first["next_before"])).stdout)
    assert memos_of(rest) == [f"B{i:02d}.md" for i in range(10)] and rest["next_before"] is None
    assert rest["totals"] == first["totals"], "the same period, the same totals"
    assert len(memos_of(json.loads(cli(busy, "history", "--json", "--all").stdout))) == 60
    assert len(memos_of(json.loads(cli(busy, "history", "--json", "--limit", "55").stdout))) == 55
    bad = cli(busy, "history", "--before", "0")
    assert bad.returncode == 2 and "--before 0" in bad.stderr

    db = busy / ".orchestrator" / "state.db"
    shown = records.page(db, None, None)
    assert [r["memo"] for r in shown["runs"]] == memos_of(first)[::-1], "the dashboard's page: the same, newest first"
    assert shown["next_before"] == first["next_before"]
    assert [r["memo"] for r in records.page(db, None, shown["next_before"])["runs"]] == memos_of(rest)[::-1]


def test_every_filter_of_history_and_status_is_served_by_an_index(month: Path) -> None:
    store = Store(month / ".orchestrator" / "state.db", readonly=True)
    asked: list[str] = []
    store.db.set_trace_callback(asked.append)
    since, until = "2026-01-01T00:00:00.000+00:00", "2027-01-01T00:00:00.000+00:00"
    for kwargs in (
        {"since": since},
        {"since": since, "until": until},
        {"role": "builder", "since": since},
        {"limit": 10},
        {"role": "builder", "limit": 10},
        {"role": "builder", "since": since, "limit": 10},
    ):
        asked.clear()
        store.history(**kwargs)
        assert len(asked) == 1
        plan = " | ".join(row[3] for row in store.db.execute("EXPLAIN QUERY PLAN " + asked[0]))
        assert "USING INDEX" in plan and "TEMP B-TREE" not in plan, f"{kwargs}: {plan}"
    for role, since_ in ((None, since), ("builder", since), ("builder", None)):
        asked.clear()
        history._sums(store.db, role, since_, None)  # the totals of the period
        plan = " | ".join(row[3] for row in store.db.execute("EXPLAIN QUERY PLAN " + asked[0]))
        assert "SEARCH runs USING INDEX" in plan, f"the totals of {role} from {since_}: {plan}"
    asked.clear()
    store.runs_of_memo("builder", "M05.md")
    plan = " | ".join(row[3] for row in store.db.execute("EXPLAIN QUERY PLAN " + asked[0]))
    assert "SEARCH run_memos USING PRIMARY KEY" in plan and "SCAN" not in plan, plan
    store.db.set_trace_callback(None)
    store.close()


# ------------------------------------------------------------------ trace
def conversation(root: Path, others: int = 0) -> None:
    """P (builder, archived) <- R1 (reviewer, failed) <- R2 (builder, running) <- R3 (reviewer, waiting in its
    inbox); the memo index is built on the empty project first and then kept by the loop alone. ``others``:
    unrelated memos put into builder's archive/ by hand."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"timeout": "1d"}, "reviewer": {}}, start=datetime.now().astimezone())
        memo_index.rebuild(r.sup.store.db, root, "2026-11-30T09:00:00.000+00:00")
        await r.drop("builder", "P.md", front={"id": "P", "subject": "plan"})
        await r.exit("P", 0)
        await r.drop("reviewer", "R1.md", front={"id": "R1", "reply_to": "P"})
        await r.exit("R1", 3)
        await r.drop("builder", "R2.md", front={"id": "R2", "reply_to": "R1"})
        waiting = root / "memo" / "reviewer" / "inbox" / "R3.md"
        waiting.write_text("---\nid: R3\nreply_to: R2\n---\nlater\n", encoding="utf-8")  # not claimed yet
        for i in range(others):
            path = root / "memo" / "builder" / "archive" / f"other-{i:03d}.md"
            path.write_text(f"---\nid: other-{i}\n---\nunrelated\n", encoding="utf-8")
        r.sup.store.commit_pending()
        r.close()

    asyncio.run(scenario(root))


def tree(report: dict[str, Any]) -> list[str]:
    out: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        out.append(f"{node['id']} {node['role']}/{node['folder']} {node['state']}")
        for reply in node["replies"]:
            walk(reply)

    for root in report["roots"]:
        walk(root)
    return out


WHOLE = [
    "P builder/archive succeeded",
    "R1 reviewer/failed failed",
    "R2 builder/active running",
    "R3 reviewer/inbox waiting",
]


def test_trace_reads_the_memo_index_kept_at_every_claim_and_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation(tmp_path, others=200)
    opened = Opened(monkeypatch, tmp_path)
    report = trace.trace(tmp_path, "R2")
    assert tree(report) == WHOLE
    assert report["matches"] == ["builder/active/R2.md"]
    assert [r["state"] for r in report["roots"][0]["replies"][0]["runs"]] == ["failed"], "R1's run, from the record"
    assert len(opened.paths) <= 4, f"only the conversation's memos are read, not the 200 others: {len(opened.paths)}"


def test_trace_finds_a_memo_moved_by_hand_and_gc_reindex_puts_it_in_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation(tmp_path, others=50)
    failed = tmp_path / "memo" / "reviewer" / "failed"
    os.rename(failed / "R1.md", tmp_path / "memo" / "reviewer" / "archive" / "R1.md")  # by hand, behind its back
    moved = [line.replace("reviewer/failed", "reviewer/archive") for line in WHOLE]
    assert tree(trace.trace(tmp_path, "P")) == moved, "the reply found where it is now"
    assert json.loads(cli(tmp_path, "trace", "R1", "--json").stdout)["matches"] == ["reviewer/archive/R1.md"]
    by_hand = tmp_path / "memo" / "builder" / "archive" / "R4.md"
    by_hand.write_text("---\nid: R4\nreply_to: R3\n---\nwritten into archive/ by hand\n", encoding="utf-8")
    assert json.loads(cli(tmp_path, "trace", "R4", "--json").stdout)["matches"] == ["builder/archive/R4.md"]

    rebuilt = cli(tmp_path, "gc", "--reindex", "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["reindexed"] == 4 + 50 + 1
    said = json.loads(rebuilt.stdout)["reindex"]
    assert (said["added"], said["dropped"]) == (50 + 3, 1), (
        "the 50 others, R1 where it is now, R3 waiting, R4; R1's old row"
    )
    again = cli(tmp_path, "gc", "--reindex")
    assert "memo index rebuilt: 55 memo(s) on disk indexed, 0 of them not indexed before; 0 row(s)" in again.stdout
    opened = Opened(monkeypatch, tmp_path)
    assert tree(trace.trace(tmp_path, "P")) == [*moved, "R4 builder/archive done"]
    assert len(opened.paths) <= 6, f"nothing looked for outside the index: {len(opened.paths)} memos read"
