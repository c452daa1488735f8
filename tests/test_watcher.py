"""The watcher as a unit: ``classify`` (pure), the handler that never raises, health checks and the overflow spy.

``classify`` is fed watchdog event objects directly, without threads. The handler and
``InboxWatcher`` tests use a plain list as the supervisor's ``post``.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from conftest import wait_for
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileClosedNoWriteEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileOpenedEvent,
)

from orchestrator.core.events import MemoGone, MemoSeen, RescanNeeded
from orchestrator.intake.watcher import EVENT_TYPES, TEST_FAULT_ENV, InboxWatcher, _Handler, classify

ROLE_DIR = "/p/memo/builder"
INBOX = f"{ROLE_DIR}/inbox"
ACTIVE = f"{ROLE_DIR}/active"


def run(event):  # type: ignore[no-untyped-def]
    return classify("builder", ROLE_DIR, event)


# ------------------------------------------------------------------ classify
def test_a_closed_memo_is_complete_and_a_created_or_modified_one_is_not():
    assert run(FileClosedEvent(f"{INBOX}/a.md")) == [MemoSeen("builder", Path(f"{INBOX}/a.md"), complete=True)]
    assert run(FileCreatedEvent(f"{INBOX}/a.md")) == [MemoSeen("builder", Path(f"{INBOX}/a.md"), complete=False)]
    assert run(FileModifiedEvent(f"{INBOX}/a.md")) == [MemoSeen("builder", Path(f"{INBOX}/a.md"), complete=False)]


def test_a_memo_renamed_into_the_inbox_is_complete():
    # the atomic drop: a hidden temporary renamed to its final name
    assert run(FileMovedEvent(f"{INBOX}/.a.md.tmp", f"{INBOX}/a.md")) == [
        MemoSeen("builder", Path(f"{INBOX}/a.md"), complete=True)]  # fmt: skip
    assert run(FileMovedEvent("/elsewhere/a.md", f"{INBOX}/a.md")) == [
        MemoSeen("builder", Path(f"{INBOX}/a.md"), complete=True)]  # fmt: skip


def test_leaving_the_inbox_is_gone():
    assert run(FileDeletedEvent(f"{INBOX}/a.md")) == [MemoGone("builder", Path(f"{INBOX}/a.md"))]
    # our own claim: a move inside the role folder's watch
    assert run(FileMovedEvent(f"{INBOX}/a.md", f"{ACTIVE}/a.md")) == [MemoGone("builder", Path(f"{INBOX}/a.md"))]


def test_a_rename_within_the_inbox_is_gone_then_seen():
    assert run(FileMovedEvent(f"{INBOX}/a.md", f"{INBOX}/b.md")) == [
        MemoGone("builder", Path(f"{INBOX}/a.md")),
        MemoSeen("builder", Path(f"{INBOX}/b.md"), complete=True),
    ]


@pytest.mark.parametrize("name", [".a.md", ".a.md.tmp", "a.md~", "a.md.swp", "#a.md#", "a.txt", "a.md.tmp", "README"])
def test_names_that_are_no_memo_are_ignored(name):
    for event in (FileCreatedEvent(f"{INBOX}/{name}"), FileClosedEvent(f"{INBOX}/{name}"),
                  FileDeletedEvent(f"{INBOX}/{name}")):  # fmt: skip
        assert run(event) == []


@pytest.mark.parametrize("folder", ["active", "archive", "failed", "cancelled", "inbox/sub"])
def test_files_outside_the_inbox_are_ignored(folder):
    path = f"{ROLE_DIR}/{folder}/a.md"
    assert run(FileClosedEvent(path)) == []
    assert run(FileDeletedEvent(path)) == []
    assert run(FileMovedEvent(path, f"{ROLE_DIR}/{folder}/b.md")) == []


def test_events_that_say_nothing_new_are_ignored():
    # opening and reading a memo (the agent does) is filtered out before classify ever sees it
    assert FileOpenedEvent not in EVENT_TYPES and FileClosedNoWriteEvent not in EVENT_TYPES
    assert FileClosedEvent in EVENT_TYPES and FileMovedEvent in EVENT_TYPES and DirDeletedEvent in EVENT_TYPES
    # every file change also reports its folder as modified: that would mean a rescan per memo
    assert DirModifiedEvent not in EVENT_TYPES


@pytest.mark.parametrize("event", [
    DirDeletedEvent(INBOX), DirCreatedEvent(INBOX), DirMovedEvent(INBOX, f"{ROLE_DIR}/old-inbox"),
    DirMovedEvent(f"{ROLE_DIR}/new", INBOX), DirDeletedEvent(ROLE_DIR), DirCreatedEvent(ROLE_DIR),
])  # fmt: skip
def test_the_inbox_or_role_folder_changing_means_a_rescan(event):
    [item] = run(event)
    assert isinstance(item, RescanNeeded) and INBOX in item.reason


@pytest.mark.parametrize("event", [DirCreatedEvent(f"{ROLE_DIR}/archive"), DirDeletedEvent(f"{INBOX}/sub"),
                                   DirCreatedEvent(f"{INBOX}/x.md")])  # fmt: skip
def test_other_folders_changing_need_no_rescan(event):
    assert run(event) == []


def test_bytes_paths_and_odd_names():
    assert run(FileClosedEvent(f"{INBOX}/a.md".encode())) == [MemoSeen("builder", Path(f"{INBOX}/a.md"), complete=True)]
    odd = f"{INBOX}/$(rm -rf ~); `x` 'q' \"d\" ü\n.md"
    assert run(FileClosedEvent(odd)) == [MemoSeen("builder", Path(odd), complete=True)]


# --------------------------------------------------------------- the handler
def test_the_handler_turns_an_injected_fault_into_a_rescan(monkeypatch):
    posted: list[object] = []
    handler = _Handler("builder", Path(ROLE_DIR), posted.append)
    monkeypatch.setenv(TEST_FAULT_ENV, "boom")
    handler.dispatch(FileClosedEvent(f"{INBOX}/x-boom.md"))
    handler.dispatch(FileMovedEvent(f"{INBOX}/.tmp", f"{INBOX}/y-boom.md"))  # the destination counts too
    handler.dispatch(FileClosedEvent(f"{INBOX}/fine.md"))
    assert [type(p) for p in posted] == [RescanNeeded, RescanNeeded, MemoSeen]
    assert "injected fault" in posted[0].reason and "x-boom.md" in posted[0].reason  # type: ignore[attr-defined]
    monkeypatch.delenv(TEST_FAULT_ENV)
    posted.clear()
    handler.dispatch(FileClosedEvent(f"{INBOX}/x-boom.md"))
    assert posted == [MemoSeen("builder", Path(f"{INBOX}/x-boom.md"), complete=True)], "no hook without the variable"


def test_the_handler_never_raises_even_when_posting_fails():
    def broken_post(_item: object) -> None:
        raise RuntimeError("the loop is closed")

    handler = _Handler("builder", Path(ROLE_DIR), broken_post)
    handler.dispatch(FileClosedEvent(f"{INBOX}/a.md"))  # must not raise: watchdog's thread would die
    calls: list[object] = []

    def post_fails_once(item: object) -> None:
        calls.append(item)
        if len(calls) == 1:
            raise OSError("full")

    _Handler("builder", Path(ROLE_DIR), post_fails_once).dispatch(FileClosedEvent(f"{INBOX}/a.md"))
    assert isinstance(calls[-1], RescanNeeded), "a failed post still asks for a rescan"


def test_an_inotify_overflow_log_record_means_a_rescan(tmp_path):
    posted: list[object] = []
    inotify_log = logging.getLogger("watchdog.observers.inotify_c")
    watcher = InboxWatcher({"builder": tmp_path / "memo" / "builder"}, posted.append)
    watcher.start()
    try:
        # the very message watchdog's inotify layer logs when the kernel queue overflowed
        inotify_log.warning("Inotify queue overflowed; filesystem events were lost")
        inotify_log.warning("something else")
    finally:
        watcher.stop()
    assert posted == [RescanNeeded("inotify queue overflowed")]
    inotify_log.warning("Inotify queue overflowed after stop")
    assert len(posted) == 1, "a stopped watcher leaves the logger alone"


# ------------------------------------------------------------- InboxWatcher
def test_the_watcher_reports_a_removed_or_replaced_folder_and_recovers_on_restart(tmp_path):
    role_dir = tmp_path / "memo" / "builder"
    posted: list[object] = []
    watcher = InboxWatcher({"builder": role_dir}, posted.append)
    watcher.start()
    try:
        assert watcher.healthy() is None
        (role_dir / "inbox" / "a.md").write_text("hello", encoding="utf-8")
        wait_for(lambda: MemoSeen("builder", role_dir / "inbox" / "a.md", complete=True) in posted, timeout=10,
                 what="the close event")  # fmt: skip

        shutil.rmtree(role_dir / "inbox")
        assert watcher.healthy() == f"folder {role_dir / 'inbox'} was removed"
        wait_for(lambda: any(isinstance(p, RescanNeeded) for p in posted), timeout=10, what="a rescan asked for")

        shutil.rmtree(role_dir)
        assert watcher.healthy() == f"folder {role_dir} was removed"
        (role_dir / "inbox").mkdir(parents=True)  # the same inode number may come back: the watch is still gone
        wait_for(lambda: watcher.healthy() in (f"folder {role_dir} was replaced",
                                               f"the watch on {role_dir} ended (its folder was removed)"),
                 timeout=10, what="the lost watch noticed")  # fmt: skip

        watcher.restart()
        assert watcher.healthy() is None
        assert (role_dir / "inbox").is_dir(), "a restart makes the inbox again"
        posted.clear()
        (role_dir / "inbox" / "b.md").write_text("hello", encoding="utf-8")
        wait_for(lambda: MemoSeen("builder", role_dir / "inbox" / "b.md", complete=True) in posted, timeout=10,
                 what="events from the new folder")  # fmt: skip
    finally:
        watcher.stop()
    assert watcher.healthy() == "the file watcher thread stopped"
