"""Cancel, interrupt and tell: finding the memo a person means, and stopping its work at any stage.

A memo may be named by its front-matter id, its file name, its file name
without ``.md``, or a path. Queued memos never run; a retry that is waited for
never happens; a running agent's whole tree is stopped with the kill ladder.
The command answers only when the work is stopped for good.
"""

from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.intake import notices
from orchestrator.core.errors import AmbiguousMemoError, ControlError, MemoFinishedError, UnknownMemoError, UsageError
from orchestrator.intake.memo import ACTIVE, CANCELLED, INBOX, is_memo_name, move_memo, parse_front_matter
from orchestrator.core.run import MemoRef, Run
from orchestrator.core.states import RunState
from orchestrator.store import now_iso

if TYPE_CHECKING:
    from orchestrator.supervisor.loop import Supervisor

HEADER_BYTES = 16 * 1024


@dataclass
class Candidate:
    """A memo that matches: either part of a live run, or waiting in an inbox."""

    role: str
    name: str
    path: Path
    memo_id: str | None
    run: Run | None = None

    def describe(self) -> str:
        state = self.run.state.value if self.run else "queued"
        return f"{self.role}/{self.name} (id {self.memo_id or '-'}, {state})"


def _read_head(path: Path) -> str:
    """The start of a regular file; never opens a FIFO or device (that could block the loop)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return ""
        with open(path, "rb") as handle:
            return handle.read(HEADER_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def _read_id(path: Path) -> str | None:
    return parse_front_matter(_read_head(path)).id


def _matches(query: str, qpath: Path | None, name: str, path: Path, memo_id: str | None) -> bool:
    if qpath is not None:
        # a path names one role's memo: where it was dropped (inbox/) or where it runs (active/), never its namesake
        # in another role
        same_role = qpath.parent.parent == path.parent.parent
        return path == qpath or (path.name == qpath.name and same_role and qpath.parent.name in ("inbox", "active"))
    return query in (name, name.removesuffix(".md")) or (memo_id is not None and query == memo_id)


def find(sup: Supervisor, query: str) -> list[Candidate]:
    """Every live or waiting memo the query names, runs first."""
    qpath = Path(query) if ("/" in query or query.endswith(".md")) and os.path.isabs(query) else None
    found: list[Candidate] = []
    seen_runs: set[int] = set()
    for run in sup.runs.values():
        for memo in run.memos:
            if _matches(query, qpath, memo.name, memo.path, memo.memo_id) and run.run_id not in seen_runs:
                seen_runs.add(run.run_id)
                found.append(Candidate(run.role.name, memo.name, memo.path, memo.memo_id, run))
    for role in sup.config.roles:
        for path in _inbox_files(sup, role):
            memo_id = _read_id(path)  # read once: it is matched and reported
            if _matches(query, qpath, path.name, path, memo_id):
                found.append(Candidate(role, path.name, path, memo_id))
    return found


def _inbox_files(sup: Supervisor, role: str) -> list[Path]:
    inbox = sup.config.role_dir(role) / INBOX
    try:
        return sorted(Path(e.path) for e in os.scandir(inbox) if is_memo_name(e.name))
    except FileNotFoundError:
        return []


def _finished_message(sup: Supervisor, query: str) -> str | None:
    """How a memo that matches no live work ended, from the database."""
    base = query.rsplit("/", 1)[-1]
    rows = sup.store.db.execute(
        "SELECT runs.* FROM runs WHERE EXISTS (SELECT 1 FROM json_each(runs.memos) WHERE value IN (?, ?)) "
        "OR EXISTS (SELECT 1 FROM json_each(runs.memo_ids) WHERE value = ?) ORDER BY run_id DESC LIMIT 1",
        (base, base + ".md", query),
    ).fetchone()
    if rows is None:
        return None
    row = dict(rows)
    ended = row.get("ended_at") or "?"
    why = f" ({row['reason']})" if row.get("reason") else ""
    return f"memo {query} already finished: {row['state']} at {ended} in run {row['run_id']} of role {row['role']}{why}"


async def cancel(sup: Supervisor, args: dict[str, Any]) -> dict[str, Any]:
    """Cancel one memo (``memo``), every match (``all``), or all of a role's work (``role``)."""
    who = str(args.get("who") or "unknown")
    reason = str(args.get("reason") or "")
    if args.get("role"):
        role = str(args["role"])
        if role not in sup.config.roles:
            raise UnknownMemoError(f"no role {role!r} in roles.yaml ({', '.join(sup.config.roles)})")
        targets = [c for c in _role_candidates(sup, role)]
        if not targets:
            return {"cancelled": [], "role": role, "message": f"role {role} has no queued or running work"}
    else:
        query = str(args.get("memo") or "")
        if not query:
            raise UsageError("name a memo to cancel (its id, file name or path), or use --role ROLE")
        targets = find(sup, query)
        if not targets:
            finished = _finished_message(sup, query)
            if finished:
                raise MemoFinishedError(finished)
            raise UnknownMemoError(f"no queued or running memo matches {query!r}; `orchestrator status` lists them")
        distinct = {(c.role, c.name, c.run.run_id if c.run else None) for c in targets}
        if len(distinct) > 1 and not args.get("all"):
            listing = "; ".join(c.describe() for c in targets)
            raise AmbiguousMemoError(
                f"{query!r} matches {len(targets)} memos: {listing}. Name one by file name or path, or use --all"
            )
    # queued memos first, before the loop runs anything else: a slot freed meanwhile (even by this very cancel's
    # kill ladder) would otherwise let the scheduler claim a memo that was found queued and is about to be cancelled
    queued = {id(c): _cancel_queued(sup, c, who, reason) for c in targets if c.run is None}
    live = iter(await asyncio.gather(*(cancel_candidate(sup, c, who, reason) for c in targets if c.run is not None)))
    results = [queued[id(c)] if c.run is None else next(live) for c in targets]
    if len(results) == 1 and not args.get("role"):
        return results[0]
    return {"cancelled": list(results), "count": len(results)}


