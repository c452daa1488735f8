"""The ``client`` scenario: how fast the client commands answer, each a fresh process as a person runs it.

``orchestrator cancel`` of a real sleeping agent (one that exits on SIGTERM) and ``orchestrator status``
against a running orchestrator with agents at work, each sample a new process; beside them, in the same
invocation (one sample after each ``status``, then a series after the cancels), ``python -I -c pass``: the
floor any Python command pays. Targets from
issue 24: both p50 <= 60 ms, reported also as a ratio to that floor.
"""

from __future__ import annotations

import subprocess
import time

from bench.cancel import cancel_series
from bench.common import SMOKE, Context, Outcome, Row
from bench.harness import (
    BenchError,
    Orchestrator,
    Stats,
    child_env,
    drop_atomically,
    memo_text,
    orchestrator_command,
    orchestrator_python,
    wait_for,
)

TARGET_MS = 60.0
SAMPLES = 40  # per figure; a smoke run takes 3
BUSY = 3  # agents at work while `status` is asked: its tables have rows to draw


def _python_floor(ctx: Context, count: int) -> list[float]:
    """Wall times of ``python -I -c pass`` (ms), the interpreter the CLI runs on."""
    walls, python = [], orchestrator_python()
    for _ in range(count):
        t0 = time.perf_counter()
        subprocess.run([python, "-I", "-c", "pass"], check=True)
        walls.append((time.perf_counter() - t0) * 1000)
    return walls


def _status_series(ctx: Context, root: str, env: dict[str, str], count: int, floor: list[float]) -> list[float]:
    """Wall times of ``orchestrator status`` (ms), each followed by one sample of the floor."""
    walls = []
    for _ in range(count):
        t0 = time.perf_counter()
        done = subprocess.run(
            [*orchestrator_command(), "status", "--root", root], capture_output=True, text=True, env=env, check=False
        )
        walls.append((time.perf_counter() - t0) * 1000)
        if done.returncode != 0 or "orchestrator running for" not in done.stdout:
            raise BenchError(f"`orchestrator status` exited {done.returncode}: {done.stderr.strip()}")
        floor += _python_floor(ctx, 1)
    return walls


def client(ctx: Context) -> Outcome:
    """``cancel`` and ``status`` wall time, p50, against ``python -I -c pass``."""
    out = Outcome("client")
    count = 3 if ctx.sizes is SMOKE else SAMPLES
    project = ctx.project("client")
    busy_env = {"BENCH_AGENT_SLEEP": "600"}
    project.configure({"sleeper": {"env": busy_env, "grace": "1s"}, "busy": {"env": busy_env, "grace": "1s"}})
    orch = Orchestrator(project).start()
    orch.wait_ready()
    inbox = project.folder("busy", "inbox")
    for i in range(BUSY):
        drop_atomically(inbox, f"busy-{i}.md", memo_text(i, "busy"))
    wait_for(
        lambda: (orch.check_alive(), sum(r.name.startswith("busy-") for r in project.records()) >= BUSY)[1],
        30,
        "the busy agents to start",
    )
    ctx.say(f"client: {count} `orchestrator status` with {BUSY} agents at work, {count} `orchestrator cancel`")
    floor: list[float] = []
    status = _status_series(ctx, str(project.root), child_env(project.record), count, floor)
    cancel = cancel_series(ctx, project, orch, "sleeper", count, out)
    floor += _python_floor(ctx, count)
    orch.stop()

    python, st, ct = Stats.of(floor), Stats.of(status), Stats.of(cancel)
    for figure, stats in (
        ("`orchestrator cancel` (agent exits on SIGTERM) wall, p50", ct),
        ("`orchestrator status` (running orchestrator) wall, p50", st),
    ):
        out.rows.append(
            Row(
                "client",
                figure,
                stats.p50,
                "ms",
                python.p50,
                "`python -I -c pass`",
                f"<= {TARGET_MS:.0f} ms",
                stats.p50 <= TARGET_MS,
                0,
            )
        )
    out.details.append(f"`orchestrator status`, {BUSY} agents at work (ms): {st.line('ms', 0)}")
    out.details.append(f"`orchestrator cancel`, agent exits on SIGTERM (ms): {ct.line('ms', 0)}")
    out.details.append(f"`python -I -c pass`, in the same run (ms): {python.line('ms', 1)}")
    return out
