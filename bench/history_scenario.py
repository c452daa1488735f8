"""The history scenario: a long record is read as fast as a short one, and what a year of it costs on disk.

**Speed.** Two projects, one with 1,000 and one with 100,000 runs and memos on record, generated directly
into the database and the folders as the orchestrator leaves them (a run row with its attempt, its memo
rows, the breaker's link, the memo index; each memo a file in its role's ``archive/``): 4 roles woken once
an hour each (96 runs a day, so the smaller record is ten days long and the larger one almost three years,
past the default ``runs: 400d``, as with ``runs: keep``), the memos in reply chains of ten. On each, the
real commands, each the median of several runs: ``trace`` of a memo in the newest chain, ``history --json``
(its default: the last 7 days), ``status --json`` (no orchestrator running: from the database) and ``up``'s
start-up to its first agent (one memo waiting). Target: each at 100,000 within 1.5x of its figure at 1,000,
and ``trace`` at most 100 ms above ``orchestrator --version``, measured in the same run.

**Disk.** Real runs of the stand-in agent (``tests/agents/stand_in.py``, command backend; and, with
claude-agent-sdk installed, sdk runs on the fake Claude CLI of the tests for transcripts) through ``up``:
what each run leaves (log file, database rows, journal entry, archived memo, transcript folder), in bytes
as written and as allocated on this file system, extrapolated to a year of the same 96 runs a day with
the default retention (logs 30 days, transcripts 90, records 400, memos kept).
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import Outcome, Row
from bench.harness import (
    Orchestrator,
    child_env,
    command_seconds,
    fill_inbox,
    memo_text,
    orchestrator_command,
    wait_for,
)

HERE = Path(__file__).resolve().parent
ROLES = ("r0", "r1", "r2", "r3")
PER_DAY = 96
CHAIN = 10
SIZES = (1_000, 100_000)
SMOKE_SIZES = (100, 1_000)
DISK_MEMOS = 200  # real runs of the stand-in agent for the bytes per run (smoke: 20)
SDK_RUNS = 10
BLOCK = 4096  # the allocation unit the journal estimate rounds a day's file up to


def _memo(memo_id: str, role: str, sender: str, created: str, reply_to: str | None) -> str:
    reply = f"reply_to: {reply_to}\n" if reply_to else ""
    return (
        f"---\nid: {memo_id}\nsubject: step of conversation {memo_id}\nfrom: {sender}\nto: {role}\n"
        f"created_at: {created}\n{reply}---\n\nA memo of a typical size for a hand-off between two agents: a few "
        "lines of context, what to do, and where the result should go.\n"
    )


def generate(root: Path, count: int, now: datetime) -> str:
    """``count`` finished runs and their memos, the newest ending now; returns the id of a memo to trace."""
    from orchestrator.schedule import records
    from orchestrator.store import Store
    from orchestrator.supervisor import breaker

    state = root / ".orchestrator"
    store = Store(state / "state.db")  # the schema, as the orchestrator and its features make it
    breaker.ensure_tables(store.db)
    records.ensure_tables(store.db)
    store.close()
    for role in ROLES:
        (root / "memo" / role / "archive").mkdir(parents=True, exist_ok=True)
    step = 86400.0 / PER_DAY
    runs, attempts, run_memos, links, index = [], [], [], [], []
    for i in range(count):
        role, sender = ROLES[i % len(ROLES)], ROLES[(i - 1) % len(ROLES)]
        memo_id = f"h{i:06d}"
        reply_to = f"h{i - 1:06d}" if i % CHAIN else None
        name = f"{memo_id}-step.md"
        started = now - timedelta(seconds=(count - i) * step)
        ended = started + timedelta(seconds=5)
        s, e = started.isoformat(timespec="milliseconds"), ended.isoformat(timespec="milliseconds")
        log = str(state / "logs" / f"{i + 1}-{role}.log")
        seq = i // len(ROLES) + 1  # the roles take turns
        runs.append(
            (
                i + 1,
                role,
                json.dumps([name]),
                json.dumps([memo_id]),
                f"step {memo_id}",
                "succeeded",
                s,
                s,
                e,
                0,
                log,
                seq,
            )
        )
        attempts.append((i + 1, 1, s, e, 0, "succeeded", log))
        run_memos.append((role, name, i + 1))
        links.append((role, name, memo_id, reply_to, sender, started.timestamp(), "delivered"))
        index.append((role, "archive", name, memo_id, reply_to, ended.timestamp()))
        path = root / "memo" / role / "archive" / name
        path.write_text(_memo(memo_id, role, sender, s, reply_to), encoding="utf-8")
    db = sqlite3.connect(state / "state.db", isolation_level=None)
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO runs (run_id, role, memos, memo_ids, subject, state, created_at, started_at, ended_at, "
        "exit_code, log_path, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        runs,
    )
    db.executemany(
        "INSERT INTO attempts (run_id, attempt, started_at, ended_at, exit_code, outcome, log_path) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        attempts,
    )
    db.executemany("INSERT OR IGNORE INTO run_memos (role, name, run_id) VALUES (?, ?, ?)", run_memos)
    db.executemany(
        "INSERT OR REPLACE INTO memo_links (role, name, memo_id, reply_to, sender, written_ts, outcome) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        links,
    )
    db.executemany(
        "INSERT OR REPLACE INTO memo_index (role, folder, name, memo_id, reply_to, moved_at) VALUES (?, ?, ?, ?, ?, ?)",
        index,
    )
    stamp = now.isoformat(timespec="milliseconds")
    for key in ("memo_index", "retention_last_pass"):  # built, as a running orchestrator leaves it
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, stamp))
    db.execute("COMMIT")
    db.close()
    newest_chain = (count - 1) // CHAIN * CHAIN - CHAIN  # the newest whole chain
    return f"h{newest_chain + CHAIN // 2:06d}"


def _first_agent(ctx: Any, project: Any, samples: int) -> list[float]:
    """Launch -> first agent start, with one memo waiting, ``samples`` times (a new memo each time)."""

    took = []
    inbox = project.folder("r0", "inbox")
    for _ in range(samples):
        fill_inbox(inbox, [f"wake-{time.time_ns()}.md"], "r0")
        project.record.unlink(missing_ok=True)
        orch = Orchestrator(project).start()
        try:
            rec = wait_for(lambda o=orch: (o.check_alive(), project.records())[1], 60, "the first agent start")
            took.append((min(r.ns for r in rec) - orch.launched_ns) / 1e9)
        finally:
            orch.stop()
    return took


def _speed(ctx: Any, sizes: tuple[int, int], samples: int, out: Any) -> None:

    base = orchestrator_command()
    version: list[float] = []
    places: dict[int, tuple[Any, str, dict[str, str], list[str]]] = {}
    for count in sizes:
        project = ctx.project(f"history-{count}")
        project.configure({role: {} for role in ROLES})
        t0 = time.monotonic()
        target = generate(project.root, count, datetime.now().astimezone())
        ctx.say(f"history: {count:,} runs and memos generated in {time.monotonic() - t0:.1f} s")
        env, root = child_env(project.record), ["--root", str(project.root)]

        def whole_chain(text: str) -> None:
            nodes = text.count('"id": "h')
            if nodes < CHAIN:
                raise AssertionError(f"trace shows {nodes} memos, not the chain of {CHAIN}")

        def last_week(text: str, count: int = count) -> None:
            report = json.loads(text)
            shown = report["totals"]["runs"]  # the page is the newest 50; the totals are of the whole window
            if abs(shown - min(count, 7 * PER_DAY)) > 2 or len(report["runs"]) != min(50, shown):  # the window moves on
                raise AssertionError(f"history counts {shown} runs, not the last 7 days' {min(count, 7 * PER_DAY)}")

        command_seconds([*base, "trace", target, "--json", *root], env, whole_chain)  # the right answer, once
        command_seconds([*base, "history", "--json", *root], env, last_week)
        places[count] = (project, target, env, root)
    series: dict[int, dict[str, list[float]]] = {
        n: {"trace": [], "history": [], "status": [], "start-up": []} for n in sizes
    }
    for _ in range(samples):  # the two records in turns, so a change in the machine's load falls on both
        for count in sizes:
            project, target, env, root = places[count]
            got = series[count]
            version.append(command_seconds([*base, "--version"], env))
            got["trace"].append(command_seconds([*base, "trace", target, *root], env))
            got["history"].append(command_seconds([*base, "history", "--json", *root], env))
            got["status"].append(command_seconds([*base, "status", "--json", *root], env))
            got["start-up"] += _first_agent(ctx, project, 1)
    figures = {n: {name: statistics.median(values) for name, values in series[n].items()} for n in sizes}
    for count in sizes:
        out.details.append(
            f"{count:,} on record: "
            + ", ".join(
                f"{name} {1000 * min(v):.0f}-{1000 * max(v):.0f} ms (n={len(v)})" for name, v in series[count].items()
            )
        )
    small, large = sizes
    cli = statistics.median(version)
    out.details.append(f"`orchestrator --version`: median {1000 * cli:.0f} ms over {len(version)} runs")
    for name, what in (
        ("trace", "`trace` of a memo in a chain of 10"),
        ("history", "`history --json` (default: the last 7 days)"),
        ("status", "`status --json`, no orchestrator running"),
        ("start-up", "`up`: launch -> first agent, one memo waiting"),
    ):
        value, before = figures[large][name], figures[small][name]
        ok = value <= 1.5 * before
        target = "<= 1.5x"
        if name == "trace":
            ok = ok and value - cli <= 0.100
            target = "<= 1.5x; <= --version + 100 ms"
        out.rows.append(
            Row(
                "history",
                f"{what}, {large:,} runs and memos on record, p50",
                1000 * value,
                "ms",
                1000 * before,
                f"the same at {small:,}",
                target,
                ok,
                0,
            )
        )
    out.rows.append(
        Row(
            "history",
            f"`trace` above `orchestrator --version`, {large:,} on record",
            1000 * (figures[large]["trace"] - cli),
            "ms",
            1000 * cli,
            "`orchestrator --version`",
            "<= 100 ms",
            figures[large]["trace"] - cli <= 0.100,
            0,
        )
    )


# ------------------------------------------------------------------ disk
def _usage(paths: list[Path]) -> tuple[int, int]:
    """(bytes written, bytes allocated) of these files."""
    written = allocated = 0
    for path in paths:
        try:
            info = os.lstat(path)
        except OSError:
            continue
        written += info.st_size
        allocated += info.st_blocks * 512
    return written, allocated


def _files(folder: Path, pattern: str = "*") -> list[Path]:
    return [p for p in folder.rglob(pattern) if p.is_file()] if folder.exists() else []


def _db_bytes(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA page_count").fetchone()[0]) * int(db.execute("PRAGMA page_size").fetchone()[0])
    finally:
        db.close()


def _stand_in_runs(ctx: Any, memos: int) -> dict[str, float]:
    """Per run of the stand-in agent (command backend): log, database, journal and archived memo bytes."""

    project = ctx.project("history-disk")
    stand_in = [sys.executable, str(HERE.parent / "tests" / "agents" / "stand_in.py")]
    project.configure({role: {} for role in ROLES}, defaults={"command": stand_in})
    per_role = memos // len(ROLES)
    for role in ROLES:
        inbox = project.folder(role, "inbox")
        for i in range(per_role):
            (inbox / f"m{i:04d}.md").write_text(memo_text(i, role), encoding="utf-8")
    empty = project.root / "empty.db"
    from orchestrator.schedule import records
    from orchestrator.store import Store
    from orchestrator.supervisor import breaker

    store = Store(empty)  # every table the orchestrator and its features make, with no row
    breaker.ensure_tables(store.db)
    records.ensure_tables(store.db)
    store.close()
    orch = Orchestrator(project)
    orch.env_extra = {"STANDIN_RECORD": str(project.root / "stand_in.jsonl")}
    orch.start()
    try:
        done = lambda: sum(len(_files(project.folder(r, "archive"), "*.md")) for r in ROLES)  # noqa: E731
        wait_for(lambda: (orch.check_alive(), done() >= per_role * len(ROLES))[1], 300, "every memo archived")
        time.sleep(1.0)  # the last runs' records and journal entries
    finally:
        orch.stop()
    runs = per_role * len(ROLES)
    state = project.root / ".orchestrator"
    logs = _usage(_files(state / "logs"))
    archive = _usage([p for r in ROLES for p in _files(project.folder(r, "archive"), "*.md")])
    journal = _usage([p for r in ROLES for p in _files(project.folder(r, "journal"))])
    return {
        "runs": runs,
        "log_written": logs[0] / runs,
        "log_allocated": logs[1] / runs,
        "db": (_db_bytes(state / "state.db") - _db_bytes(empty)) / runs,
        "memo_written": archive[0] / runs,
        "memo_allocated": archive[1] / runs,
        "journal_written": journal[0] / runs,
        "orchestrator_log": _usage(_files(state, "orchestrator.log*"))[0] / runs,
    }


def _sdk_runs(ctx: Any, runs: int) -> dict[str, float] | None:
    """Per sdk run on the fake Claude CLI: the transcript folder's bytes (None without claude-agent-sdk)."""
    try:
        import claude_agent_sdk  # noqa: F401 - only whether it is there
    except ImportError:
        return None

    project = ctx.project("history-sdk")
    cli = project.root / "bin" / "fake-claude"
    cli.parent.mkdir(parents=True, exist_ok=True)
    cli.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE.parent / "tests" / "fake_claude.py"}" "$@"\n')
    cli.chmod(0o755)
    project.configure({"writer": {"backend": "sdk", "cli_path": str(cli)}}, max_concurrent=4)
    for i in range(runs):
        (project.folder("writer", "inbox") / f"s{i:03d}.md").write_text(f"write part {i}\n", encoding="utf-8")
    orch = Orchestrator(project).start()
    try:
        archive = project.folder("writer", "archive")
        wait_for(lambda: (orch.check_alive(), len(_files(archive, "*.md")) >= runs)[1], 300, "every sdk memo archived")
        time.sleep(1.0)
    finally:
        orch.stop()
    folders = [p for p in (project.root / ".orchestrator" / "runs").iterdir() if p.is_dir()]
    written, allocated = _usage([f for folder in folders for f in _files(folder)])
    return {"runs": runs, "written": written / runs, "allocated": allocated / runs}


