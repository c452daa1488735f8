"""The memo index completed at each start of ``up``, off the loop: what ``trace`` and ``send`` read.

A store from before the index (or one a person moved memos behind the orchestrator's back in) lacks rows. At
start-up a worker thread lists the folders against the index and reads the front matter of each memo it lacks
(``memo_index.missing``); the rows come back to the loop as events, a chunk at a time, and the loop, the one
writer, adds them (``add_found``), drops the rows of memos that are gone (``drop_gone``) and marks the index
complete. Work goes on meanwhile: a claim or a move indexes its memo as always, and until the mark ``trace``
reads every folder. A new project's index is complete at its first start (there is nothing to read).
"""

from __future__ import annotations

import sqlite3
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.core.clock import iso
from orchestrator.intake import memo_index
from orchestrator.store import Store
from orchestrator.supervisor.extension import Extension, Handler, Host

CHUNK = 500  # rows an event: the loop adds them in about a millisecond


@dataclass(frozen=True)
class IndexFound:
    """Rows of memos the index lacks, read by the worker thread."""

    rows: list[memo_index.Found] = field(compare=False)


@dataclass(frozen=True)
class IndexScanned:
    """The worker thread is done: rows whose memo is gone, how long it took, or why it stopped."""

    gone: list[tuple[str, str, str]] = field(compare=False)
    seconds: float = 0.0
    problem: str | None = None


class IndexBuild(Extension):
    """Completes the memo index once, at start-up, on a thread of its own."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.added = 0
        self.done = False

    def handlers(self) -> Mapping[type, Handler]:
        return {IndexFound: self._found, IndexScanned: self._scanned}

    def start(self) -> None:
        self.thread = threading.Thread(target=self._scan, name="memo-index", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()

    def _scan(self) -> None:
        """On the worker thread: the index's keys (its own read-only connection), the folders, the front matter."""
        started = time.monotonic()
        events: list[object] = []
        try:
            config = self.host.config
            store = Store(config.state_dir / "state.db", readonly=True)
            try:
                known = memo_index.keys(store.db)
            finally:
                store.close()
            missing = memo_index.missing(config.root, known, self.stopping.is_set)
            events += [IndexFound(missing.found[at : at + CHUNK]) for at in range(0, len(missing.found), CHUNK)]
            stopped = "stopped: the orchestrator is ending" if self.stopping.is_set() else None
            events.append(IndexScanned(missing.gone, time.monotonic() - started, stopped))
        except (sqlite3.Error, OSError) as exc:
            events = [IndexScanned([], problem=f"{type(exc).__name__}: {exc}")]
        except Exception as exc:  # noqa: BLE001 - a bug: loud in the log; trace scans without the index meanwhile
            events = [
                IndexScanned([], problem=f"internal error: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            ]
        for event in events:
            if self.stopping.is_set():
                return  # the loop is ending: nothing more for it (the next start completes the index)
            try:
                self.host.post(event)
            except RuntimeError:  # the loop closed meanwhile
                return

    def _found(self, event: IndexFound) -> None:
        if not self.stopping.is_set():  # after ``stop`` the store may be closing
            self.added += memo_index.add_found(self.host.store.db, self.host.config.root, event.rows)

    def _scanned(self, event: IndexScanned) -> None:
        if self.stopping.is_set():
            return
        if event.problem is not None:
            say = self.host.console.error if event.problem.startswith("internal error") else self.host.console.line
            say(f"memo index: not completed ({event.problem}); `trace` scans until the next start of `up` completes it")
            return
        db = self.host.store.db
        dropped = memo_index.drop_gone(db, self.host.config.root, event.gone)
        memo_index.mark_complete(db, iso(self.host.clock.now()))
        self.done = True
        if self.added or dropped:
            self.host.console.line(
                f"memo index: {self.added} memo(s) indexed, {dropped} row(s) of memos no longer there dropped, "
                f"in {event.seconds:.1f} s; `trace` and `send` read it"
            )
