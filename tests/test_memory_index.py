"""The memory store's indexes: short words by the bigram index, a schema upgrade, the ranking window, the load budget."""

from __future__ import annotations

import random
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.memory import grams, rules
from orchestrator.memory.db import MemoryDB, schema
from orchestrator.memory.db import search as memsearch
from orchestrator.memory.section import render_for


def entry(
    text: str, role: str = "builder", layer: str = "daily", importance: int = 2, day: str = "2026-12-01"
) -> dict[str, Any]:
    return {
        "role": role,
        "layer": layer,
        "period": rules.period_for(layer, date.fromisoformat(day)),
        "text": text,
        "category": "event",
        "importance": importance,
        "source": "agent",
        "created_at": f"{day}T09:00:00.000",
    }


@pytest.fixture
def db(tmp_path: Path) -> Any:
    store = MemoryDB(tmp_path / ".orchestrator" / "memory.db")
    yield store
    store.close()


def found(db: MemoryDB, query: str, roles: list[str] | None = None, **filters: Any) -> set[str]:
    return {e["text"] for e in db.search(query, roles, limit=100, **filters)}


def test_one_and_two_character_words_are_found_anywhere_in_the_text(db: MemoryDB) -> None:
    texts = ["長期記憶の設計", "これは記憶", "記憶 と PM", "監督者が見た", "猫", "no match here", "the pm said so"]
    for text in texts:
        db.add(entry(text), 100)
    assert found(db, "記憶") == {"長期記憶の設計", "これは記憶", "記憶 と PM"}, "at the end and before a space too"
    assert found(db, "監督") == {"監督者が見た"}
    assert found(db, "PM") == {"記憶 と PM", "the pm said so"}, "case-insensitive, like the trigram index"
    assert found(db, "猫") == {"猫"} and found(db, "と") == {"記憶 と PM"}
    assert found(db, "記憶 PM") == {"記憶 と PM"}, "every word must be there"
    assert found(db, "長期記憶 の") == {"長期記憶の設計"}, "a long and a short word together"
    assert found(db, "憶と") == set(), "a pair across a space is no substring"


def test_the_bigram_index_follows_forget_and_replace(db: MemoryDB) -> None:
    first = db.add(entry("記憶の話"), 100)
    second = db.add(entry("監督の話"), 100)
    db.forget(first, "wrong", "cli", "2026-12-01T10:00")
    assert found(db, "記憶") == set()
    db.replace(second, "方針の話", "renamed", "cli", "2026-12-01T10:00")
    assert found(db, "監督") == set() and found(db, "方針") == {"方針の話"} and found(db, "話") == {"方針の話"}
    db.add(entry("また記憶"), 100)
    assert found(db, "記憶") == {"また記憶"}


