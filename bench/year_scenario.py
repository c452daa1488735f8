"""The year scenario: a busy team's year, compressed, read as fast as its first thousand memos.

**The team.** 4 roles handing memos to each other in reply chains of ten, about 80 a day for a year: 30,000
memos and runs. The project is started once with the real ``orchestrator up`` while it is new (as a team's
first day), which is where its memo index is marked complete; then every memo goes the way a real run takes
it, through the same code: written into its inbox as ``send`` writes it (``outbox``'s rendering and atomic
rename), claimed into ``active/`` with its front matter read and indexed (``memo_index.moved``), its run put on
record, started, its attempt recorded and ended as ``Store`` does for the loop, the breaker's link written, the
memo archived and indexed again, the journal entry appended (``journal.append_entry``). Only the agent process
is left out (``bench/run.py``'s throughput scenario measures that part), so a year is built in seconds rather
than the minutes 30,000 real runs take. The year is compressed into the last six days (as a replay of a
year is): every run is in ``history``'s default 7-day window, its hardest case. ``gc`` never runs.

**The commands.** At 1,000 memos (a copy of the project when it had 1,000) and at 30,000, each the median of
several runs, the two in turns: ``status --json`` (no orchestrator running: from the database), ``history``
(the table) and ``history --json`` (their defaults), ``trace`` of a memo in the newest chain, ``send`` with a
``--reply-to`` of an archived memo, and ``journal --last 20``. Target: ``status``, both ``history``, ``trace``
and ``send`` at 30,000 within 1.5x of their figure at 1,000.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
import time
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import Outcome, Row
from bench.harness import Orchestrator, child_env, command_seconds, orchestrator_command, wait_for

ROLES = ("r0", "r1", "r2", "r3")
CHAIN = 10
SIZES = (1_000, 30_000)
SMOKE_SIZES = (50, 200)
SPAN = timedelta(days=6)  # the compressed year: every run within history's default window
BODY = (
    "A memo of a typical size for a hand-off between two agents: a few lines of context, what to do, and where "
    "the result should go.\n"
)


class Year:
    """Builds the team's memos and runs through the orchestrator's own store, index and journal code."""

    def __init__(self, root: Path, total: int, now: datetime) -> None:
        from orchestrator.store import Store

        self.root = root
        self.store = Store(root / ".orchestrator" / "state.db")
        self.step = SPAN / total
        self.first = now - SPAN
        self.made = 0
        self.ids: list[str] = []

    def close(self) -> None:
        self.store.close()

    def grow(self, upto: int) -> None:
        """Memos and runs ``made`` .. ``upto``, committed every few hundred as the loop's batches are."""
        while self.made < upto:
            with self.store.batch():
                for _ in range(min(500, upto - self.made)):
                    self._one(self.made)
                    self.made += 1

    def _one(self, i: int) -> None:
        from orchestrator.continuity import journal
        from orchestrator.intake import memo_index
        from orchestrator.intake.memo import fit_name, parse_front_matter, read_head, render_memo, slug

        store, db = self.store, self.store.db
        role, sender = ROLES[i % len(ROLES)], ROLES[(i - 1) % len(ROLES)]
        written = self.first + self.step * i
        memo_id = format(int(written.timestamp() * 1000), "x")  # send's id: the millisecond clock in hex
        reply_to = self.ids[-1] if i % CHAIN else None
        subject = f"step {i % CHAIN + 1} of conversation {i // CHAIN}"
        header = {
            "id": memo_id,
            "subject": subject,
            "from": sender,
            "to": role,
            "created_at": written.isoformat(timespec="milliseconds"),
            "tags": [],
            "reply_to": reply_to,
        }
        folder = self.root / "memo" / role
        name = fit_name(f"{memo_id}-{slug(subject)}", ".md")
        inbox, active, archive = folder / "inbox" / name, folder / "active" / name, folder / "archive" / name
        # as write_atomically writes it (a hidden temporary renamed into the inbox) but without its fsync: the
        # year's 30,000 syncs are durability, not the shape of what the commands read, and cost minutes here
        hidden = inbox.with_name(fit_name(f".{name}", ".tmp"))
        hidden.write_text(render_memo(header, BODY), encoding="utf-8")
        hidden.rename(inbox)
        self.ids.append(memo_id)
        # the claim: renamed into active/, its front matter read, indexed, the breaker's link, the run on record
        claimed = written + timedelta(milliseconds=5)
        inbox.rename(active)
        head = parse_front_matter(read_head(active))
        memo_index.moved(db, inbox, active, claimed.timestamp(), head)
        db.execute(
            "INSERT OR REPLACE INTO memo_links (role, name, memo_id, reply_to, sender, written_ts, outcome) "
            "VALUES (?, ?, ?, ?, ?, ?, 'delivered')",
            (role, name, memo_id, reply_to, sender, written.timestamp()),
        )
        at = claimed.isoformat(timespec="milliseconds")
        run_id, seq = store.insert_run_numbered(
            True,
            role=role,
            backend="command",
            memos=[name],
            memo_ids=[memo_id],
            subject=head.subject,
            state="queued",
            attempt=1,
            created_at=at,
        )
        log = str(self.root / ".orchestrator" / "logs" / f"{run_id}-{role}.log")
        store.update_run(run_id, state="starting", started_at=at, log_path=log)
        store.record_attempt(run_id, 1, started_at=at, log_path=log)
        store.update_run(run_id, state="running", pid=100_000 + i % 1000)
        ended = claimed + timedelta(seconds=4)
        end = ended.isoformat(timespec="milliseconds")
        store.record_attempt(run_id, 1, ended_at=end, exit_code=0, outcome="succeeded")
        active.rename(archive)
        memo_index.moved(db, active, archive, ended.timestamp())
        store.update_run(run_id, state="succeeded", ended_at=end, exit_code=0, memos=[name])
        hhmm = (claimed.strftime("%H:%M"), ended.strftime("%H:%M"))
        text = "\n".join(
            [
                journal.marker(run_id, 1, seq, "succeeded", *hhmm),
                f"## Run {seq} ({hhmm[0]}-{hhmm[1]}, succeeded)",
                "",
                f"- Run id {run_id}, attempt 1",
                f'- Memo: {memo_id} "{subject}"',
                "",
            ]
        )
        journal.append_entry(folder / "journal", ended.date(), run_id, 1, text, since=claimed.date())


