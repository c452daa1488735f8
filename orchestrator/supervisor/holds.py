"""Holds: reasons a role may not start new work now (a failing preflight, a missing context file, ...).

Any module may hold a role under a name of its own (``source``) and release it
later; a held role's memos wait in the inbox, and ``status`` shows why. Each
change is one log line, so a hold that lasts a thousand ticks says so once.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.console import Console


class Holds:
    """The holds in force, per role and source."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.current: dict[str, dict[str, str]] = {}
        # called before each scheduling pass, so a hold follows a condition (a context file gone, back again)
        self.checks: list[Callable[[], None]] = []

    def hold(self, role: str, source: str, reason: str, *, quiet: bool = False) -> bool:
        """Hold ``role`` for ``source``; True when this is new (or a new reason), so callers can tell people once.

        ``quiet``: no log line, for a hold of milliseconds that is no news (a check under way)."""
        held = self.current.setdefault(role, {})
        if held.get(source) == reason:
            return False
        held[source] = reason
        if not quiet:
            self.console.line(f"held: {reason}; its memos wait in the inbox", role=role)
        return True

    def release(self, role: str, source: str, *, quiet: bool = False) -> bool:
        """Lift ``source``'s hold of ``role``; True when there was one (``quiet``: no log line)."""
        held = self.current.get(role, {})
        if source not in held:
            return False
        del held[source]
        if not held:
            del self.current[role]
        if not quiet:
            self.console.line(f"released ({source}): new work may start again", role=role)
        return True

    def held_roles(self) -> list[str]:
        """The roles that start no new work now, after every check has had its say."""
        for check in self.checks:
            check()
        return list(self.current)

    def snapshot(self) -> dict[str, dict[str, str]]:
        return {role: dict(sources) for role, sources in self.current.items()}