def test_an_older_database_gets_its_bigram_index_on_first_open(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    store = MemoryDB(path)
    ids = [store.add(entry(t), 100) for t in ("古い記憶", "監督の判断", "plain words")]
    store.forget(ids[2], "gone", "cli", "2026-12-01T10:00")
    # as the first schema left it: no bigram table, user_version 0
    store.conn.execute("DROP TABLE entries_bi")
    store.conn.execute("PRAGMA user_version=0")
    store.close()
    again = MemoryDB(path, create=False)
    try:
        assert again.conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
        assert found(again, "記憶") == {"古い記憶"} and found(again, "監督") == {"監督の判断"}
        assert found(again, "pl") == set(), "a tombstone is not indexed again"
    finally:
        again.close()


def test_a_common_word_is_ranked_among_its_newest_matches_in_scope(
    db: MemoryDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memsearch, "RANK_WINDOW", 5)
    ids = [db.add(entry(f"watcher note {n:02d}", importance=1 + n % 3), 100) for n in range(12)]
    other = [db.add(entry(f"watcher of planner {n}", role="planner"), 100) for n in range(6)]
    hits = db.search("watcher", ["builder"], limit=20)
    assert {h["id"] for h in hits} == set(ids[-5:]), "the newest five of builder's, not planner's newer ones"
    assert [h["importance"] for h in hits] == sorted((h["importance"] for h in hits), reverse=True)
    assert {h["id"] for h in db.search("watcher", ["builder"], limit=2)} <= set(ids[-5:])
    assert {h["id"] for h in db.search("planner", None, limit=20)} == set(other[-5:])
    assert len(db.search("note 1", ["builder"], limit=20)) == 3, "fewer than the window: all of them"


def test_search_filters_agree_with_a_plain_scan(db: MemoryDB) -> None:
    rng = random.Random(7)
    words = ["記憶", "監督", "バックログ", "PM", "設計", "watcher", "猫"]
    rows = []
    for n in range(300):
        text = " ".join(rng.sample(words, 3)) + f" {n}"
        e = entry(text, role=rng.choice(["builder", "team", "planner"]), importance=rng.randint(1, 9))
        e["layer"] = "daily"
        rows.append(e)
        db.add(e, 100)
    for query in ("記憶", "PM 猫", "バックログ 監督", "watcher"):
        for roles in (None, ["builder", "team"]):
            for minimum in (None, 5):
                expected = {
                    r["text"]
                    for r in rows
                    if all(w.lower() in r["text"].lower() for w in query.split())
                    and (roles is None or r["role"] in roles)
                    and (minimum is None or r["importance"] >= minimum)
                }
                got = {e["text"] for e in db.search(query, roles, min_importance=minimum, limit=1000)}
                assert got == expected, (query, roles, minimum)


def test_loading_only_what_the_budget_can_hold_renders_the_same_text(db: MemoryDB) -> None:
    rng = random.Random(3)
    today = date(2026, 12, 1)
    for n in range(600):
        layer = rng.choice(["daily", "daily", "weekly", "monthly", "core"])
        day = today - timedelta(days=rng.randrange(40))
        text = f"entry {n} " + "line\n" * rng.randrange(3) + "x" * rng.randrange(120)
        db.add(
            entry(
                text,
                role=rng.choice(["builder", "team"]),
                layer=layer,
                importance=rng.randint(1, 10),
                day=day.isoformat(),
            ),
            1000,
        )
    for lines, size in ((450, 32 * 1024), (40, 100_000), (5, 1_000), (2000, 10**6), (120, 4_000)):
        every = [rules.Group(t, e) for t, e, _ in db.prompt_groups(["builder", "team"], today)]
        assert render_for(db, "builder", today, lines, size) == rules.render_memory(every, lines, size), (lines, size)


def test_the_load_orders_its_candidates_in_the_index_that_holds_their_columns(db: MemoryDB) -> None:
    """``$memory`` picks each group's entries by importance and age from ``entries_load``: SQLite's own choice,
    ``entries_scope``, lacks those columns and read the table's row of every candidate (twice the time at 100,000)."""
    today = date(2026, 12, 1)
    for n in range(30):
        db.add(entry(f"entry {n}", layer=["core", "daily", "weekly"][n % 3], importance=1 + n % 5), 1000)
    ordered: list[str] = []
    db.conn.set_trace_callback(lambda sql: ordered.append(sql) if "ORDER BY e.importance" in sql else None)
    try:
        db.prompt_groups(["builder", "team"], today, most=450)
    finally:
        db.conn.set_trace_callback(None)
    assert len(ordered) == 3  # core, daily, weekly (no monthly entry)
    for sql in ordered:
        plan = " ".join(row[3] for row in db.conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
        assert "USING INDEX entries_load" in plan, plan


def test_bigram_tokens() -> None:
    assert grams.tokens("記憶") == f"{ord('記'):x}g{ord('憶'):x} {ord('憶'):x}gz"
    assert grams.tokens("Ab ab") == grams.tokens("ab") == "61g62 62gz"
    assert grams.query("PM") == '"70g6d"' and grams.query("p") == "70g*"
