"""The orchestrator's log file, ``.orchestrator/orchestrator.log``: appended to, rotated at ``LOG_MAX_BYTES``
keeping ``LOG_BACKUPS`` older files."""

from __future__ import annotations

import contextlib
import os

from orchestrator.core.turn import at_turn_end

TYPE_CHECKING = False  # typing's flag without importing typing: see tests/test_client_imports.py
if TYPE_CHECKING:
    from pathlib import Path
    from typing import TextIO

LOG_MAX_BYTES = 10 * 1024 * 1024
LOG_BACKUPS = 5


class RotatingLog:
    """The orchestrator's log file: appended to, rotated at ``maxBytes`` into ``path.1`` ... ``path.<backupCount>``.

    A plain buffered file and a byte count (the standard ``RotatingFileHandler`` costs about 100 us a
    line, a third of the CPU the loop spends on a memo). Inside the running loop the lines of one turn of
    the loop go out in one write at its end; elsewhere each line at once. A line that cannot be written is
    dropped without a traceback: a full disk must not stop the work.
    """

    def __init__(self, path: Path, max_bytes: int = LOG_MAX_BYTES, backups: int = LOG_BACKUPS) -> None:
        self.path = path
        self.maxBytes = max_bytes  # the names of logging.handlers.RotatingFileHandler
        self.backupCount = backups
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO | None = None
        self._size = 0
        self._flush_due = False
        self._open()

    def _open(self) -> None:
        try:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open, flushed by write
            self._size = self._file.tell()
        except OSError:
            self._file = None

    def write(self, line: str) -> None:
        """Append one line, rotating first when it would pass the size."""
        data = line + "\n"
        size = len(data.encode("utf-8", "replace"))
        if self._file is None:
            return
        if self._size and self._size + size > self.maxBytes:
            self._rotate()
            if self._file is None:
                return
        try:
            self._file.write(data)
            self._size += size
        except (OSError, ValueError):
            return
        if self._flush_due:
            return
        self._flush_due = at_turn_end(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        if self._file is not None:
            with contextlib.suppress(OSError, ValueError):
                self._file.flush()

    def _rotate(self) -> None:
        self.close()
        with contextlib.suppress(OSError):
            for number in range(self.backupCount - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{number}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{self.path.name}.{number + 1}"))
            if self.backupCount > 0:
                os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
            else:
                self.path.unlink()
        self._open()

    def flush(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError, ValueError):
                self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError, ValueError):
                self._file.close()
            self._file = None


def open_log(path: Path, max_bytes: int = LOG_MAX_BYTES, backups: int = LOG_BACKUPS) -> RotatingLog:
    """The orchestrator's rotating log file at ``path``."""
    return RotatingLog(path, max_bytes, backups)
