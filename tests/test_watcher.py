"""The watcher as a unit: ``classify`` (pure), the handler that never raises, the prompt move pairing and
how it is fenced, health checks and the overflow spy.

``classify`` is fed watchdog event objects directly, without threads. The prompt-pairing queue is
driven by real threads, each wait bounded by a deadline. The handler and ``InboxWatcher`` tests use a
plain list as the supervisor's ``post``.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
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
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.utils.delayed_queue import DelayedQueue

from conftest import wait_for
from fault_injection import fault_injection
from faults import faulty_classify
from orchestrator.core.events import MemoGone, MemoSeen, RescanNeeded
from orchestrator.intake.watcher import (
    EVENT_TYPES,
    InboxWatcher,
    _Handler,
    _move_queue,
    _probe_layout,
    _PromptDelayedQueue,
    classify,
    queue_problem,
)

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
        MemoSeen("builder", Path(f"{INBOX}/a.md"), complete=True)
    ]
    assert run(FileMovedEvent("/elsewhere/a.md", f"{INBOX}/a.md")) == [
        MemoSeen("builder", Path(f"{INBOX}/a.md"), complete=True)
    ]


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
    for event in (
        FileCreatedEvent(f"{INBOX}/{name}"),
        FileClosedEvent(f"{INBOX}/{name}"),
        FileDeletedEvent(f"{INBOX}/{name}"),
    ):
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


@pytest.mark.parametrize(
    "event",
    [
        DirDeletedEvent(INBOX),
        DirCreatedEvent(INBOX),
        DirMovedEvent(INBOX, f"{ROLE_DIR}/old-inbox"),
        DirMovedEvent(f"{ROLE_DIR}/new", INBOX),
        DirDeletedEvent(ROLE_DIR),
        DirCreatedEvent(ROLE_DIR),
    ],
)
def test_the_inbox_or_role_folder_changing_means_a_rescan(event):
    [item] = run(event)
    assert isinstance(item, RescanNeeded) and INBOX in item.reason


@pytest.mark.parametrize(
    "event", [DirCreatedEvent(f"{ROLE_DIR}/archive"), DirDeletedEvent(f"{INBOX}/sub"), DirCreatedEvent(f"{INBOX}/x.md")]
)
def test_other_folders_changing_need_no_rescan(event):
    assert run(event) == []


def test_bytes_paths_and_odd_names():
    assert run(FileClosedEvent(f"{INBOX}/a.md".encode())) == [MemoSeen("builder", Path(f"{INBOX}/a.md"), complete=True)]
    odd = f"{INBOX}/$(rm -rf ~); `x` 'q' \"d\" ü\n.md"
    assert run(FileClosedEvent(odd)) == [MemoSeen("builder", Path(odd), complete=True)]


# --------------------------------------------------------------- the handler
def test_the_handler_turns_an_injected_fault_into_a_rescan():
    posted: list[object] = []
    handler = _Handler("builder", Path(ROLE_DIR), posted.append, classify_event=faulty_classify(classify, "boom"))
    handler.dispatch(FileClosedEvent(f"{INBOX}/x-boom.md"))
    handler.dispatch(FileMovedEvent(f"{INBOX}/.tmp", f"{INBOX}/y-boom.md"))  # the destination counts too
    handler.dispatch(FileClosedEvent(f"{INBOX}/fine.md"))
    assert [type(p) for p in posted] == [RescanNeeded, RescanNeeded, MemoSeen]
    assert "injected fault" in posted[0].reason and "x-boom.md" in posted[0].reason  # type: ignore[attr-defined]
    posted.clear()
    _Handler("builder", Path(ROLE_DIR), posted.append).dispatch(FileClosedEvent(f"{INBOX}/x-boom.md"))
    assert posted == [MemoSeen("builder", Path(f"{INBOX}/x-boom.md"), complete=True)], "no fault unless injected"


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


# ------------------------------------------------------- prompt move pairing
def prompt_queue(hold: float) -> Any:
    """A watchdog ``DelayedQueue`` made prompt the way the watcher does it."""
    queue = DelayedQueue(hold)
    assert _PromptDelayedQueue.adopt(queue) is None
    return queue


class WaitSignal(threading.Condition):
    """A queue's condition, over the queue's own lock, that tells when a reader starts waiting on it."""

    def __init__(self, lock: Any) -> None:
        super().__init__(lock)
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


def watch_waits(queue: Any) -> threading.Event:
    queue._not_empty = WaitSignal(queue._lock)
    return queue._not_empty.waiting


def read_in_thread(queue: Any, count: int = 1) -> list[tuple[Any, float]]:
    """Start a thread that gets ``count`` elements; the list it fills holds each with the time it came out."""
    got: list[tuple[Any, float]] = []

    def read() -> None:
        for _ in range(count):
            got.append((queue.get(), time.monotonic()))

    threading.Thread(target=read, daemon=True).start()
    return got


def pair(queue: Any, moved_from: str, moved_to: str) -> None:
    """What watchdog's move grouper does when the moved-to half of a held moved-from arrives."""
    assert queue.remove(lambda element: element == moved_from) == moved_from
    queue.put((moved_from, moved_to), delay=False)


