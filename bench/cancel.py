"""cancel: `orchestrator cancel` until the agent's tree is gone, beside a bare kill ladder."""

from __future__ import annotations

import sqlite3
import subprocess
import threading
import time

from bench.common import Context, Outcome, Row
from bench.harness import (
    BenchError,
    Orchestrator,
    Project,
    Stats,
    child_env,
    drop_atomically,
    memo_text,
    orchestrator_command,
    read_records,
    wait_for,
)


def cancel(ctx: Context) -> Outcome:
    s = ctx.sizes
    out = Outcome("cancel")
    grace = s.grace
    project = ctx.project("cancel")
    sleeping = {"BENCH_AGENT_SLEEP": "600"}
    project.configure(
        {
            "sleeper": {"env": sleeping, "grace": f"{grace}s"},
            "stubborn": {"env": {**sleeping, "BENCH_AGENT_IGNORE_TERM": "1"}, "grace": f"{grace}s"},
        }
    )
    orch = Orchestrator(project).start()
    orch.wait_ready()
    ctx.say(f"cancel: {s.cancel_term} agents that exit on SIGTERM, {s.cancel_ignore} that ignore it (grace {grace:g}s)")
    term = cancel_series(ctx, project, orch, "sleeper", s.cancel_term, out)
    ignore = cancel_series(ctx, project, orch, "stubborn", s.cancel_ignore, out)
    orch.stop()
    ladder = _ladder_seconds(project)

    ctx.say("cancel: the baseline, the same ladder in C (`agent --stop`)")
    base_term = _baseline_stops(ctx, "term", sleeping, s.cancel_term, grace)
    base_ignore = _baseline_stops(ctx, "ignore", {**sleeping, "BENCH_AGENT_IGNORE_TERM": "1"}, s.cancel_ignore, grace)
    cli = []
    for _ in range(s.cli_samples):
        t0 = time.perf_counter()
        subprocess.run(
            [*orchestrator_command(), "--version"], capture_output=True, env=child_env(project.record), check=False
        )
        cli.append((time.perf_counter() - t0) * 1000)
    cli_st = Stats.of(cli)

    st, ist, bst, bist = Stats.of(term), Stats.of(ignore), Stats.of(base_term), Stats.of(base_ignore)
    limit = grace * 1000 + 150
    out.rows.append(
        Row(
            "cancel",
            "exits on SIGTERM: `orchestrator cancel` wall, p50",
            st.p50,
            "ms",
            bst.p50,
            "C kill ladder",
            "<= 150 ms",
            st.p50 <= 150,
            0,
        )
    )
    out.rows.append(
        Row(
            "cancel",
            f"ignores SIGTERM (grace {grace:g} s): wall, p50",
            ist.p50,
            "ms",
            bist.p50,
            "C kill ladder",
            f"<= {limit:.0f} ms",
            ist.p50 <= limit,
            0,
        )
    )
    out.details.append(f"`orchestrator cancel`, agent exits on SIGTERM (ms): {st.line('ms', 0)}")
    out.details.append(f"`orchestrator cancel`, agent ignores SIGTERM (ms): {ist.line('ms', 0)}")
    for label, values in ladder.items():
        if values:
            out.details.append(
                f"of which the kill ladder inside the orchestrator, {label} (ms): {Stats.of(values).line('ms', 0)}"
            )
    out.details.append(
        f"baseline `agent --stop PGID GRACE_MS` (SIGTERM the group, poll every 1 ms, SIGKILL after the grace), "
        f"exits on SIGTERM (ms): {bst.line('ms', 1)}; ignores it (ms): {bist.line('ms', 0)}"
    )
    out.details.append(f"for scale, `orchestrator --version` (Python start-up of the CLI) (ms): {cli_st.line('ms', 0)}")
    return out


def cancel_series(
    ctx: Context, project: Project, orch: Orchestrator, role: str, count: int, out: Outcome
) -> list[float]:
    import psutil

    walls = []
    inbox = project.folder(role, "inbox")
    for i in range(count):
        name = f"{role}-{i:03d}.md"
        drop_atomically(inbox, name, memo_text(i, role))
        rec = wait_for(
            lambda name=name: (orch.check_alive(), [r for r in project.records() if r.name == name])[1],
            30,
            f"the agent of {name} to start",
        )[0]
        t0 = time.perf_counter()
        done = subprocess.run(
            [*orchestrator_command(), "cancel", name, "--root", str(project.root)],
            capture_output=True,
            text=True,
            env=child_env(project.record),
            check=False,
        )
        walls.append((time.perf_counter() - t0) * 1000)
        if done.returncode != 0:
            raise BenchError(f"`orchestrator cancel {name}` exited {done.returncode}: {done.stderr.strip()}")
        try:
            alive = psutil.Process(rec.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        if alive:
            out.notes.append(
                f"the agent of {name} (pid {rec.pid}) was still alive after `orchestrator cancel` returned"
            )
    return walls


def _ladder_seconds(project: Project) -> dict[str, list[float]]:
    """How long the kill ladder took inside the orchestrator, from its own cancellation records."""
    db = project.root / ".orchestrator" / "state.db"
    out: dict[str, list[float]] = {"exits on SIGTERM": [], "ignores SIGTERM": []}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        for role, seconds in conn.execute("SELECT role, seconds FROM cancellations"):
            out["exits on SIGTERM" if role == "sleeper" else "ignores SIGTERM"].append((seconds or 0.0) * 1000)
    return out


def _baseline_stops(ctx: Context, label: str, env: dict[str, str], count: int, grace: float) -> list[float]:
    record = ctx.scratch / "cancel-baseline.txt"
    walls = []
    for i in range(count):
        memo = f"base-{label}-{i}"
        proc = subprocess.Popen([str(ctx.agent), memo], env=child_env(record, **env), start_new_session=True)
        reaper = threading.Thread(target=proc.wait, daemon=True)  # reaped at once, as the orchestrator reaps its agents
        reaper.start()
        wait_for(lambda memo=memo: any(r.memo == memo for r in read_records(record)), 10, "the baseline agent to start")
        t0 = time.perf_counter()
        subprocess.run([str(ctx.agent), "--stop", str(proc.pid), str(int(grace * 1000))], check=True)
        walls.append((time.perf_counter() - t0) * 1000)
        reaper.join(10)
    return walls
