"""drain: memos that take real work, the orchestrator beside `xargs -P` doing the same."""

from __future__ import annotations

import resource
import subprocess
import time
from dataclasses import dataclass

from bench.common import Context, Outcome, Row, check_once, wait_drained
from bench.harness import (
    BenchError,
    Orchestrator,
    Stats,
    child_env,
    count_memos,
    cpu_with_children,
    fill_inbox,
    memo_name,
    read_records,
)


def drain(ctx: Context) -> Outcome:
    """Memos whose agent works a while, as real agents do: the run's wall time against the ideal schedule."""
    s = ctx.sizes
    out = Outcome("drain")
    n, work, width = s.drain_memos, s.drain_work, s.concurrency
    waves = -(-n // width)
    ideal = waves * work
    ctx.say(f"drain: {n} memos already in one inbox, each agent working {work:g} s, max_concurrent {width}")
    names = [memo_name(i) for i in range(n)]
    project = ctx.project("drain")
    project.configure({"r0": {"env": {"BENCH_AGENT_SLEEP": f"{work:g}"}}}, max_concurrent=width)
    fill_inbox(project.folder("r0", "inbox"), names, "r0")
    orch = Orchestrator(project).start()
    done_ns = wait_drained(project, ["r0"], n, orch, timeout=120 + ideal * 2, interval=0.01)
    orch.stop()
    records = project.records()
    out.notes += check_once(records, set(names), "orchestrator")
    wall = (done_ns - orch.launched_ns) / 1e9
    first = min(r.ns for r in records)
    starts = sorted(r.ns for r in records)
    out.rows.append(
        Row(
            "drain",
            f"{n} memos of {work:g} s work, launch -> all archived",
            wall,
            "s",
            ideal,
            f"ideal: {waves} waves of {width} x {work:g} s",
            "ratio <= 1.02",
            wall <= 1.02 * ideal,
            2,
        )
    )
    out.rows.append(
        Row("drain", "first agent start -> all archived", (done_ns - first) / 1e9, "s", ideal, "ideal", "", None, 2)
    )
    gaps = [(starts[i + width] - starts[i]) / 1e9 - work for i in range(len(starts) - width)]
    if gaps:
        out.details.append(
            f"from each agent's start to the start {width} places later (the one that took a freed slot), beyond "
            f"{work:g} s of work (ms): {Stats.of([g * 1000 for g in gaps]).line('ms', 1)}"
        )
    out.details.append(
        f"{n} memos already in the inbox (dated a minute back), max_concurrent {width}, each agent sleeping "
        f"{work:g} s after its start record: ideally {waves} waves of {work:g} s, {ideal:g} s in all. The wall time "
        "counts from the launch of `orchestrator up`, so its start-up is in it."
    )
    return out


@dataclass
class DrainRun:
    """One drain of a full inbox: wall time from launch, time from the first agent start, CPU used."""

    wall: float
    steady: float
    cpu: float
    child_cpu: float = 0.0


def drain_with_orchestrator(ctx: Context, k: int, out: Outcome) -> DrainRun:
    s = ctx.sizes
    names = [memo_name(i) for i in range(s.throughput_memos)]
    project = ctx.project(f"throughput-{k}")
    project.configure({"r0": {}}, max_concurrent=s.concurrency)
    fill_inbox(project.folder("r0", "inbox"), names, "r0")
    orch = Orchestrator(project).start()
    done_ns = wait_drained(project, ["r0"], len(names), orch, timeout=120 + len(names) * 0.1)
    own_cpu, agents_cpu = cpu_with_children(orch.pid)
    orch.stop()
    records = project.records()
    out.notes += check_once(records, set(names), f"orchestrator, run {k + 1}")
    archived = count_memos(project.folder("r0", "archive"))
    if archived != len(names):
        out.notes.append(f"orchestrator, run {k + 1}: {archived} of {len(names)} memos archived")
    first = min(r.ns for r in records)
    return DrainRun((done_ns - orch.launched_ns) / 1e9, (done_ns - first) / 1e9, own_cpu, agents_cpu)


def drain_with_xargs(ctx: Context, k: int, out: Outcome) -> DrainRun:
    s = ctx.sizes
    names = [memo_name(i) for i in range(s.throughput_memos)]
    root = ctx.scratch / f"throughput-baseline-{k}"
    for folder in ("inbox", "active", "archive"):
        (root / folder).mkdir(parents=True)
    fill_inbox(root / "inbox", names, "r0")
    record = root / "records.txt"
    script = (
        f'cd "$1" && ls inbox | xargs -P {s.concurrency} -n 1 '
        'sh -c \'mv "inbox/$1" "active/$1" && "$0" "active/$1" && mv "active/$1" "archive/$1"\' "$2"'
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time_ns()
    done = subprocess.run(
        ["sh", "-c", script, "sh", str(root), str(ctx.agent)],
        env=child_env(record),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    t1 = time.time_ns()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise BenchError(f"the xargs baseline failed ({done.returncode}): {done.stderr.strip()[:500]}")
    records = read_records(record)
    out.notes += check_once(records, set(names), f"xargs baseline, run {k + 1}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return DrainRun((t1 - t0) / 1e9, (t1 - min(r.ns for r in records)) / 1e9, cpu)