def test_a_held_moved_from_goes_out_the_moment_its_pair_is_queued():
    queue = prompt_queue(hold=30.0)
    waiting = watch_waits(queue)
    queue.put("from", delay=True)
    got = read_in_thread(queue)
    # the reader now holds the moved-from at the head; watchdog's own get would sleep the whole 30 s here
    assert waiting.wait(timeout=10), "the reader waits on the queue's condition"
    pair(queue, "from", "to")
    wait_for(lambda: got, timeout=10, what="the pair, long before the 30 s hold")
    assert [element for element, _ in got] == [("from", "to")]


def test_an_unpaired_moved_from_is_held_its_whole_delay_then_released():
    hold = 0.3
    queue = prompt_queue(hold)
    waiting = watch_waits(queue)
    before = time.monotonic()
    queue.put("from", delay=True)
    got = read_in_thread(queue)
    assert waiting.wait(timeout=10)
    wait_for(lambda: got, timeout=10, what="the moved-from after its hold")
    [(element, released)] = got
    assert element == "from"
    assert released - before >= hold, "an unpaired moved-from is held its full delay"


def test_the_order_of_events_is_kept():
    queue = prompt_queue(hold=0.2)
    queue.put("a")
    queue.put("from", delay=True)
    queue.put("b")
    got = read_in_thread(queue, count=3)
    wait_for(lambda: len(got) == 3, timeout=10, what="three events")
    assert [element for element, _ in got] == ["a", "from", "b"], "an event waits behind a held moved-from"

    queue = prompt_queue(hold=30.0)
    queue.put("x")
    queue.put("from", delay=True)
    queue.put("y")
    pair(queue, "from", "to")
    got = read_in_thread(queue, count=3)
    wait_for(lambda: len(got) == 3, timeout=10, what="three events, none held")
    assert [element for element, _ in got] == ["x", "y", ("from", "to")]


def test_many_writers_and_one_reader_lose_nothing_and_keep_each_writers_order():
    queue = prompt_queue(hold=0.01)
    writers, each = 4, 300

    def write(writer: int) -> None:
        for n in range(each):
            queue.put((writer, n), delay=n % 7 == 0)

    got = read_in_thread(queue, count=writers * each)
    threads = [threading.Thread(target=write, args=(w,), daemon=True) for w in range(writers)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(got) == writers * each, timeout=20, what="every element read")
    elements = [element for element, _ in got]
    for writer in range(writers):
        assert [n for w, n in elements if w == writer] == list(range(each))
    assert queue.put(("late", 0)) is None and queue.get() == ("late", 0)


def test_closing_wakes_a_waiting_reader_with_none():
    for held in (False, True):
        queue = prompt_queue(hold=30.0)
        waiting = watch_waits(queue)
        if held:
            queue.put("from", delay=True)
        got = read_in_thread(queue)
        assert waiting.wait(timeout=10)
        queue.close()
        wait_for(lambda got=got: got, timeout=10, what="the reader woken by close")
        assert got[0][0] is None


