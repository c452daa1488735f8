"""The memory-store scenario: search, add and ``$memory`` with 100,000 entries, in the process and as the CLI.

The store is filled once, deterministically: five scopes (four roles and ``team``),
400 days back, 80% daily, 15% weekly, 4% monthly, core up to its cap of 100 per
scope; each text 10 to 40 words drawn from the Japanese and English words of the
memo fixtures in ``tests/fixtures/memory`` (so common words match thousands of
entries). Queries mix long and short, Japanese and English, one and two words,
frequent, rare and absent. Wall-clock p50s are judged against the targets; the CPU
time of the same calls is given beside them, since the machine may be shared.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import time
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import SMOKE, Outcome, Row
from bench.harness import Stats, child_env, orchestrator_command

ENTRIES = 100_000
SMOKE_ENTRIES = 2_000
ROLES = ["builder", "planner", "reviewer", "project-manager"]
TODAY = date(2026, 12, 1)
QUERIES = [
    "バックログ",
    "記憶",
    "タスク",
    "SEO",
    "reply",
    "優先順位",
    "監督",
    "延期 PM",
    "planner docs",
    "存在しない語句",
]
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "memory"


def _words() -> list[str]:
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(FIXTURES.glob("*.md")))
    words = [
        run[i : i + 3] for run in re.findall(r"[\u3040-\u30ff\u4e00-\u9fff]+", text) for i in range(0, len(run), 3)
    ]
    return [w for w in words if len(w) >= 2] + re.findall(r"[A-Za-z]{3,}", text) + ["記憶", "監督"]


def fill(path: Path, n: int, seed: int = 13) -> None:
    """``n`` entries straight into the store's tables (one transaction), as ``MemoryDB.add`` writes them."""
    from orchestrator.config.memory import TEAM
    from orchestrator.memory import grams, rules
    from orchestrator.memory.db import MemoryDB

    rng = random.Random(seed)
    words = _words()
    core = dict.fromkeys([*ROLES, TEAM], 0)
    db = MemoryDB(path)
    try:
        with db._write("bench fill") as conn:
            for _ in range(n):
                role = rng.choice([*ROLES, TEAM])
                layer = rng.choices(["daily", "weekly", "monthly", "core"], [80, 15, 4, 1])[0]
                if layer == "core" and core[role] >= 100:
                    layer = "daily"
                core[role] += layer == "core"
                day = TODAY - timedelta(days=rng.randrange(400))
                importance = 10 if layer == "core" else rng.choice([1, 2, 2, 3, 3, 3, 4, 5, 6, 7, 8])
                text = "".join(
                    rng.choice(words) + ("" if rng.random() < 0.6 else " ") for _ in range(rng.randrange(10, 40))
                )
                cur = conn.execute(
                    "INSERT INTO entries (role, layer, period, text, category, importance, source, created_at)"
                    " VALUES (?,?,?,?,?,?,?,?)",
                    (
                        role,
                        layer,
                        rules.period_for(layer, day),
                        text.strip(),
                        rng.choice(rules.CATEGORIES),
                        importance,
                        "agent",
                        datetime.combine(day, datetime.min.time()).isoformat(timespec="milliseconds"),
                    ),
                )
                conn.execute("INSERT INTO entries_fts (rowid, text) VALUES (?, ?)", (cur.lastrowid, text.strip()))
                conn.execute("INSERT INTO entries_bi (rowid, grams) VALUES (?, ?)", (cur.lastrowid, grams.tokens(text)))
        db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