def _role_candidates(sup: Supervisor, role: str) -> list[Candidate]:
    out = [
        Candidate(role, run.memos[0].name, run.memos[0].path, run.memos[0].memo_id, run)
        for run in sup.runs.values()
        if run.role.name == role
    ]
    out += [Candidate(role, p.name, p, _read_id(p)) for p in _inbox_files(sup, role)]
    return out


async def cancel_candidate(sup: Supervisor, cand: Candidate, who: str, reason: str) -> dict[str, Any]:
    """Stop one live or retry-waiting run (queued memos go through ``_cancel_queued``)."""
    run = cand.run
    assert run is not None
    previous = run.state
    if previous is RunState.RETRY_WAIT:
        run.cancel_timers()
        queue = sup.retry_ready[run.role.name]
        if run in queue:
            queue.remove(run)
        return record_cancel(sup, run, previous, who, reason, None)
    if previous.finished:
        raise MemoFinishedError(f"memo {cand.name} already finished: {previous.value}")
    if previous is RunState.CANCELLING:
        while run.stopping is None and run.state is RunState.CANCELLING:
            await asyncio.sleep(0.01)  # the first cancel is still ending an SDK agent's turn
        if run.stopping is not None:
            await run.stopping
        return {**(run.stop_result or {}), "memo": cand.name, "role": run.role.name, "state": "cancelled",
                "previous_state": "cancelling", "note": "it was already being cancelled"}  # fmt: skip
    sup._transition(run, RunState.CANCELLING, reason=_reason_line(who, reason))  # on record, should we die mid-way
    sup.console.line(f"cancelling {run.label} (run {run.run_id}, was {previous.value}) for {who}", role=run.role.name)
    agent = run.agent
    if agent is not None and agent.backend == "sdk" and run.stopping is None:
        await _interrupt_first(sup, run)
    report = await sup._ensure_ladder(run, run.role.grace)
    if run.state is RunState.CANCELLING:
        return record_cancel(sup, run, previous, who, reason, report)
    return {**report, "memo": cand.name, "role": run.role.name, "state": run.state.value, "previous_state": previous.value}


async def _interrupt_first(sup: Supervisor, run: Run) -> None:
    """SDK runs: end the turn cleanly, and fall back to the kill ladder after the grace period."""
    agent = run.agent
    assert agent is not None
    try:
        await agent.interrupt()  # type: ignore[call-arg]
    except ControlError:
        if not getattr(agent, "closing", False):
            return
        # its last turn is over and the CLI is saving the session: let it finish within the grace period
    if agent.waiter is not None:
        try:
            await asyncio.wait_for(asyncio.shield(agent.waiter), run.role.grace)
        except asyncio.TimeoutError:
            sup.console.line(f"run {run.run_id}: no end of turn within {run.role.grace:g}s; using the kill ladder",
                             role=run.role.name)  # fmt: skip