class StampsWallClock(DelayedQueue):  # type: ignore[type-arg]
    """As watchdog 5 and 6 do."""

    def put(self, element: Any, *, delay: bool = False) -> None:
        with self._lock:
            self._queue.append((element, time.time(), delay))
            self._not_empty.notify()


class ConditionOverOwnLock(DelayedQueue):  # type: ignore[type-arg]
    def __init__(self, delay: float) -> None:
        super().__init__(delay)
        self._not_empty = threading.Condition()


class DropsTheDelayFlag(DelayedQueue):  # type: ignore[type-arg]
    def put(self, element: Any, *, delay: bool = False) -> None:
        with self._lock:
            self._queue.append((element, time.monotonic()))


class RenamedDelay(DelayedQueue):  # type: ignore[type-arg]
    def __init__(self, delay: float) -> None:
        super().__init__(delay)
        state = vars(self)
        self.hold = state.pop("delay", None) or state.pop("delay_sec")  # watchdog 7 or 5 and 6


class NoDelayArgument(DelayedQueue):  # type: ignore[type-arg]
    def put(self, element: Any, later: bool = False) -> None:  # type: ignore[override]
        super().put(element, delay=later)


class UnknownClock(DelayedQueue):  # type: ignore[type-arg]
    def put(self, element: Any, *, delay: bool = False) -> None:
        with self._lock:
            self._queue.append((element, 12.0, delay))


def test_the_probe_accepts_this_watchdog_and_finds_the_clock_its_put_uses():
    assert queue_problem() is None, "the watchdog this project pins is one the prompt pairing was checked on"
    layout = _probe_layout(DelayedQueue)
    assert not isinstance(layout, str) and layout.delay_attr in ("delay", "delay_sec")
    layout = _probe_layout(StampsWallClock)
    assert not isinstance(layout, str) and layout.clock is time.time


@pytest.mark.parametrize(
    ("queue_class", "reason"),
    [
        (ConditionOverOwnLock, "condition does not guard its lock"),
        (DropsTheDelayFlag, "no longer queues (element, time, delay)"),
        (RenamedDelay, "delay under an unknown name"),
        (NoDelayArgument, "takes no delay argument"),
        (UnknownClock, "unknown clock"),
    ],
)
def test_the_probe_refuses_a_queue_that_behaves_otherwise(queue_class, reason):
    problem = _probe_layout(queue_class)
    assert isinstance(problem, str) and reason in problem


def test_only_watchdogs_own_queue_is_adopted():
    for other in (StampsWallClock(0.5), object(), None):
        problem = _PromptDelayedQueue.adopt(other)
        assert problem and "where watchdog's DelayedQueue was expected" in problem
        assert type(other) is not _PromptDelayedQueue


# ------------------------------------------------------------- InboxWatcher
def test_the_watcher_reports_a_removed_or_replaced_folder_and_recovers_on_restart(tmp_path):
    role_dir = tmp_path / "memo" / "builder"
    posted: list[object] = []
    watcher = InboxWatcher({"builder": role_dir}, posted.append)
    watcher.start()
    try:
        assert watcher.healthy() is None
        (role_dir / "inbox" / "a.md").write_text("hello", encoding="utf-8")
        wait_for(
            lambda: MemoSeen("builder", role_dir / "inbox" / "a.md", complete=True) in posted,
            timeout=10,
            what="the close event",
        )

        shutil.rmtree(role_dir / "inbox")
        assert watcher.healthy() == f"folder {role_dir / 'inbox'} was removed"
        wait_for(lambda: any(isinstance(p, RescanNeeded) for p in posted), timeout=10, what="a rescan asked for")

        shutil.rmtree(role_dir)
        assert watcher.healthy() == f"folder {role_dir} was removed"
        (role_dir / "inbox").mkdir(parents=True)  # the same inode number may come back: the watch is still gone
        wait_for(
            lambda: (
                watcher.healthy()
                in (f"folder {role_dir} was replaced", f"the watch on {role_dir} ended (its folder was removed)")
            ),
            timeout=10,
            what="the lost watch noticed",
        )

        watcher.restart()
        assert watcher.healthy() is None
        assert (role_dir / "inbox").is_dir(), "a restart makes the inbox again"
        posted.clear()
        (role_dir / "inbox" / "b.md").write_text("hello", encoding="utf-8")
        wait_for(
            lambda: MemoSeen("builder", role_dir / "inbox" / "b.md", complete=True) in posted,
            timeout=10,
            what="events from the new folder",
        )
    finally:
        watcher.stop()
    assert watcher.healthy() == "the file watcher thread stopped"