def _disk(ctx: Any, smoke: bool, out: Any) -> None:

    got = _stand_in_runs(ctx, 8 if smoke else DISK_MEMOS)
    sdk = _sdk_runs(ctx, 1 if smoke else SDK_RUNS)
    mb = 1e6
    day_file = PER_DAY / len(ROLES) * got["journal_written"]  # a role's journal file holds its day's entries
    year = {
        "logs (30 days)": 30 * PER_DAY * got["log_allocated"],
        "records (400 days: a year's)": 365 * PER_DAY * got["db"],
        "archived memos (kept)": 365 * PER_DAY * got["memo_allocated"],
        "journal (kept)": 365 * len(ROLES) * -(-day_file // BLOCK) * BLOCK,
        "orchestrator.log (rotated at 10 MB, 5 kept)": min(60 * mb, 365 * PER_DAY * got["orchestrator_log"]),
    }
    transcripts = 90 * PER_DAY * sdk["allocated"] if sdk else None
    total = sum(year.values())
    out.rows.append(
        Row(
            "history",
            f"disk a year, default retention, {PER_DAY} command runs a day",
            total / mb,
            "MB",
            None,
            "",
            "",
            None,
            0,
        )
    )
    out.details.append(
        f"disk, measured on {got['runs']:.0f} real runs of tests/agents/stand_in.py (command backend) through `up`: "
        f"per run a log of {got['log_written']:.0f} B written ({got['log_allocated']:.0f} B allocated), "
        f"{got['db']:.0f} B of database (every table, page-level, against an empty database), an archived memo of "
        f"{got['memo_written']:.0f} B ({got['memo_allocated']:.0f} B allocated), {got['journal_written']:.0f} B "
        f"of journal and {got['orchestrator_log']:.0f} B of orchestrator.log"
    )
    if sdk:
        out.details.append(
            f"sdk runs on the fake Claude CLI ({sdk['runs']:.0f}): a transcript folder of {sdk['written']:.0f} B "
            f"written ({sdk['allocated']:.0f} B allocated) a run; a real session's transcript is larger (it holds "
            f"every message): 90 days of {PER_DAY} such runs a day is {transcripts / mb if transcripts else 0:.0f} MB"
        )
    out.details.append(
        f"a year of {PER_DAY} runs a day with the defaults: "
        + ", ".join(f"{name} {value / mb:.0f} MB" for name, value in year.items())
        + f"; {total / mb:.0f} MB in all, of which the memos and the journal (the user's, kept) grow every year"
    )


def history(ctx: Any) -> Any:
    """The ``history`` scenario (see the module docstring)."""

    smoke = ctx.sizes.idle_window < 60
    out = Outcome("history")
    _speed(ctx, SMOKE_SIZES if smoke else SIZES, 1 if smoke else 9, out)
    _disk(ctx, smoke, out)
    return out
