"""The WAL checkpointed on a thread of its own: the log stays bounded without a checkpoint at the loop's commits."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

from conftest import wait_for
from orchestrator import store_wal
from orchestrator.store import Store


def _commit_runs(store: Store, count: int) -> None:
    for n in range(count):
        with store.batch():
            run_id = store.insert_run(
                role="builder", backend="command", memos=[f"m{n}.md"], memo_ids=[None], state="queued", attempt=1
            )
            store.update_run(run_id, state="succeeded", reason=f"run {n} " + "x" * 500)


def _wal_size(db: Path) -> int:
    try:
        return os.path.getsize(f"{db}-wal")
    except FileNotFoundError:
        return 0


def test_the_thread_keeps_the_log_short_where_no_checkpoint_lets_it_grow(tmp_path: Path):
    commits = store_wal.COMMITS * 12

    unchecked = Store(tmp_path / "a" / "state.db")
    unchecked.db.execute("PRAGMA wal_autocheckpoint=0")  # what the loop's connection has, without the thread
    _commit_runs(unchecked, commits)
    grown = _wal_size(unchecked.path)

    checked = Store(tmp_path / "b" / "state.db")
    checked.for_the_loop()
    for batch in range(12):
        _commit_runs(checked, store_wal.COMMITS)
        # over, not only begun: on a loaded machine the next batch's commits would otherwise race the checkpoint
        wait_for(lambda b=batch: checked._wal.rounds > b, what=f"checkpoint {batch + 1} done")  # type: ignore[union-attr]
    thread_names = [t.name for t in threading.enumerate()]
    kept = _wal_size(checked.path)
    assert "wal-checkpoint" in thread_names
    assert kept < grown / 3, f"the log was {kept} bytes with the thread, {grown} without"

    checked.close()
    unchecked.close()
    assert "wal-checkpoint" not in [t.name for t in threading.enumerate()], "stopped at close"
    assert _wal_size(checked.path) == 0, "the last connection's close folds the log in and removes it"


def test_a_thread_that_cannot_open_the_database_hands_checkpoints_back_to_sqlite(tmp_path: Path, monkeypatch):
    store = Store(tmp_path / "state.db")

    def refuse(*_args, **_kwargs):
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(store_wal.sqlite3, "connect", refuse)
    store.for_the_loop()
    wait_for(lambda: store._wal is not None and not store._wal.alive, what="the thread gone")
    _commit_runs(store, store_wal.COMMITS)
    assert store._wal is None
    assert store.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    store.close()
