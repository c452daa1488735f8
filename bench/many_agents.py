"""many-agents: what 20, 100 and 300 agents running at once cost the orchestrator.

For each count a fresh `orchestrator up` starts that many sleeping stand-in agents (each under its keeper), then
measures, with all of them running: the latency of a new memo for another role, `status` and `cancel` of one
run (a fresh CLI process each, median of 11), the orchestrator's RSS and its CPU while nothing happens, and at
the end `cancel --role` of all of them, from the command's start until it answers (every run ended: it waits for
them all), and beside it until none of their agents runs. The baseline
of every figure is the same figure at the smallest count: what grows with the number of agents shows as a ratio.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

from bench.cancel import cancel_series
from bench.common import SMOKE, Context, Outcome, Row, latencies, paced_drops
from bench.harness import (
    BenchError,
    Orchestrator,
    Stats,
    child_env,
    cpu_seconds,
    drop_atomically,
    memo_name,
    memo_text,
    orchestrator_command,
    wait_for,
)

COUNTS = (20, 100, 300)
SMOKE_COUNTS = (2, 4)
# `status` and `cancel` of one run, each a fresh process: the median of these (of 5, a row swung from 1.2x to 1.6x
# between runs on the same wheel)
CLIENT_RUNS = 11
NEW_MEMOS = 20  # memos for another role while the agents run, one every PACE seconds
PACE = 0.05
IDLE_WINDOW = 15.0  # seconds of CPU measured with every agent running and nothing else to do (smoke: 1 s)
ROLE_CANCEL_LIMIT = 2.0  # seconds for `cancel --role` of the largest count
GROWTH_LIMIT = 1.5  # at the largest count, against the smallest: status, cancel of one run, cancel --role per agent
RSS_LIMIT = 100.0
IDLE_SLACK = 0.1  # CPU seconds a minute: below this an idle figure's growth is the clock tick, not the agents


@dataclass
class AtCount:
    """The figures with ``count`` agents running."""

    count: int
    memo_ms: Stats
    status_ms: float
    cancel_ms: float
    rss_mb: float
    idle_per_minute: float
    role_cancel_s: float  # until the command answered: every run ended (it waits for them all)
    agents_gone_s: float  # until no agent of theirs ran
    role_cancel_cpu_s: float


def many_agents(ctx: Context) -> Outcome:
    out = Outcome("many-agents")
    smoke = ctx.sizes is SMOKE
    counts, window, runs = (SMOKE_COUNTS, 1.0, 2) if smoke else (COUNTS, IDLE_WINDOW, CLIENT_RUNS)
    figures = [_at_count(ctx, count, window, runs, out) for count in counts]
    _rows(out, figures[0], figures[-1])
    for f in figures:
        out.details.append(
            f"{f.count} agents running: new memo for another role (ms) {f.memo_ms.line('ms', 1)}; `status` p50 of "
            f"{CLIENT_RUNS} {f.status_ms:.0f} ms; `cancel` of one run p50 of {CLIENT_RUNS} {f.cancel_ms:.0f} ms; "
            f"RSS {f.rss_mb:.1f} MB; idle CPU {f.idle_per_minute:.2f} s a minute; `cancel --role` until every run ended "
            f"{f.role_cancel_s:.2f} s ({1000 * f.role_cancel_s / f.count:.1f} ms an agent; the last agent had ended "
            f"after {f.agents_gone_s:.2f} s; the orchestrator's CPU meanwhile {f.role_cancel_cpu_s:.2f} s, "
            f"{1000 * f.role_cancel_cpu_s / f.count:.1f} ms an agent)"
        )
    out.details.append(
        "Each count has an orchestrator of its own (max_concurrent above the count); its agents are the C stand-in "
        f"sleeping 600 s, each under its keeper. Idle CPU is measured over {window:g} s and given per minute."
    )
    return out


def _at_count(ctx: Context, count: int, window: float, runs: int, out: Outcome) -> AtCount:
    project = ctx.project(f"many-{count}")
    sleeping = {"BENCH_AGENT_SLEEP": "600"}
    project.configure(
        {"sleeper": {"env": sleeping}, "single": {"env": sleeping}, "other": {}}, max_concurrent=count + 10
    )
    orch = Orchestrator(project).start()
    orch.wait_ready()
    ctx.say(f"many-agents: {count} sleeping agents")
    inbox = project.folder("sleeper", "inbox")
    names = {f"sleeper-{i:04d}.md" for i in range(count)}
    for i, name in enumerate(sorted(names)):
        drop_atomically(inbox, name, memo_text(i, "sleeper"))
    wait_for(
        lambda: (orch.check_alive(), sum(r.name in names for r in project.records()) >= count)[1],
        60 + count * 0.2,
        f"{count} agents to start",
    )
    sleepers = [r.pid for r in project.records() if r.name in names]
    time.sleep(1.0)  # past the starts' own work (the last exits of start-up, the first stall checks)

    c0, t0 = cpu_seconds(orch.pid), time.monotonic()
    time.sleep(window)
    idle = (cpu_seconds(orch.pid) - c0) * 60 / (time.monotonic() - t0)
    rss = orch.rss_mb()

    memos = [f"new-{count}-{memo_name(i)}" for i in range(NEW_MEMOS)]
    renamed = paced_drops(project.folder("other", "inbox"), memos, PACE, orch.check_alive)
    wait_for(lambda: sum(r.name in renamed for r in project.records()) >= len(memos), 60, "the new memos' agents")
    memo_ms = Stats.of(latencies(project.records(), renamed, set(memos)))

    env = child_env(project.record)
    status = [_wall(["status", "--root", str(project.root)], env, "orchestrator running for") for _ in range(runs)]
    cancel = cancel_series(ctx, project, orch, "single", runs, out)

    cpu, started = cpu_seconds(orch.pid), time.perf_counter()
    command = [*orchestrator_command(), "cancel", "--role", "sleeper", "--root", str(project.root)]
    cli = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    wait_for(lambda: not any(_runs(pid) for pid in sleepers), 120, f"every one of the {count} agents to end")
    agents_gone = time.perf_counter() - started
    _, err = cli.communicate(timeout=300)
    answered = time.perf_counter() - started
    if cli.returncode != 0:
        raise BenchError(f"`orchestrator cancel --role sleeper` exited {cli.returncode}: {err.decode()[-500:]}")
    cpu = cpu_seconds(orch.pid) - cpu
    orch.stop()
    return AtCount(count, memo_ms, _median(status), _median(cancel), rss, idle, answered, agents_gone, cpu)


def _wall(args: list[str], env: dict[str, str], expect: str) -> float:
    """Wall time (ms) of one `orchestrator ARGS`, a fresh process as a person runs it."""
    t0 = time.perf_counter()
    done = subprocess.run([*orchestrator_command(), *args], capture_output=True, text=True, env=env, check=False)
    wall = (time.perf_counter() - t0) * 1000
    if done.returncode != 0 or expect not in done.stdout:
        raise BenchError(f"`orchestrator {' '.join(args)}` exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return wall


def _runs(pid: int) -> bool:
    """Whether ``pid`` is a live process (neither gone nor a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _median(values: list[float]) -> float:
    return Stats.of(values).p50


def _rows(out: Outcome, low: AtCount, high: AtCount) -> None:
    n, base = high.count, f"the same at {low.count} agents"
    per_low, per_high = 1000 * low.role_cancel_s / low.count, 1000 * high.role_cancel_s / high.count
    idle_limit = max(GROWTH_LIMIT * low.idle_per_minute, low.idle_per_minute + IDLE_SLACK)
    rows = [
        (f"new memo for another role, {n} agents running, p50", high.memo_ms.p50, "ms", low.memo_ms.p50, "", None, 1),
        (
            f"`status`, {n} agents running, p50 of {CLIENT_RUNS}",
            high.status_ms,
            "ms",
            low.status_ms,
            f"ratio <= {GROWTH_LIMIT:g}",
            high.status_ms <= GROWTH_LIMIT * low.status_ms,
            0,
        ),
        (
            f"`cancel` of one run, {n} agents running, p50 of {CLIENT_RUNS}",
            high.cancel_ms,
            "ms",
            low.cancel_ms,
            f"ratio <= {GROWTH_LIMIT:g}",
            high.cancel_ms <= GROWTH_LIMIT * low.cancel_ms,
            0,
        ),
        (
            f"`cancel --role` of {n} agents until every run ended",
            high.role_cancel_s,
            "s",
            None,
            f"<= {ROLE_CANCEL_LIMIT:g} s",
            high.role_cancel_s <= ROLE_CANCEL_LIMIT,
            2,
        ),
        ("the same, until none of their agents runs", high.agents_gone_s, "s", None, "", None, 2),
        (
            f"the same, per agent, at {n} agents",
            per_high,
            "ms",
            per_low,
            f"ratio <= {GROWTH_LIMIT:g}",
            per_high <= GROWTH_LIMIT * per_low,
            1,
        ),
        (
            f"RSS, {n} agents running",
            high.rss_mb,
            "MB",
            low.rss_mb,
            f"<= {RSS_LIMIT:g} MB",
            high.rss_mb <= RSS_LIMIT,
            1,
        ),
        (
            f"idle CPU, {n} agents running, per minute",
            high.idle_per_minute,
            "s",
            low.idle_per_minute,
            f"<= {idle_limit:.2f} s (flat)",
            high.idle_per_minute <= idle_limit,
            2,
        ),
    ]
    for figure, value, unit, baseline, target, ok, digits in rows:
        out.rows.append(
            Row(
                "many-agents",
                figure,
                value,
                unit,
                baseline,
                base if baseline is not None else "",
                target,
                ok,
                digits,
            )
        )