def _timed(call: Any, repeats: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        call()
        walls.append((time.perf_counter_ns() - w0) / 1e6)
        cpus.append((time.process_time_ns() - c0) / 1e6)
    return walls, cpus


def memory_store(ctx):  # type: ignore[no-untyped-def]
    from orchestrator.config.memory import MemorySettings
    from orchestrator.memory.db import MemoryDB
    from orchestrator.memory.db.schema import db_path
    from orchestrator.memory.section import render_for
    from orchestrator.memory.service import Caller, Memory

    smoke = ctx.sizes == SMOKE
    n = SMOKE_ENTRIES if smoke else ENTRIES
    repeats, cli_calls = (3, 3) if smoke else (30, 40)
    out = Outcome("memory-store")
    project = ctx.project("memory-store")
    project.configure({r: {} for r in ROLES})
    path = db_path(project.root / ".orchestrator")
    load0 = os.getloadavg()
    ctx.say(f"memory-store: filling {n} entries")
    started = time.monotonic()
    fill(path, n)
    out.details.append(f"filled {n} entries in {time.monotonic() - started:.1f} s ({path.stat().st_size / 1e6:.0f} MB)")

    db = MemoryDB(path, create=False)
    try:
        memory = Memory(db, MemorySettings(), [*ROLES], Caller("builder", "1"))
        ctx.say(f"memory-store: {len(QUERIES)} queries x {repeats} in the process")
        for q in QUERIES:  # warm the page cache as a running store is
            db.search(q, ["builder", "team"])
        search_wall: list[float] = []
        search_cpu: list[float] = []
        per_query = []
        for q in QUERIES:
            walls, cpus = _timed(lambda q=q: memory.search(q), repeats)
            search_wall += walls
            search_cpu += cpus
            per_query.append(f"{q} {Stats.of(walls).p50:.2f}")
        add_wall, add_cpu = [], []
        rng = random.Random(5)
        for k in range(repeats * 10):
            text = f"bench add {k} " + "".join(rng.choice(_words()) for _ in range(20))
            c0, w0 = time.process_time_ns(), time.perf_counter_ns()
            memory.add(text, now=datetime(2026, 12, 1, 12, 0), importance=rng.randint(1, 6))
            add_wall.append((time.perf_counter_ns() - w0) / 1e6)
            add_cpu.append((time.process_time_ns() - c0) / 1e6)
        render_wall, render_cpu = _timed(lambda: render_for(db, "builder", TODAY, 450, 32 * 1024), repeats * 5)
        shown = render_for(db, "builder", TODAY, 450, 32 * 1024)
    finally:
        db.close()

    ctx.say(f"memory-store: {cli_calls} CLI searches, as an agent")
    env = child_env(project.record, ORCHESTRATOR_ROLE="builder", ORCHESTRATOR_RUN_ID="1")
    command = orchestrator_command()
    cli_wall = []
    for k in range(cli_calls):
        q = QUERIES[k % len(QUERIES)]
        w0 = time.perf_counter()
        done = subprocess.run(
            [*command, "memory", "search", q, "--root", str(project.root)], env=env, capture_output=True, check=False
        )
        cli_wall.append((time.perf_counter() - w0) * 1000)
        if done.returncode != 0:
            raise RuntimeError(f"memory search {q!r} failed: {done.stderr.decode(errors='replace')}")
    floor = []
    for _ in range(min(cli_calls, 10)):
        w0 = time.perf_counter()
        subprocess.run([*command, "--version"], env=env, capture_output=True, check=False)
        floor.append((time.perf_counter() - w0) * 1000)

    s_w, s_c, a_w, a_c = Stats.of(search_wall), Stats.of(search_cpu), Stats.of(add_wall), Stats.of(add_cpu)
    r_w, r_c, c_w, f_w = Stats.of(render_wall), Stats.of(render_cpu), Stats.of(cli_wall), Stats.of(floor)
    scope = f"{n // 1000}k entries" if n >= 1000 else f"{n} entries"
    out.rows += [
        Row(
            "memory-store",
            f"memory search in the process, {scope}, p50",
            s_w.p50,
            "ms",
            None,
            "",
            "<= 10 ms",
            s_w.p50 <= 10,
            2,
        ),
        Row(
            "memory-store",
            f"`orchestrator memory search` as an agent, {scope}, p50",
            c_w.p50,
            "ms",
            f_w.p50,
            "`orchestrator --version`",
            "<= 100 ms",
            c_w.p50 <= 100,
            0,
        ),
        Row(
            "memory-store",
            f"memory add in the process, {scope}, p50",
            a_w.p50,
            "ms",
            None,
            "",
            "<= 5 ms",
            a_w.p50 <= 5,
            2,
        ),
        Row("memory-store", f"$memory rendering, {scope}, p50", r_w.p50, "ms", None, "", "<= 5 ms", r_w.p50 <= 5, 2),
    ]
    out.details += [
        f"search in the process (wall): {s_w.line('ms', 2)}; CPU: {s_c.line('ms', 2)}",
        f"search p50 per query (ms): {'; '.join(per_query)}",
        f"add in the process, checks and secret scan included (wall): {a_w.line('ms', 2)}; CPU: {a_c.line('ms', 2)}",
        f"$memory for builder (+ team), 450 lines / 32 KB, {len(shown.encode())} bytes rendered (wall): "
        f"{r_w.line('ms', 2)}; CPU: {r_c.line('ms', 2)}",
        f"CLI search as an agent (ORCHESTRATOR_ROLE/RUN_ID set), wall from spawn to exit: {c_w.line('ms', 0)}",
        f"for scale, `orchestrator --version`: {f_w.line('ms', 0)}",
        "load average at the start / end of this scenario: "
        + " ".join(f"{x:.2f}" for x in load0)
        + " / "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()),
    ]
    return out