def test_the_prompt_queue_goes_into_the_watchers_own_observer_only(tmp_path):
    role_dir = tmp_path / "memo" / "builder"
    posted: list[object] = []
    watcher = InboxWatcher({"builder": role_dir}, posted.append)
    watcher.start()
    other = Observer()
    other.schedule(FileSystemEventHandler(), str(tmp_path))
    other.start()
    try:
        assert watcher.patch_problem is None
        [emitter] = watcher.observer.emitters
        assert type(_move_queue(emitter)) is _PromptDelayedQueue
        [other_emitter] = other.emitters
        assert type(_move_queue(other_emitter)) is DelayedQueue, "an observer made later is left alone"
        (role_dir / "inbox" / ".a.md.tmp").write_text("hello", encoding="utf-8")
        os.rename(role_dir / "inbox" / ".a.md.tmp", role_dir / "inbox" / "a.md")
        wait_for(
            lambda: MemoSeen("builder", role_dir / "inbox" / "a.md", complete=True) in posted,
            timeout=10,
            what="the renamed memo",
        )
    finally:
        other.stop()
        other.join(timeout=5)
        watcher.stop()


def test_a_refused_patch_is_one_line_and_moves_still_arrive(tmp_path):
    role_dir = tmp_path / "memo" / "builder"
    (role_dir / "active").mkdir(parents=True)
    posted: list[object] = []
    watcher = InboxWatcher({"builder": role_dir}, posted.append, queue_check=lambda: "refused by\nthe test")
    watcher.start()
    try:
        problem = watcher.patch_problem
        assert problem and "refused by the test" in problem and "\n" not in problem
        assert problem.startswith("watcher: ") and "up to 0.5 s late" in problem
        [emitter] = watcher.observer.emitters
        assert type(_move_queue(emitter)) is DelayedQueue, "watchdog's own pairing"
        inbox = role_dir / "inbox"
        (inbox / ".a.md.tmp").write_text("hello", encoding="utf-8")
        os.rename(inbox / ".a.md.tmp", inbox / "a.md")
        wait_for(
            lambda: MemoSeen("builder", inbox / "a.md", complete=True) in posted,
            timeout=10,
            what="a memo renamed into the inbox",
        )
        os.rename(inbox / "a.md", role_dir / "active" / "a.md")
        wait_for(lambda: MemoGone("builder", inbox / "a.md") in posted, timeout=10, what="the claim's move")
        watcher.restart()
        assert watcher.patch_problem == problem, "asked again on every start"
    finally:
        watcher.stop()


@pytest.mark.parametrize("refused", [False, True])
def test_up_says_once_at_start_up_when_the_prompt_pairing_is_refused(project, refused):
    project.configure({"builder": {}})
    faults = {"FAULT_REFUSE_PROMPT_PAIRING": "refused by the test"} if refused else {}
    orch = project.up(ORCHESTRATOR_WATCHER="watchdog", **fault_injection(**faults))
    orch.wait_output("orchestrator up:")
    project.drop("builder", "P-1.md", {"id": "P-1"})
    wait_for(lambda: project.folder("builder", "archive") == ["P-1.md"], what="P-1 archived")
    assert orch.stop() == 0
    warned = orch.output.count("watcher: renames are paired at watchdog's own pace")
    assert warned == (1 if refused else 0)
    assert ("refused by the test" in orch.output) == refused
    assert "Traceback" not in orch.output