def _cancel_queued(sup: Supervisor, cand: Candidate, who: str, reason: str) -> dict[str, Any]:
    role = sup.config.roles[cand.role]
    sup.intake.drop(cand.role, cand.path)
    try:
        target = move_memo(cand.path, sup.config.role_dir(cand.role) / CANCELLED)
    except FileNotFoundError:
        raise UnknownMemoError(f"memo {cand.name} left the inbox before it could be cancelled") from None
    header = parse_front_matter(_read_head(target))
    run_id = sup.store.insert_run(
        role=role.name, backend=role.backend, memos=[target.name], memo_ids=[header.id], subject=header.subject,
        state=RunState.CANCELLED.value, attempt=0, ended_at=now_iso(), reason=_reason_line(who, reason),
    )  # fmt: skip
    run = Run(run_id=run_id, role=role, memos=[MemoRef(target.name, target, header.id, header.subject, header.reply_to, header.sender)],
              seq=0, attempt=0, state=RunState.CANCELLED)  # fmt: skip
    return _record(sup, run, [target], RunState.QUEUED, who, reason, None, None)


def _reason_line(who: str, reason: str) -> str:
    return f"cancelled by {who}" + (f": {reason}" if reason else "")


def record_cancel(sup: Supervisor, run: Run, previous: RunState, who: str, reason: str,
                  report: dict[str, Any] | None) -> dict[str, Any]:  # fmt: skip
    """A live or retry-waiting run is stopped: memos to cancelled/, the decision on record, the coordinator told."""
    # how long the agent had run: the current attempt, or the last one for a run waiting for its retry
    ran = run.elapsed() if previous.live and run.started_mono is not None else run.last_ran
    sup._release_slot(run)
    moved = sup._move_memos(run, CANCELLED)
    sup.store.forget_memo_attempts(run.role.name, [m.name for m in run.memos])
    sup._finish(run, RunState.CANCELLED, exit_code=run.exit_codes[-1] if run.exit_codes else None,
                reason=_reason_line(who, reason))  # fmt: skip
    result = _record(sup, run, moved, previous, who, reason, report, ran)
    sup._schedule()
    sup._maybe_done()
    return result


def _record(sup: Supervisor, run: Run, moved: list[Path], previous: RunState, who: str, reason: str,
            report: dict[str, Any] | None, ran: float | None) -> dict[str, Any]:  # fmt: skip
    when = now_iso()
    pids = list((report or {}).get("pids", []))
    notice = None
    first = run.memos[0]
    # the coordinator is told even of its own cancelled work (its inbox is its memory), but never of a notice's
    notify = sup.config.notify
    if notify and first.sender != "orchestrator":
        notice = notices.write_cancel_notice(
            sup.config, sup.config.notify, run, moved, who=who, reason=reason, previous=previous.value,
            ran_seconds=ran, pids=pids, when=when,
        )  # fmt: skip
    for memo in run.memos:
        sup.store.record_cancellation(
            run_id=run.run_id, role=run.role.name, memo=memo.name, memo_id=memo.memo_id or memo.name.removesuffix(".md"),
            subject=memo.subject, cancelled_at=when, who=who, reason=reason, previous_state=previous.value, pids=pids,
            seconds=(report or {}).get("seconds", 0.0), ran_seconds=ran, log_path=str(run.log_path) if run.log_path else None,
            notice_path=str(notice) if notice else None,
        )  # fmt: skip
    sup.console.line(
        f"cancelled {run.label} (was {previous.value}, run {run.run_id}) by {who}"
        + (f": {reason}" if reason else "")
        + (f"; {len(pids)} process(es) ended in {(report or {}).get('seconds', 0):.2f}s" if report else ""),
        role=run.role.name,
    )
    return {
        "memo": first.name,
        "memo_id": first.memo_id,
        "role": run.role.name,
        "run_id": run.run_id,
        "state": RunState.CANCELLED.value,
        "previous_state": previous.value,
        "pids": pids,
        "seconds": (report or {}).get("seconds", 0.0),
        "escalated": (report or {}).get("escalated", False),
        "survivors": (report or {}).get("survivors", []),
        "memos": [m.name for m in run.memos],
        "moved_to": [str(p) for p in moved],
        "notice": str(notice) if notice else None,
        "reason": reason,
    }


