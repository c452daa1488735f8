"""big-end: a Claude-shaped run writes 50 MB of stream-json and exits while another role receives 20 memos a second.

The figure is the worst rename -> agent start latency of those memos from the big run's memo drop until a second
after it is archived, beside the same memos in the seconds before, with no big end, in the same orchestrator. The
disk the big run leaves (its log and its transcript) is reported too.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import Context, Outcome, Row, check_once, latencies, wait_drained
from bench.harness import (
    REPO,
    BenchError,
    Orchestrator,
    Stats,
    count_memos,
    drop_atomically,
    memo_name,
    memo_text,
)

BIG_STREAM = REPO / "tests" / "agents" / "big_stream.py"
PACE = 0.05  # 20 memos a second for the other role
AFTER = 1.0  # seconds of memos after the big run is archived
TARGET_MS = 100.0


def big_end(ctx: Context) -> Outcome:
    out = Outcome("big-end")
    megabytes = ctx.sizes.big_end_mb
    project = ctx.project("big-end")
    claude = project.root / "bin" / "claude"  # named claude, with stream-json: read as Claude's output
    claude.parent.mkdir(parents=True)
    claude.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{BIG_STREAM}" "$@"\n', encoding="utf-8")
    claude.chmod(0o755)
    big = [str(claude), "-p", "--output-format", "stream-json", "--mb", f"{megabytes:g}"]
    project.configure({"r0": {}, "big": {"command": big}})
    orch = Orchestrator(project).start()
    orch.wait_ready()
    inbox, archive = project.folder("r0", "inbox"), project.folder("big", "archive")
    ctx.say(f"big-end: 20 memos a second for {ctx.sizes.big_end_quiet:g}s, then the same around a {megabytes:g} MB end")
    quiet = _paced(inbox, 0, lambda at: at >= ctx.sizes.big_end_quiet, orch)
    drop_atomically(project.folder("big", "inbox"), "big.md", "---\nid: BIG\n---\nread it all\n")
    done: list[float] = []

    def over(at: float) -> bool:
        if not done and count_memos(archive):
            done.append(at)
        return bool(done) and at >= done[0] + AFTER

    around = _paced(inbox, len(quiet), over, orch, timeout=120 + megabytes)
    wait_drained(project, ["r0", "big"], len(quiet) + len(around), orch, timeout=60)
    orch.stop()
    records = project.records()
    out.notes += check_once(records, set(quiet) | set(around), "orchestrator")
    base = Stats.of(latencies(records, quiet | around, set(quiet)))
    st = Stats.of(latencies(records, quiet | around, set(around)))
    left = _left(project.root)
    out.details.append(f"memos with no big end (ms): {base.line('ms', 2)}")
    out.details.append(f"memos around the {megabytes:g} MB end (ms): {st.line('ms', 2)}")
    out.details.append(
        f"one role's agent (a stand-in named claude, with --output-format stream-json) writes {megabytes:g} MB of "
        "stream-json events ending with a result and exits; another role's memos are renamed into its inbox 20 a "
        f"second, from {ctx.sizes.big_end_quiet:g}s before the big memo until {AFTER:g}s after it is archived. "
        f"Disk left by the big run: {left:.1f} MB (its log and its transcript)."
    )
    worst = f"memo latency around a {megabytes:g} MB stream-json end, worst"
    target = f"<= {TARGET_MS:g} ms"
    out.rows.append(Row("big-end", worst, st.high, "ms", base.high, "no big end", target, st.high <= TARGET_MS, 1))
    out.rows.append(Row("big-end", "memo latency around it, p50", st.p50, "ms", base.p50, "no big end", "", None, 2))
    out.rows.append(Row("big-end", "disk left by the big run (log + transcript)", left, "MB", digits=1))
    return out


def _paced(
    inbox: Path, first: int, stop: Callable[[float], bool], orch: Orchestrator, timeout: float = 60.0
) -> dict[str, int]:
    """Memos renamed into ``inbox`` every ``PACE`` s on a fixed schedule until ``stop(seconds since the first)``;
    name -> rename time (ns)."""
    renamed: dict[str, int] = {}
    start = time.monotonic()
    i = 0
    while not stop(time.monotonic() - start):
        if time.monotonic() - start > timeout:
            raise BenchError(f"the big run did not end within {timeout:g}s")
        delay = start + i * PACE - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        name = memo_name(first + i)
        renamed[name] = drop_atomically(inbox, name, memo_text(first + i, "r0"))
        i += 1
        if i % 20 == 0:
            orch.check_alive()
    return renamed


def _left(root: Path) -> float:
    """Megabytes of the big run's log and transcript."""
    state = root / ".orchestrator"
    files = [*state.glob("logs/*-big.log"), *state.glob("runs/*/transcript.jsonl")]
    return sum(f.stat().st_size for f in files) / 1e6
