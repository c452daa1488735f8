"""The continuity scenario: prompt rendering with a full context, handoff and journal, and the latency with them.

Rendering is timed in-process through the real ``Launcher`` (sections, notes and
template), beside the same render with the continuity sections taken out; the
latency is the core's rename -> agent start with every continuity key configured.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

from bench.common import Outcome, Row, check_once, latencies, paced_drops, wait_drained
from bench.harness import Orchestrator, Stats

CONTEXT_BYTES = 64 * 1024 - 64
HANDOFF_BYTES = 20 * 1024 - 64
JOURNAL_BYTES = 8 * 1024
RENDERS = 300


def _fill(root: Path, role: str) -> None:
    """Two context files (64 KB together), a 20 KB handoff and a journal of more than 8 KB."""
    from orchestrator.continuity import journal as jn

    half = CONTEXT_BYTES // 2
    (root / "persona.md").write_text(("persona line of text. " * 4096)[:half], encoding="utf-8")
    (root / "goals.md").write_text(("goal line of text here " * 4096)[:half], encoding="utf-8")
    role_dir = root / "memo" / role
    role_dir.mkdir(parents=True, exist_ok=True)
    (role_dir / "handoff.md").write_text(("- a fact (until 2999-12-31)\n" * 1000)[:HANDOFF_BYTES], encoding="utf-8")
    folder = role_dir / "journal"
    folder.mkdir(exist_ok=True)
    text = "".join(
        jn.marker(n, 1, n, "succeeded", "09:00", "09:01") + f"\n## Run {n}\n\n" + "> closing words\n" * 120 + "\n"
        for n in range(1, 9)
    )
    (folder / "2026-11-30.md").write_text(text, encoding="utf-8")


def continuity(ctx):  # type: ignore[no-untyped-def]
    from orchestrator.compose import build_supervisor
    from orchestrator.config import load_config
    from orchestrator.console import Console
    from orchestrator.core.clock import SystemClock
    from orchestrator.core.run import MemoRef, Run

    out = Outcome("continuity")
    keys = {"context": ["persona.md", "goals.md"], "journal_in_prompt": 8}
    prompt = "$context\n$memory\n$handoff\n$journal\nYou are r0. Your memo is $memo_path:\n\n$memo\n"

    # ---- rendering, in-process
    project = ctx.project("continuity-render")
    project.configure({"r0": keys})
    (project.root / "prompts" / "r0.md").write_text(prompt, encoding="utf-8")
    _fill(project.root, "r0")
    config = load_config(project.root)
    sup = build_supervisor(config, Console(None, stream=io.StringIO(), live=False), clock=SystemClock())
    memo = project.root / "memo" / "r0" / "active" / "m.md"
    memo.write_text("---\nid: m\n---\nwork\n", encoding="utf-8")
    run = Run(run_id=1, role=config.roles["r0"], memos=[MemoRef("m.md", memo, "m")], arrival=0, attempt=1, seq=1)

    def timed(sections: bool) -> list[float]:
        saved = list(sup.launcher.sections)
        if not sections:
            sup.launcher.sections.clear()
        try:
            samples = []
            for _ in range(RENDERS):
                start = time.perf_counter_ns()
                sup.launcher._render(run, "work\n")
                samples.append((time.perf_counter_ns() - start) / 1e6)
            return samples
        finally:
            sup.launcher.sections[:] = saved

    ctx.say(f"continuity: {RENDERS} prompt renders with 64 KB of context, a 20 KB handoff, an 8 KB journal")
    size = len(sup.launcher._render(run, "work\n").encode("utf-8"))
    full, bare = Stats.of(timed(True)), Stats.of(timed(False))
    sup.store.close()
    out.details.append(f"render with continuity ({size} bytes of prompt): {full.line('ms', 3)}")
    out.details.append(f"render without the continuity sections: {bare.line('ms', 3)}")
    out.rows.append(
        Row(
            "continuity",
            "prompt render, 64 KB context + 20 KB handoff + 8 KB journal, p50",
            full.p50,
            "ms",
            bare.p50,
            "the same render without the sections",
            "<= 2 ms",
            full.p50 <= 2.0,
            3,
        )
    )

    # ---- the core's latency with all of it configured
    s = ctx.sizes
    total = s.warmup + s.latency_memos
    names = [f"c{i:06d}.md" for i in range(total)]
    measured = set(names[s.warmup :])
    project = ctx.project("continuity-latency")
    project.configure({"r0": keys})
    (project.root / "prompts" / "r0.md").write_text(prompt, encoding="utf-8")
    _fill(project.root, "r0")
    orch = Orchestrator(project).start()
    orch.wait_ready()
    ctx.say(f"continuity: {total} memos paced {s.latency_pace * 1000:g} ms apart, every continuity key configured")
    renamed = paced_drops(project.folder("r0", "inbox"), names, s.latency_pace, orch.check_alive)
    wait_drained(project, ["r0"], total, orch, timeout=60 + total * 0.2)
    orch.stop()
    records = project.records()
    out.notes += check_once(records, set(names), "orchestrator with continuity")
    st = Stats.of(latencies(records, renamed, measured))
    out.details.append(f"rename -> agent start with continuity configured (ms): {st.line('ms', 2)}")
    out.rows.append(
        Row(
            "continuity",
            "rename -> agent start with all of it configured, p50",
            st.p50,
            "ms",
            None,
            "",
            "<= 20 ms",
            st.p50 <= 20,
            2,
        )
    )
    out.rows.append(Row("continuity", "the same, p99", st.p99, "ms", None, "", "<= 100 ms", st.p99 <= 100, 2))
    return out
