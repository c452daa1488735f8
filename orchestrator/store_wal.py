"""The database's write-ahead log copied back into it on a thread of its own, not at the loop's commits.

SQLite checkpoints a WAL database at the commit that takes the log past 1,000 pages: it copies
the pages back and syncs both files, on the thread that committed. In a drain of 2,000 memos
that was about a hundred ``fdatasync`` calls on the loop's thread. The loop's connection has
automatic checkpoints off; this thread runs a PASSIVE checkpoint (which never waits for a reader
or a writer) after every ``COMMITS`` commits, and SQLite's own last one runs when the store closes.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path

COMMITS = 100  # about 500 pages of the log at the loop's few pages a commit: half of SQLite's own 1,000


class WalCheckpointer:
    """A thread that checkpoints the database at ``path`` each time it is poked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._wake = threading.Event()
        self._stopping = False
        self.rounds = 0  # checkpoints tried so far: a test waits for one to be over, not only begun
        self._thread = threading.Thread(target=self._run, name="wal-checkpoint", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def poke(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(5)

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self.path, timeout=5, isolation_level=None)
        except sqlite3.Error:
            return  # the store sees the thread gone and checkpoints as SQLite does by default
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                with contextlib.suppress(sqlite3.Error):  # busy or locked: the next poke tries again
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                self.rounds += 1
        finally:
            db.close()
