"""The inotify watcher read by the loop itself: real folders, a real inotify descriptor, a real event loop.

Each test runs the watcher in ``asyncio.run`` and waits, bounded by a deadline, for the events
it expects; the classification of events no folder can produce on demand (a full kernel queue)
is tested on ``classify`` directly.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import Project, wait_for
from orchestrator.core.events import Event, MemoGone, MemoSeen, RescanNeeded
from orchestrator.intake import inotify
from orchestrator.intake.inotify import IN_Q_OVERFLOW, InotifyWatcher, make_watcher

pytestmark = pytest.mark.skipif(not inotify.available(), reason="inotify is Linux only")


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Let the loop run (and so the watcher read) until ``condition`` holds; fail after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def run(test: Callable[[InotifyWatcher, list[Event], Path], object], tmp_path: Path) -> None:
    role_dir = tmp_path / "memo" / "builder"
    events: list[Event] = []

    async def main() -> None:
        watcher = InotifyWatcher({"builder": role_dir}, events.append)
        watcher.start()
        try:
            await test(watcher, events, role_dir)  # type: ignore[misc]
        finally:
            watcher.stop()

    asyncio.run(main())


def test_a_memo_renamed_in_is_complete_and_one_written_in_place_is_complete_when_closed(tmp_path):
    async def test(watcher, events, role_dir):
        assert (role_dir / "inbox").is_dir(), "start makes the inbox"
        inbox = role_dir / "inbox"
        (role_dir / "draft.md").write_text("hello", encoding="utf-8")
        os.rename(role_dir / "draft.md", inbox / "A.md")
        await until(lambda: MemoSeen("builder", inbox / "A.md", complete=True) in events, "the rename")
        handle = open(inbox / "B.md", "w", encoding="utf-8")
        handle.write("half")
        handle.flush()
        await until(lambda: MemoSeen("builder", inbox / "B.md", complete=False) in events, "the creation")
        assert MemoSeen("builder", inbox / "B.md", complete=True) not in events, "still open: not complete"
        handle.close()
        await until(lambda: MemoSeen("builder", inbox / "B.md", complete=True) in events, "the close")

    run(test, tmp_path)


def test_a_memo_renamed_away_or_deleted_is_gone(tmp_path):
    async def test(watcher, events, role_dir):
        inbox, active = role_dir / "inbox", role_dir / "active"
        active.mkdir()
        for name in ("A.md", "B.md"):
            (inbox / name).write_text("x", encoding="utf-8")
        await until(lambda: len([e for e in events if isinstance(e, MemoSeen) and e.complete]) == 2, "two memos")
        os.rename(inbox / "A.md", active / "A.md")
        (inbox / "B.md").unlink()
        await until(
            lambda: MemoGone("builder", inbox / "A.md") in events and MemoGone("builder", inbox / "B.md") in events,
            "both gone",
        )
        assert not any(isinstance(e, MemoSeen) and e.path.parent == active for e in events), "active/ is not watched"

    run(test, tmp_path)


def test_names_that_are_no_memo_and_folders_in_the_inbox_are_ignored(tmp_path):
    async def test(watcher, events, role_dir):
        inbox = role_dir / "inbox"
        for name in (".A.md.swp", "notes.txt", ".#A.md", "A.md~"):
            (inbox / name).write_text("x", encoding="utf-8")
        (inbox / "sub.md").mkdir()
        (role_dir / "handoff.md").write_text("x", encoding="utf-8")
        (inbox / "Z.md").write_text("x", encoding="utf-8")  # the last one: once it is seen, the rest were read
        await until(lambda: MemoSeen("builder", inbox / "Z.md", complete=True) in events, "Z.md")
        assert {e.path.name for e in events if isinstance(e, MemoSeen)} == {"Z.md"}
        assert not any(isinstance(e, RescanNeeded) for e in events)

    run(test, tmp_path)


def test_an_inbox_removed_means_a_rescan_and_one_made_again_is_watched_again(tmp_path):
    async def test(watcher, events, role_dir):
        inbox = role_dir / "inbox"
        shutil.rmtree(inbox)
        await until(lambda: any(isinstance(e, RescanNeeded) for e in events), "a rescan asked for")
        assert watcher.healthy() == f"folder {inbox} was removed"
        inbox.mkdir()
        await until(lambda: watcher.healthy() is None, "the new inbox watched")
        (inbox / "C.md").write_text("x", encoding="utf-8")
        await until(lambda: MemoSeen("builder", inbox / "C.md", complete=True) in events, "events from the new inbox")

    run(test, tmp_path)


def test_a_role_folder_removed_is_reported_and_a_restart_watches_the_new_one(tmp_path):
    async def test(watcher, events, role_dir):
        shutil.rmtree(role_dir)
        await until(lambda: RescanNeeded(f"folder {role_dir} changed") in events, "the lost folder's event")
        (role_dir / "inbox").mkdir(parents=True)  # the same inode number may come back: the watch is still gone
        assert watcher.healthy() is not None
        watcher.restart()
        assert watcher.healthy() is None
        events.clear()
        (role_dir / "inbox" / "D.md").write_text("x", encoding="utf-8")
        await until(lambda: MemoSeen("builder", role_dir / "inbox" / "D.md", complete=True) in events, "new events")

    run(test, tmp_path)


def test_a_full_kernel_queue_means_a_rescan(tmp_path):
    watcher = InotifyWatcher({"builder": tmp_path}, lambda _e: None)
    assert watcher.classify(-1, IN_Q_OVERFLOW, "") == [RescanNeeded("inotify queue overflowed")]
    assert watcher.classify(12345, 0x8, "A.md") == [], "an event of a watch already let go is nothing"


def test_a_stopped_watcher_says_so_and_stopping_twice_is_harmless(tmp_path):
    async def test(watcher, events, role_dir):
        watcher.stop()
        watcher.stop()
        assert watcher.healthy() == "the inotify watch is closed"

    run(test, tmp_path)


def test_watchdog_is_chosen_when_asked_for(tmp_path, monkeypatch):
    from orchestrator.intake.watcher import InboxWatcher

    dirs = {"builder": tmp_path}
    assert isinstance(make_watcher(dirs, print), InotifyWatcher)
    monkeypatch.setenv("ORCHESTRATOR_WATCHER", "watchdog")
    assert isinstance(make_watcher(dirs, print), InboxWatcher)


@pytest.mark.parametrize("kind", ["inotify", "watchdog"])
def test_memos_run_once_with_either_watcher(project: Project, kind: str) -> None:
    project.configure({"builder": {"max_concurrent": 4}})
    orch = project.up(ORCHESTRATOR_WATCHER=kind)
    for i in range(20):
        project.drop("builder", f"W-{i:02d}.md", {"id": f"W-{i:02d}"})
    wait_for(lambda: len(project.folder("builder", "archive")) == 20, what="20 memos archived")
    assert orch.stop() == 0
    assert project.folder("builder", "inbox") == [] and project.folder("builder", "active") == []
    assert "watcher:" not in orch.output, "no watcher trouble reported"
