"""A run's end in its role's handoff: written at once, made durable and kept as a version once a turn of the loop.

Each run's end changes its role's handoff (the note of a run that died, or its removal after a success that saw
it) and keeps the version it left. Runs that end together (a ``cancel --role`` of 300) each used to write the file
with an fsync and keep a version copy with another, one after another on the loop: 300 ends were 600 fsyncs. Now
each end still replaces the file whole before its memos move (the note is there for whoever sees the memo land,
and a crash of the orchestrator loses none), but without an fsync; at the end of the loop's turn
(``core.turn.at_turn_end``) each role's file gets its one fsync and the text the turn left is kept as one version,
under the number of the run that ended last in it.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.config import Config, RoleRun
from orchestrator.console import Console
from orchestrator.continuity import handoff as ho
from orchestrator.core.turn import at_turn_end
from orchestrator.intake.memo import sync_file


@dataclass
class Pending:
    """What a role's ends of this turn left: the text, the run that ended last, the file written (None: not)."""

    text: str
    run: RoleRun
    written: ho.Handoff | None = None


class HandoffWrites:
    """The handoff writes of the loop's current turn, by role; ``kept(run, text)`` is called after each role's."""

    def __init__(self, config: Config, console: Console, kept: Callable[[RoleRun, str], None]) -> None:
        self.config = config
        self.console = console
        self.kept = kept
        self.pending: dict[str, Pending] = {}
        self.due = False  # a flush is asked for at the end of this turn

    def end(self, run: RoleRun, handoff: ho.Handoff, text: str) -> None:
        """The run's end leaves the role's (usable) handoff ``handoff`` as ``text``: written now when it changed."""
        role = run.role.name
        written = text != handoff.text
        if written:
            try:
                ho.write_handoff(handoff, text, sync=False)
            except OSError as exc:  # the file is as it was: the next end that writes keeps its version
                self.console.line(f"handoff: cannot update memo/{role}/{ho.HANDOFF}: {exc}", role=role)
                return
        pending = self.pending.setdefault(role, Pending(text, run))
        pending.text, pending.run = text, run
        if written:
            pending.written = handoff
        if not self.due:
            self.due = True
            at_turn_end(self.flush)

    def flush(self) -> None:
        """For each role this turn touched: one fsync of its handoff and one version (at the turn's end, and when
        the loop ends)."""
        self.due = False
        while self.pending:
            role, pending = self.pending.popitem()
            run, text = pending.run, pending.text
            try:
                if pending.written is not None:
                    sync_file(pending.written.path)
                if run.seq is not None and ho.snapshot(self.config, role, run.seq, text):
                    self.console.line(f"handoff: kept version {run.seq}", role=role)
                self.kept(run, text)
            except OSError as exc:
                self.console.line(f"handoff: cannot update memo/{role}/{ho.HANDOFF}: {exc}", role=role)
            except Exception:  # noqa: BLE001 - outside any event's handling: the bug is loud, the other roles go on
                self.console.error(f"internal error keeping the handoff of {role}:\n{traceback.format_exc()}")
