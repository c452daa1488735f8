"""memory: the orchestrator's resident memory as memos pile up, beside Python with the same imports."""

from __future__ import annotations

import subprocess
import sys

from bench.common import Context, Outcome, Row, check_once, wait_drained
from bench.harness import (
    Orchestrator,
    Project,
    child_env,
    drop_atomically,
    memo_name,
    memo_text,
)


def memory(ctx: Context) -> Outcome:
    s = ctx.sizes
    out = Outcome("memory")
    small, large = s.memory_checkpoints
    project = ctx.project("memory")
    project.configure({"r0": {}})
    orch = Orchestrator(project).start()
    orch.wait_ready()
    ctx.say(f"memory: {large} memos through one orchestrator in bursts of {s.memory_batch}")
    inbox = project.folder("r0", "inbox")
    peaks: dict[int, tuple[float, float]] = {}
    done = 0
    while done < large:
        for i in range(done, done + s.memory_batch):
            drop_atomically(inbox, memo_name(i), memo_text(i, "r0"))
        done += s.memory_batch
        wait_drained(project, ["r0"], done, orch, timeout=120 + s.memory_batch * 0.1, interval=0.02)
        if done in (small, large):
            peaks[done] = (orch.peak_rss_mb(), orch.rss_mb())
            ctx.say(f"memory: after {done} memos peak RSS {peaks[done][0]:.1f} MB, RSS now {peaks[done][1]:.1f} MB")
    orch.stop()
    out.notes += check_once(project.records(), {memo_name(i) for i in range(large)}, "orchestrator")

    floor = _import_floor_mb(project)
    growth = peaks[large][0] - peaks[small][0]
    out.rows.append(
        Row(
            "memory",
            f"peak RSS after {small} memos",
            peaks[small][0],
            "MB",
            floor,
            "python + the same imports",
            "<= 100 MB",
            peaks[small][0] <= 100,
        )
    )
    out.rows.append(
        Row(
            "memory",
            f"peak RSS after {large} memos",
            peaks[large][0],
            "MB",
            floor,
            "python + the same imports",
            "<= 100 MB",
            peaks[large][0] <= 100,
        )
    )
    out.rows.append(Row("memory", f"growth {small} -> {large} memos", growth, "MB", None, "", "<= 10 MB", growth <= 10))
    out.details.append(
        f"peak RSS (VmHWM) after {small} memos {peaks[small][0]:.1f} MB (RSS then {peaks[small][1]:.1f} MB), after "
        f"{large} memos {peaks[large][0]:.1f} MB (RSS then {peaks[large][1]:.1f} MB); memos arrived in bursts of "
        f"{s.memory_batch}, each burst drained before the next."
    )
    out.details.append(
        f"baseline: a Python process that imports the orchestrator's modules and does nothing, {floor:.1f} MB."
    )
    return out


def _import_floor_mb(project: Project) -> float:
    code = (
        "import orchestrator.cli, orchestrator.app, orchestrator.supervisor.loop, orchestrator.control.channel, "
        "orchestrator.intake.watcher, orchestrator.supervisor.recovery, watchdog.observers\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(project.record), check=True
    )
    return float(done.stdout.strip()) / 1024
