"""The failure rules: retry or give up, and the crash loop of a critical role. Pure, so unit-tested alone."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from orchestrator.config import Role


class Next(Enum):
    """What follows an attempt that did not succeed."""

    RETRY = "retry"
    GIVE_UP = "give_up"
    RETURN = "return"


@dataclass(frozen=True)
class Decision:
    next: Next
    delay: float = 0.0


def after_failure(role: Role, attempt: int, *, ending: bool, retry: bool = True, timed_out: bool = False) -> Decision:
    """Attempt ``attempt`` (1-based) failed: retry after the backoff, give up, or return the memo (ending)."""
    if ending:
        return Decision(Next.RETURN)
    allowed = retry and (role.retry_timeouts or not timed_out)
    if allowed and attempt - 1 < role.retry.max:
        return Decision(Next.RETRY, role.retry.delay(attempt))
    return Decision(Next.GIVE_UP)


class CrashCounter:
    """Failures of critical roles in a row, each within ``crash.window`` of its start."""

    def __init__(self, roles: dict[str, Role]) -> None:
        self.roles = roles
        self.counts: dict[str, int] = {name: 0 for name, role in roles.items() if role.critical}

    def note(self, role: str, ran: float, failed: bool) -> bool:
        """Count one ended attempt; True when the role reached its crash-loop limit."""
        spec = self.roles[role]
        if not spec.critical:
            return False
        self.counts[role] = self.counts[role] + 1 if failed and ran <= spec.crash.window else 0
        return self.counts[role] >= spec.crash.max
