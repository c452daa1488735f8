"""The memo index is complete from a project's first start: ``up`` indexes a store from before the index off the
loop (the work goes on meanwhile), and ``send`` checks ids and ``--reply-to`` through it."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import Opened, Project, wait_for
from orchestrator.intake import memo_index
from orchestrator.store import Store
from orchestrator.tools import index_build, send, trace
from orchestrator.tools.conversation_memos import Indexed, Scanned, memos_of
from replay import Replay


def by_hand(root: Path, role: str, folder: str, count: int, prefix: str = "old", named: bool = True) -> None:
    """``count`` memos in a chain, put into ``memo/<role>/<folder>/`` as a team from before the index left them
    (``named``: the id in the file name too, else in the front matter only)."""
    place = root / "memo" / role / folder
    place.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        reply = f"reply_to: {prefix}{i - 1}\n" if i else ""
        name = f"{prefix}{i}-step.md" if named else f"step-{prefix}{i}.md"
        (place / name).write_text(f"---\nid: {prefix}{i}\n{reply}---\nstep {i}\n", encoding="utf-8")


def complete(root: Path) -> bool:
    store = Store(root / ".orchestrator" / "state.db", readonly=True)
    try:
        return memo_index.is_complete(store.db)
    finally:
        store.close()


def test_the_first_start_indexes_old_memos_while_the_loop_works_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan is held at a gate (the one thing faked): a memo arrives, runs and is archived meanwhile."""
    gate = threading.Event()
    real = memo_index.missing

    def held(*args: Any) -> memo_index.Missing:
        assert gate.wait(30), "the test never opened the gate"
        return real(*args)

    monkeypatch.setattr(index_build.memo_index, "missing", held)

    async def scenario() -> None:
        r = Replay(tmp_path, start=datetime.now().astimezone())
        by_hand(tmp_path, "builder", "archive", 30)
        (tmp_path / "memo" / "builder" / "failed" / "stale.md").touch()
        memo_index.placed(r.sup.store.db, tmp_path / "memo" / "builder" / "failed" / "stale.md", "stale", None, 0.0)
        os.unlink(tmp_path / "memo" / "builder" / "failed" / "stale.md")  # a row whose memo a person removed
        build = r.sup.extension(index_build.IndexBuild)
        build.start()
        await r.drop("builder", "NEW.md", front={"id": "NEW", "reply_to": "old29"})
        await r.exit("NEW", 0)
        assert "NEW.md" in r.folder("builder", "archive"), "the memo ran while the scan was held"
        assert not memo_index.is_complete(r.sup.store.db), "not complete while the scan is held"
        assert isinstance(memos_of(tmp_path, r.sup.store.db), Scanned), "trace scans until it is"
        gate.set()
        deadline = time.monotonic() + 30
        while not build.done:
            assert time.monotonic() < deadline, "the index was never completed"
            await asyncio.sleep(0.01)
        db = r.sup.store.db
        assert memo_index.is_complete(db)
        assert build.added == 30, "the old memos, and not the one the loop indexed at its claim"
        assert [row.name for row in memo_index.with_ids(db, ["old5", "NEW"])] == ["NEW.md", "old5-step.md"]
        assert memo_index.named(db, ["stale.md"]) == [], "the row of a removed memo dropped"
        assert "memo index: 30 memo(s) indexed, 1 row(s)" in r.console.text
        found = memos_of(tmp_path, db)
        assert isinstance(found, Indexed) and [e.name for e in found.replies("old29")] == ["NEW.md"]
        r.close()

    asyncio.run(scenario())


def test_a_store_from_before_the_index_is_indexed_by_its_first_up(project: Project) -> None:
    project.configure()
    by_hand(project.root, "builder", "archive", 40)
    store = Store(project.root / ".orchestrator" / "state.db")
    store.db.execute("DROP TABLE memo_index")  # as a database from before the index has it
    store.db.execute("DELETE FROM meta")
    store.close()
    project.drop("builder", "first.md", front={"id": "first", "reply_to": "old39"})
    orch = project.up()
    wait_for(lambda: "first.md" in project.folder("builder", "archive"), what="the waiting memo run")
    wait_for(lambda: complete(project.root), what="the memo index completed by up")
    report = trace.trace(project.root, "old0")
    assert len(report["matches"]) == 1 and report["roots"][0]["id"] == "old0"
    assert orch.terminate(30) == 0
    assert "memo index: 40 memo(s) indexed" in orch.text()


def test_send_checks_reply_to_through_the_index_and_still_finds_a_memo_written_by_hand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "roles.yaml").write_text(
        "roles:\n  builder:\n    command: [sh, -c, 'true']\n    prompt: p.md\n", encoding="utf-8"
    )
    (tmp_path / "p.md").write_text("$memo\n", encoding="utf-8")
    by_hand(tmp_path, "builder", "archive", 200, named=False)
    store = Store(tmp_path / ".orchestrator" / "state.db")
    memo_index.rebuild(store.db, tmp_path, "2026-12-01T09:00:00.000+00:00")
    store.close()
    opened = Opened(monkeypatch, tmp_path)
    sent = send.send(tmp_path, "builder", "next", reply_to="old150", strict=True)
    assert sent.warning is None and sent.path.parent.name == "inbox"
    read = [path for path in opened.paths if "/archive/" in path]
    assert read == [], f"no memo read to know old150 (only its own written): {read[:5]}"
    by_hand(tmp_path, "builder", "failed", 1, prefix="manual", named=False)  # not indexed: written by hand since
    assert send.send(tmp_path, "builder", "again", reply_to="manual0", strict=True).warning is None
    unknown = send.send(tmp_path, "builder", "third", reply_to="nobody")
    assert unknown.warning is not None and "nobody" in unknown.warning
    waiting = send.send(tmp_path, "builder", "fourth", reply_to=sent.memo_id, strict=True)
    assert waiting.warning is None, "a memo waiting in an inbox (indexed only at its claim) is known"
    taken = send.KnownIds(tmp_path)
    try:
        assert taken.taken("old7") and taken.taken(sent.memo_id) and not taken.taken("old7x")
    finally:
        taken.close()