def _first_start(ctx: Any, project: Any) -> None:
    """The real ``up`` on the new project, until its memo index is complete (a team's first day)."""
    orch = Orchestrator(project).start()
    try:

        def complete() -> bool:
            try:
                db = sqlite3.connect(f"file:{project.root / '.orchestrator' / 'state.db'}?mode=ro", uri=True)
            except sqlite3.Error:  # not made yet
                return False
            try:
                return db.execute("SELECT 1 FROM meta WHERE key = 'memo_index'").fetchone() is not None
            except sqlite3.Error:
                return False
            finally:
                db.close()

        wait_for(lambda: (orch.check_alive(), complete())[1], 60, "the memo index marked complete by up")
    finally:
        orch.stop()


FIGURES = (
    ("status", "`status --json`, no orchestrator running", True),
    ("history", "`history` (the table, its default)", True),
    ("history-json", "`history --json` (its default)", True),
    ("trace", "`trace` of a memo in the newest chain", True),
    ("send", "`send --reply-to` an archived memo", True),
    ("journal", "`journal --last 20`", False),
)


def year(ctx: Any) -> Any:
    """The ``year`` scenario (see the module docstring)."""
    smoke = ctx.sizes.idle_window < 60
    small, large = SMOKE_SIZES if smoke else SIZES
    samples = 1 if smoke else 5
    out = Outcome("year")
    project = ctx.project("year")
    project.configure({role: {} for role in ROLES}, limits={"pair_rate": "off"})
    _first_start(ctx, project)
    t0 = time.monotonic()
    built = Year(project.root, large, datetime.now().astimezone())
    try:
        built.grow(small)
        built.store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the copy is the database file as it stands
        copy = ctx.project(f"year-{small}")
        shutil.copytree(project.root, copy.root, symlinks=True, dirs_exist_ok=True)
        (copy.root / "memo" / ".send.lock").unlink(missing_ok=True)
        built.grow(large)
        ids = list(built.ids)
    finally:
        built.close()
    took = time.monotonic() - t0
    ctx.say(f"year: {large:,} memos and runs built through the store and index code in {took:.1f} s")
    out.details.append(
        f"{large:,} memos and runs (4 roles, chains of {CHAIN}, over the last {SPAN.days} days) built in {took:.0f} s "
        f"through outbox, memo_index, Store and journal code; the project started once by `up` while new"
    )
    base = orchestrator_command()
    places: dict[int, tuple[Path, str, dict[str, str]]] = {}
    for count, place in ((small, copy), (large, project)):
        newest = (count - 1) // CHAIN * CHAIN - CHAIN  # the newest whole chain
        places[count] = (place.root, ids[newest + CHAIN // 2], child_env(place.record))
    series: dict[int, dict[str, list[float]]] = {n: {name: [] for name, _, _ in FIGURES} for n in (small, large)}
    version: list[float] = []
    for count in (small, large):  # the right answers, once
        root, target, env = places[count]
        args = ["--root", str(root)]

        def paged(text: str, count: int = count) -> None:
            report = json.loads(text)
            if len(report["runs"]) != min(50, count) or report["totals"]["runs"] < count - 2:
                raise AssertionError(f"history shows {len(report['runs'])} of {report['totals']['runs']} runs")

        def chain(text: str) -> None:
            if text.count('"id": "') < CHAIN:
                raise AssertionError(f"trace shows fewer than the chain of {CHAIN}: {text[:300]}")

        command_seconds([*base, "history", "--json", *args], env, paged)
        command_seconds([*base, "trace", target, "--json", *args], env, chain)
    for _ in range(samples):
        for count in (small, large):
            root, target, env = places[count]
            args = ["--root", str(root)]
            got = series[count]
            version.append(command_seconds([*base, "--version"], env))
            got["status"].append(command_seconds([*base, "status", "--json", *args], env))
            got["history"].append(command_seconds([*base, "history", *args], env))
            got["history-json"].append(command_seconds([*base, "history", "--json", *args], env))
            got["trace"].append(command_seconds([*base, "trace", target, *args], env))
            reply = [*base, "send", "--to", "r1", "--reply-to", target, "--strict", "the next step", *args]
            got["send"].append(command_seconds(reply, env))
            got["journal"].append(command_seconds([*base, "journal", "--last", "20", *args], env))
    figures = {n: {name: statistics.median(values) for name, values in series[n].items()} for n in series}
    for count in (small, large):
        out.details.append(
            f"{count:,} memos: "
            + ", ".join(
                f"{name} {1000 * min(v):.0f}-{1000 * max(v):.0f} ms (n={len(v)})" for name, v in series[count].items()
            )
        )
    out.details.append(f"`orchestrator --version`: median {1000 * statistics.median(version):.0f} ms")
    for name, what, targeted in FIGURES:
        value, before = figures[large][name], figures[small][name]
        out.rows.append(
            Row(
                "year",
                f"{what}, {large:,} memos (a year), p50",
                1000 * value,
                "ms",
                1000 * before,
                f"the same at {small:,}",
                "<= 1.5x" if targeted else "",
                value <= 1.5 * before if targeted else None,
                0,
            )
        )
    out.details.append(f"journal day files: {_journal_days(project.root)}")
    return out


def _journal_days(root: Path) -> str:
    days = sorted({p.stem for p in (root / "memo").glob("*/journal/*.md")})
    return f"{len(days)} day(s), {days[0] if days else '-'} to {days[-1] if days else '-'} ({date.today()})"
