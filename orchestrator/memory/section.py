"""``$memory`` in the prompt: filled for the memory curator (``curator``), loading the role's memory in its fixed order.

A memory database that cannot be read (corrupt, or locked for longer than
``LOOP_WAIT``) never stops a run nor stalls the loop: the agent starts with
``$memory`` holding one line that says memory is unavailable and why.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from orchestrator.config import Config
from orchestrator.core.calendar import TEAM
from orchestrator.core.clock import Clock
from orchestrator.core.errors import MemoryUnavailableError
from orchestrator.memory import rules
from orchestrator.memory.db import MemoryDB
from orchestrator.memory.db.schema import db_path

NO_MEMORY = ""  # nothing remembered yet: the placeholder stays empty
LOOP_WAIT = 0.5  # inside the supervisor's loop a locked database is waited for this long at most, then passed over


def render_for(db: MemoryDB, role: str, today: date, lines: int, size: int) -> str:
    """The text of ``$memory`` for ``role``: its and team's entries, within the budget."""
    loaded = db.prompt_groups([role, TEAM], today, most=lines)
    groups = [rules.Group(title, entries, unread) for title, entries, unread in loaded]
    return rules.render_memory(groups, lines, size) or NO_MEMORY


class MemorySection:
    """Fills ``$memory`` for each run from ``.orchestrator/memory.db``."""

    def __init__(self, config: Config, clock: Clock, log: Any) -> None:
        self.config = config
        self.clock = clock
        self.log = log
        self.path = db_path(config.state_dir)
        self._db: MemoryDB | None = None

    def __call__(self, run: Any) -> dict[str, str]:
        if not self.path.exists():
            return {"memory": NO_MEMORY}
        budget = self.config.memory.prompt_budget
        zone = self.config.memory.zone()
        today = self.clock.now().astimezone(zone).date()
        try:
            if self._db is None:
                self._db = MemoryDB(self.path, create=False, timeout=LOOP_WAIT)
            return {"memory": render_for(self._db, run.role.name, today, budget.lines, budget.bytes)}
        except MemoryUnavailableError as exc:
            self.close()
            self.log(f"{exc}; run {run.run_id} starts with $memory empty")
            return {"memory": f"(memory unavailable: {exc}; run `orchestrator memory stats` to check)"}

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
