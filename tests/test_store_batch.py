"""One transaction per event, and the lazy one of an agent's start that joins the next (or ends with the turn)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from orchestrator.store import Store


def _insert(store: Store, name: str) -> int:
    return store.insert_run(role="builder", backend="command", memos=[name], memo_ids=[None], state="queued")


def _seen_elsewhere(path: Path) -> list[str]:
    other = sqlite3.connect(path)
    try:
        return [row[0] for row in other.execute("SELECT memos FROM runs ORDER BY run_id")]
    finally:
        other.close()


def test_a_batch_commits_at_its_end_and_a_nested_one_is_part_of_it(tmp_path: Path):
    store = Store(tmp_path / "state.db")
    with store.batch():
        _insert(store, "a.md")
        with store.batch():
            _insert(store, "b.md")
        assert _seen_elsewhere(store.path) == [], "nothing is committed before the outer batch ends"
    assert _seen_elsewhere(store.path) == ['["a.md"]', '["b.md"]']
    store.close()


def test_a_lazy_batch_without_a_loop_commits_at_once(tmp_path: Path):
    store = Store(tmp_path / "state.db")
    with store.batch(lazy=True):
        _insert(store, "a.md")
    assert _seen_elsewhere(store.path) == ['["a.md"]']
    store.close()


def test_a_lazy_batch_joins_the_next_batch_of_the_turn_or_ends_with_the_turn(tmp_path: Path):
    store = Store(tmp_path / "state.db")
    seen: dict[str, list[str]] = {}

    async def main() -> None:
        with store.batch(lazy=True):
            _insert(store, "a.md")
        seen["after the lazy batch"] = _seen_elsewhere(store.path)
        with store.batch():
            _insert(store, "b.md")
        seen["after the next batch"] = _seen_elsewhere(store.path)
        with store.batch(lazy=True):
            _insert(store, "c.md")
        seen["before the turn ends"] = _seen_elsewhere(store.path)
        await asyncio.sleep(0)
        seen["once the turn ended"] = _seen_elsewhere(store.path)
        with store.batch(lazy=True):
            _insert(store, "d.md")
        store.commit_pending()  # what a spawn does first: its attempt on record before the agent
        seen["after commit_pending"] = _seen_elsewhere(store.path)
        with store.batch(lazy=True):
            _insert(store, "e.md")

    asyncio.run(main())
    assert seen == {
        "after the lazy batch": [],
        "after the next batch": ['["a.md"]', '["b.md"]'],
        "before the turn ends": ['["a.md"]', '["b.md"]'],
        "once the turn ended": ['["a.md"]', '["b.md"]', '["c.md"]'],
        "after commit_pending": ['["a.md"]', '["b.md"]', '["c.md"]', '["d.md"]'],
    }
    store.close()  # the lazy e.md was still open when the loop ended: closing commits it
    assert _seen_elsewhere(store.path)[-1] == '["e.md"]'


def test_the_loops_store_knows_the_kept_attempt_counts_without_asking_the_database(tmp_path: Path):
    first = Store(tmp_path / "state.db")
    first.set_memo_attempts("builder", "kept.md", 2)  # left by an earlier orchestrator
    first.close()

    store = Store(tmp_path / "state.db")
    store.for_the_loop()
    asked: list[str] = []
    store.db.set_trace_callback(lambda sql: asked.append(sql) if "memo_attempts" in sql else None)
    assert store.memo_attempts("builder", "new.md") == 0
    store.forget_memo_attempts("builder", ["new.md", "other.md"])
    assert asked == [], "a memo without a kept count costs no statement"
    assert store.memo_attempts("builder", "kept.md") == 2, "a count on record at the start is known"
    store.set_memo_attempts("builder", "back.md", 1)
    assert store.memo_attempts("builder", "back.md") == 1
    store.forget_memo_attempts("builder", ["back.md", "kept.md"])
    assert store.memo_attempts("builder", "back.md") == store.memo_attempts("builder", "kept.md") == 0
    store.close()
    again = Store(tmp_path / "state.db")  # not the loop's: it asks the database, which agrees
    assert [again.memo_attempts("builder", n) for n in ("kept.md", "back.md")] == [0, 0]
    again.close()
