"""What the scenarios share: how much work each does (``Sizes``), what one returns (``Outcome`` of
``Row``s), what it is given (``Context``), and the few steps several take (paced drops, waiting for a drain,
checking each memo ran once).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import (
    Orchestrator,
    Project,
    Record,
    count_lines,
    count_memos,
    drop_atomically,
    kill_leftovers,
    memo_text,
    wait_for,
)


@dataclass(frozen=True)
class Sizes:
    """How much work each scenario does; ``FULL`` is what the targets are stated for."""

    latency_memos: int
    latency_pace: float
    latency_outside: int
    warmup: int
    throughput_memos: int
    throughput_repeats: int
    concurrency: int
    startup_memos: int
    startup_roles: int
    startup_repeats: int
    cancel_term: int
    cancel_ignore: int
    grace: float
    memory_checkpoints: tuple[int, int]
    memory_batch: int
    idle_window: float
    idle_roles: int
    cli_samples: int
    drain_memos: int = 300
    drain_work: float = 2.0
    crash_memos: int = 300
    crash_kills: int = 5
    crash_sleep: float = 0.3
    sdk_crash_memos: int = 24
    sdk_crash_kills: int = 5
    sdk_crash_concurrency: int = 4
    big_end_mb: float = 50.0
    big_end_quiet: float = 3.0  # seconds of memos before the big run, for the figure with no big end


FULL = Sizes(
    latency_memos=500,
    latency_pace=0.02,
    latency_outside=50,
    warmup=5,
    throughput_memos=2000,
    throughput_repeats=3,
    concurrency=10,
    startup_memos=10_000,
    startup_roles=10,
    startup_repeats=5,
    cancel_term=20,
    cancel_ignore=5,
    grace=1.0,
    cli_samples=10,
    memory_checkpoints=(1000, 10_000),
    memory_batch=1000,
    idle_window=60.0,
    idle_roles=10,
)
SMOKE = Sizes(
    latency_memos=8,
    latency_pace=0.02,
    latency_outside=2,
    warmup=1,
    throughput_memos=20,
    throughput_repeats=1,
    concurrency=10,
    startup_memos=40,
    startup_roles=4,
    startup_repeats=1,
    cancel_term=2,
    cancel_ignore=1,
    grace=0.3,
    cli_samples=2,
    memory_checkpoints=(10, 20),
    memory_batch=10,
    idle_window=2.0,
    idle_roles=10,
    drain_memos=20,
    drain_work=0.2,
    crash_memos=20,
    crash_kills=2,
    crash_sleep=0.05,
    sdk_crash_memos=3,
    sdk_crash_kills=1,
    big_end_mb=2.0,
    big_end_quiet=0.5,
)


@dataclass
class Row:
    """One line of the summary table."""

    scenario: str
    figure: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    target: str = ""
    ok: bool | None = None
    digits: int = 1
    paired_ratio: float | None = None  # the median of per-pair ratios, when runs were paired with baselines
    missing: str = ""  # what the baseline needed and did not find (it could not be measured)

    @property
    def ratio(self) -> float | None:
        if self.paired_ratio is not None:
            return self.paired_ratio
        if self.baseline is None or self.baseline <= 0:
            return None
        return self.value / self.baseline

    @property
    def met(self) -> bool | None:
        """Whether the target is met; a ratio target whose baseline could not be measured is not."""
        if self.ok is None:
            return None
        if "ratio" in self.target and self.ratio is None:
            return False
        return self.ok


@dataclass
class Outcome:
    name: str
    rows: list[Row] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Context:
    agent: Path
    scratch: Path
    sizes: Sizes
    say: Callable[[str], None]
    projects: list[Project] = field(default_factory=list)

    def project(self, name: str) -> Project:
        proj = Project(self.scratch / name, self.agent)
        self.projects.append(proj)
        return proj


def check_once(records: list[Record], expected: set[str], what: str) -> list[str]:
    """Exactly once: every memo started one agent. Problems as lines (a real bug, worth reporting, not a crash)."""
    counts = Counter(r.name for r in records if r.name in expected)
    missing = sorted(expected - counts.keys())
    doubled = sorted(n for n, c in counts.items() if c > 1)
    out = []
    if missing:
        out.append(f"{what}: {len(missing)} memo(s) never started an agent, e.g. {missing[:3]}")
    if doubled:
        out.append(f"{what}: {len(doubled)} memo(s) started more than one agent, e.g. {doubled[:3]}")
    return out


def wait_drained(
    project: Project, roles: list[str], started: int, orch: Orchestrator | None, timeout: float, interval: float = 0.005
) -> int:
    """Wait until ``started`` agents have recorded a start and every inbox and active/ folder is empty.

    Cheap to poll (the small folders only), so the poller does not steal CPU from the orchestrator.
    Returns the time (ns) at which the work was seen done.
    """

    def all_started() -> bool:
        if orch is not None:
            orch.check_alive()
        return count_lines(project.record) >= started

    wait_for(all_started, timeout, f"{started} agent starts", interval=0.02)

    def drained() -> bool:
        if orch is not None:
            orch.check_alive()
        return all(
            count_memos(project.folder(r, "active")) == 0 and count_memos(project.folder(r, "inbox")) == 0
            for r in roles
        )

    wait_for(drained, timeout, "every memo archived", interval=interval)
    return time.time_ns()


def paced_drops(
    inbox: Path, names: list[str], pace: float, check: Callable[[], None], staging: Path | None = None
) -> dict[str, int]:
    """Rename one memo into the inbox every ``pace`` seconds on a fixed schedule; name -> rename time (ns)."""
    renamed = {}
    start = time.monotonic()
    for i, name in enumerate(names):
        delay = start + i * pace - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        renamed[name] = drop_atomically(inbox, name, memo_text(i, "r0"), staging)
        if i % 50 == 0:
            check()
    return renamed


def latencies(records: list[Record], renamed: dict[str, int], measured: set[str]) -> list[float]:
    first: dict[str, int] = {}
    for rec in records:
        if rec.name in measured and rec.name not in first:
            first[rec.name] = rec.ns
    return [(ns - renamed[name]) / 1e6 for name, ns in first.items()]


def cleanup(ctx: Context) -> None:
    """No agent of this benchmark outlives it."""
    for project in ctx.projects:
        kill_leftovers(project.record)
    kill_leftovers(ctx.scratch / "cancel-baseline.txt")