async def live_control(sup: Supervisor, op: str, args: dict[str, Any]) -> dict[str, Any]:
    """``interrupt`` and ``tell``: talk to a running agent's session."""
    query = str(args.get("memo") or "")
    candidates = [c for c in find(sup, query) if c.run is not None] if query else []
    if not candidates:
        finished = _finished_message(sup, query) if query else None
        if finished:
            raise MemoFinishedError(finished)
        raise UnknownMemoError(f"no running memo matches {query!r}")
    if len({c.run.run_id for c in candidates if c.run}) > 1:
        raise AmbiguousMemoError(f"{query!r} matches several runs: " + "; ".join(c.describe() for c in candidates))
    run = candidates[0].run
    assert run is not None
    if run.state is not RunState.RUNNING:
        raise ControlError(f"memo {candidates[0].name} is {run.state.value}, not running; nothing to {op}")
    if run.agent is None:
        raise ControlError(f"memo {candidates[0].name}'s agent is still starting; nothing to {op} yet, try again")
    agent = run.agent
    if op == "tell":
        text = str(args.get("text") or "")
        if not text.strip():
            raise UsageError("nothing to tell: give the text as an argument or on standard input")
        await agent.tell(text)
        sup.console.line(f"told {run.label} (run {run.run_id}): {text.splitlines()[0][:80]}", role=run.role.name)
        return {"memo": candidates[0].name, "run_id": run.run_id, "role": run.role.name, "state": run.state.value}
    keep = bool(args.get("keep"))
    if not keep:
        run.interrupt_request = {"who": str(args.get("who") or "unknown"), "reason": str(args.get("reason") or "interrupted")}
    try:
        await agent.interrupt(keep=keep)
    except ControlError:
        run.interrupt_request = None  # refused: nothing was interrupted, so its exit must not count as one
        raise
    sup.console.line(f"interrupted {run.label} (run {run.run_id})", role=run.role.name)
    if keep:
        return {"memo": candidates[0].name, "run_id": run.run_id, "role": run.role.name, "state": run.state.value}
    waiter = agent.waiter
    if waiter is not None:
        try:
            await asyncio.wait_for(asyncio.shield(waiter), run.role.grace + 5)
        except asyncio.TimeoutError:
            pass
    await asyncio.sleep(0)  # let the exit event be handled
    row = sup.store.run(run.run_id) or {}
    return {"memo": candidates[0].name, "run_id": run.run_id, "role": run.role.name, "state": row.get("state", run.state.value)}


def finish_after_restart(sup: Supervisor, row: dict[str, Any], report_pids: list[int]) -> None:
    """A cancel was under way when the orchestrator died: the person's decision still stands, so finish it."""
    role = sup.config.roles[row["role"]]
    folder = sup.config.role_dir(role.name) / ACTIVE
    ids = row.get("memo_ids") or []
    memos = [
        MemoRef(name, folder / name, ids[i] if i < len(ids) else None, row.get("subject") if i == 0 else None)
        for i, name in enumerate(row["memos"])
    ]
    run = Run(run_id=row["run_id"], role=role, memos=memos, seq=0, attempt=row["attempt"], state=RunState.CANCELLING)
    run.log_path = Path(row["log_path"]) if row.get("log_path") else None
    moved = []
    for memo in memos:
        try:
            memo.path = move_memo(memo.path, sup.config.role_dir(role.name) / CANCELLED)
        except FileNotFoundError:
            continue  # not in active/ any more: nothing to move
        memo.name = memo.path.name
        moved.append(memo.path)
    sup.store.forget_memo_attempts(role.name, row["memos"])
    reason = f"{row.get('reason') or 'cancelled'} (finished at restart: the orchestrator stopped during the cancel)"
    sup.store.update_run(run.run_id, state=RunState.CANCELLED.value, ended_at=now_iso(), reason=reason)
    _record(sup, run, moved, RunState.CANCELLING, "the orchestrator, at restart", reason, {"pids": report_pids}, None)
