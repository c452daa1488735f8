"""What one check of ``orchestrator doctor`` found: a ``Finding``, printed as one line or as JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Finding:
    """One check's verdict. ``role`` is None for a team-wide check; ``fix`` says what to do (empty when ok)."""

    check: str
    status: Status
    detail: str
    fix: str = ""
    role: str | None = None

    @property
    def subject(self) -> str:
        return f"{self.role}: {self.check}" if self.role else self.check

    @property
    def text(self) -> str:
        """The finding without its status: ``subject: detail; fix``, the line ``up`` refuses with."""
        return f"{self.subject}: {self.detail}" + (f"; {self.fix}" if self.fix else "")

    @property
    def line(self) -> str:
        """``ok``/``warn``/``fail``, then the finding: what ``orchestrator doctor`` prints for it."""
        return f"{self.status:<4} {self.text}"

    def __post_init__(self) -> None:
        for name in ("detail", "fix"):  # one line each, whatever a program or a database answered
            lines = [line.strip() for line in getattr(self, name).splitlines()]
            object.__setattr__(self, name, " ".join(line for line in lines if line))

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "role": self.role,
            "status": self.status,
            "detail": self.detail,
            "fix": self.fix or None,
        }


def ok(check: str, detail: str, role: str | None = None) -> Finding:
    return Finding(check, "ok", detail, role=role)


def warn(check: str, detail: str, fix: str, role: str | None = None) -> Finding:
    return Finding(check, "warn", detail, fix, role)


def fail(check: str, detail: str, fix: str, role: str | None = None) -> Finding:
    return Finding(check, "fail", detail, fix, role)


def from_message(check: str, message: str, fix: str, role: str | None = None) -> Finding:
    """A failure from a start-up check's one-line error (``where: what; what to do``), split at its first ``; ``;
    ``fix`` when the message says no remedy."""
    detail, _, said = message.partition("; ")
    return Finding(check, "fail", detail, said or fix, role)


def summary(findings: list[Finding]) -> str:
    """The last line of ``orchestrator doctor``: how many of each."""
    counts = {status: sum(1 for f in findings if f.status == status) for status in ("ok", "warn", "fail")}
    verdict = "nothing fails" if not counts["fail"] else "fix what fails, then run it again"
    return f"doctor: {counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail: {verdict}"


def exit_status(findings: list[Finding]) -> int:
    """0 when nothing fails, 1 otherwise."""
    return 1 if any(f.status == "fail" for f in findings) else 0
