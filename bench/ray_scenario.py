"""The ``ray`` scenario: memo -> agent start latency and cancel time on a local Ray cluster, beside ``executor: local``.

The cluster (a head and a second node, ``tests/ray_cluster.py``) is started and
stopped by the scenario; both executors run the same compiled agent in the same
invocation, and the local figures are the baseline. Targets from issue 16:
start p50 <= 100 ms and cancel p50 <= 300 ms on Ray.
"""

from __future__ import annotations

import time
from typing import Any

from bench import common
from bench.cancel import cancel_series
from bench.common import SMOKE, Context, Outcome, Row
from bench.harness import Orchestrator, Stats, drop_atomically, memo_text, wait_for
from tests.ray_cluster import ENV, LocalCluster


def _measure(
    ctx: Context, kind: str, executor: dict[str, Any], starts: int, cancels: int, out: Outcome, up_env: dict[str, str]
) -> tuple[list[float], list[float]]:
    project = ctx.project(f"ray-{kind}")
    env = {"BENCH_RECORD": str(project.record)}  # a role's env is what travels to a Ray worker
    project.configure(
        {"quick": {"env": env}, "sleeper": {"env": {**env, "BENCH_AGENT_SLEEP": "600"}, "grace": "1s"}},
        executor=executor,
    )
    orch = Orchestrator(project, dict(up_env)).start()  # the orchestrator's own environment
    orch.wait_ready(120)
    inbox = project.folder("quick", "inbox")
    renamed: dict[str, int] = {}
    for i in range(starts + 2):  # the first two warm the workers up and are not measured
        name = f"quick-{i:03d}.md"
        renamed[name] = drop_atomically(inbox, name, memo_text(i, "quick"))
        wait_for(
            lambda name=name: (orch.check_alive(), any(r.name == name for r in project.records()))[1],
            120,
            f"{name} to start",
        )
        time.sleep(0.05)  # paced: one start at a time, as a person or an agent drops memos
    measured = set(sorted(renamed)[2:])
    latencies = common.latencies(project.records(), renamed, measured)
    walls = cancel_series(ctx, project, orch, "sleeper", cancels, out)
    orch.stop()
    return latencies, walls


def ray(ctx: Context) -> Outcome:
    """Start latency and cancel wall time, Ray against local."""
    out = Outcome("ray")
    starts = max(3, ctx.sizes.cancel_term)
    cancels = max(2, ctx.sizes.cancel_term // 2)
    ctx.say(f"ray: {starts} starts and {cancels} cancels with executor local, then the same on a local Ray cluster")
    local_start, local_cancel = _measure(ctx, "local", {"kind": "local"}, starts, cancels, out, {})
    ctx.say("ray: starting a local Ray cluster (a head and a second node)")
    cluster = LocalCluster(second_node=ctx.sizes is not SMOKE)  # a smoke run only checks that it runs
    try:
        ray_start, ray_cancel = _measure(
            ctx, "ray", {"kind": "ray", "address": cluster.address}, starts, cancels, out, ENV
        )
    finally:
        left = cluster.stop()
        if left:
            out.notes.append(f"Ray processes survived the cluster's stop: {left}")
    rs, ls, rc, lc = Stats.of(ray_start), Stats.of(local_start), Stats.of(ray_cancel), Stats.of(local_cancel)
    out.rows.append(
        Row(
            "ray",
            "rename -> agent start on a Ray worker, p50",
            rs.p50,
            "ms",
            ls.p50,
            "executor: local",
            "<= 100 ms",
            rs.p50 <= 100,
            1,
        )
    )
    out.rows.append(
        Row(
            "ray",
            "`orchestrator cancel` wall on Ray, agent exits on SIGTERM, p50",
            rc.p50,
            "ms",
            lc.p50,
            "executor: local",
            "<= 300 ms",
            rc.p50 <= 300,
            0,
        )
    )
    out.details.append(f"start on Ray (ms): {rs.line('ms', 1)}; local (ms): {ls.line('ms', 1)}")
    out.details.append(f"cancel on Ray (ms): {rc.line('ms', 0)}; local (ms): {lc.line('ms', 0)}")
    return out
