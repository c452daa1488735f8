"""The keeper's scenario: what it costs at a start, and what it saves when the orchestrator is killed.

Two parts, each beside a baseline measured in the same run:
- latency with the keeper against the same orchestrator with ``ORCHESTRATOR_KEEPER=off``;
- memos run twice under repeated SIGKILLs of the orchestrator (agents that work a while, so
  kills land while they run), with adoption (the default) against ``recovery: restart``.
"""

from __future__ import annotations

import random
import signal
from collections import Counter
from typing import Any

from bench.common import Outcome, Row, latencies, paced_drops, wait_drained
from bench.harness import Orchestrator, Stats, count_memos, fill_inbox, memo_name, wait_for


def keeper(ctx: Any) -> Any:
    """The ``keeper`` scenario (see the module docstring)."""

    out = Outcome("keeper")
    with_keeper, without = _latency(ctx, "on"), _latency(ctx, "off")
    out.rows.append(
        Row(
            "keeper",
            f"rename -> agent start with the keeper, p50 (n={with_keeper.n})",
            with_keeper.p50,
            "ms",
            without.p50,
            "the same without a keeper",
            "<= 20 ms",
            with_keeper.p50 <= 20,
            2,
        )
    )
    out.details.append(f"with the keeper (ms): {with_keeper.line('ms', 2)}")
    out.details.append(f"ORCHESTRATOR_KEEPER=off (ms): {without.line('ms', 2)}")
    s = ctx.sizes
    adopt, adopt_done = _crashes(ctx, "adopt", out)
    restart, restart_done = _crashes(ctx, "restart", out)
    out.rows.append(
        Row(
            "keeper",
            f"memos completed twice under {s.crash_kills} orchestrator kills ({s.crash_memos} memos)",
            adopt,
            "memos",
            restart,
            "recovery: restart",
            "0",
            adopt == 0 and adopt_done,
            0,
        )
    )
    out.details.append(
        f"{s.crash_memos} memos already in the inbox, each agent working {s.crash_sleep:g} s, max_concurrent "
        f"{s.concurrency}; the orchestrator SIGKILLed {s.crash_kills} times at random moments and started again. "
        f"A memo counts when its agent started more than once. adopt: {adopt}; recovery: restart: {restart}"
        f" ({'every' if adopt_done and restart_done else 'NOT every'} memo archived in both)."
    )
    return out


def _latency(ctx: Any, keeper_switch: str) -> Stats:

    s = ctx.sizes
    count = max(2, s.latency_memos // 5)
    names = [memo_name(i) for i in range(s.warmup + count)]
    project = ctx.project(f"keeper-latency-{keeper_switch}")
    project.configure({"r0": {}}, recovery="adopt" if keeper_switch == "on" else "restart")  # adopt needs it
    orch = Orchestrator(project, env_extra={"ORCHESTRATOR_KEEPER": keeper_switch}).start()
    orch.wait_ready()
    renamed = paced_drops(project.folder("r0", "inbox"), names, s.latency_pace, orch.check_alive)
    wait_drained(project, ["r0"], len(names), orch, timeout=60 + len(names) * 0.1)
    orch.stop()
    return Stats.of(latencies(project.records(), renamed, set(names[s.warmup :])))


def _crashes(ctx: Any, recovery: str, out: Any) -> tuple[int, bool]:
    s = ctx.sizes
    chance = random.Random(15)
    names = [memo_name(i) for i in range(s.crash_memos)]
    project = ctx.project(f"keeper-crashes-{recovery}")
    project.configure({"r0": {}}, max_concurrent=s.concurrency, recovery=recovery)
    fill_inbox(project.folder("r0", "inbox"), names, "r0")
    env = {"BENCH_AGENT_SLEEP": f"{s.crash_sleep:g}"}
    ctx.say(f"keeper: {len(names)} memos, {s.crash_kills} kills of the orchestrator, recovery: {recovery}")
    orch = Orchestrator(project, env_extra=env).start()
    step = max(1, len(names) // (s.crash_kills + 2))
    for kill in range(s.crash_kills):
        goal = min(len(names), (kill + 1) * step + chance.randrange(step))
        wait_for(lambda goal=goal: len(project.records()) >= goal, 120, f"{goal} agent starts")
        assert orch.proc is not None
        orch.proc.send_signal(signal.SIGKILL)
        orch.proc.wait(30)
        orch = Orchestrator(project, env_extra=env).start()
        ups = kill + 2
        wait_for(
            lambda ups=ups, orch=orch: orch.output().count("orchestrator up:") >= ups, 60, "the orchestrator up again"
        )
    archive = project.folder("r0", "archive")
    try:
        wait_for(lambda: count_memos(archive) == len(names), 120 + len(names) * 0.1, "every memo archived")
        done = True
    except Exception:  # noqa: BLE001 - a figure to report, not a crash of the benchmark
        done = False
        out.notes.append(f"recovery {recovery}: {count_memos(archive)} of {len(names)} memos archived")
    orch.stop()
    counts = Counter(r.name for r in project.records())
    return sum(1 for c in counts.values() if c > 1), done
