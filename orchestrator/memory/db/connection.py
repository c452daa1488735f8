"""Opening the memory database (private file modes, WAL, the schema brought up to date) and the one place
that turns every SQLite failure (corrupt, locked, unreadable) into ``MemoryUnavailableError``; each read or
write of the other parts is one short transaction through ``_read`` or ``_write``."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from orchestrator.core.errors import MemoryUnavailableError
from orchestrator.memory.db import schema

BUSY_TIMEOUT = 10.0  # the CLI waits this long for another writer (ORCHESTRATOR_MEMORY_WAIT overrides it)
WAIT_ENV = "ORCHESTRATOR_MEMORY_WAIT"
MMAP_BYTES = 256 * 1024 * 1024


def wait_seconds() -> float:
    """How long a CLI call waits for another writer: ``ORCHESTRATOR_MEMORY_WAIT`` seconds, else ``BUSY_TIMEOUT``."""
    try:
        return max(0.0, float(os.environ.get(WAIT_ENV, BUSY_TIMEOUT)))
    except ValueError:
        return BUSY_TIMEOUT


class Connection:
    """One connection to the memory database.

    ``timeout`` is how long a statement waits for another writer's lock (the
    supervisor passes a fraction of a second, so a locked database never stalls its loop).
    """

    def __init__(self, path: Path, *, create: bool = True, timeout: float | None = None) -> None:
        self.path = path
        self.timeout = wait_seconds() if timeout is None else timeout
        with self._guard("open"):
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
                os.chmod(path.parent, 0o700)
                if not path.exists():
                    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            elif not path.exists():
                raise MemoryUnavailableError(f"memory: no memory database at {path} yet (nothing was added)")
            self.conn = sqlite3.connect(path, timeout=self.timeout, isolation_level=None)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
            self._prepare()
            for suffix in ("-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.chmod(str(path) + suffix, 0o600)

    def _prepare(self) -> None:
        # a database of this schema needs nothing but its per-connection setting; a new or older one gets WAL,
        # the schema and its indexes filled
        self.conn.execute("PRAGMA synchronous=NORMAL")
        (version,) = self.conn.execute("PRAGMA user_version").fetchone()
        if version == schema.SCHEMA_VERSION:
            return
        schema.refuse_newer(version, self.path)
        schema.create(self.conn, self.timeout)
        with self._write("upgrade") as conn:
            schema.migrate(conn)

    def close(self) -> None:
        """Close the connection; closing twice, or one that never opened, is no error."""
        with contextlib.suppress(sqlite3.Error, AttributeError):
            self.conn.close()

    @contextlib.contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            what = "is locked by another writer" if "locked" in str(exc) or "busy" in str(exc) else f"failed: {exc}"
            raise MemoryUnavailableError(f"memory: {doing}: the database {self.path} {what}; try again") from None
        except sqlite3.DatabaseError as exc:
            raise MemoryUnavailableError(
                f"memory: {doing}: the database {self.path} is unreadable ({exc}); move it aside to start afresh"
            ) from None
        except OSError as exc:
            raise MemoryUnavailableError(f"memory: {doing}: cannot open {self.path}: {exc.strerror or exc}") from None

    @contextlib.contextmanager
    def _write(self, doing: str) -> Iterator[sqlite3.Connection]:
        with self._guard(doing):
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    @contextlib.contextmanager
    def _read(self, doing: str) -> Iterator[sqlite3.Connection]:
        with self._guard(doing):
            yield self.conn
