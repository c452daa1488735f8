"""Start-up reconciliation of the database with the folders, after an orchestrator died.

Runs before the watcher starts. First the ``Adopter`` (``adoption``) takes back
every run it can: a ``command`` run whose keeper recorded its agent's exit, or
whose agent still lives, goes back into the table (``recovery: adopt``, the
default). The agents of the other runs that still live (SDK runners, agents
started without a keeper, ``recovery: restart``) are **stopped** with the kill
ladder; their runs are rebuilt from the records and finished through the
lifecycle like any other, so their memos go back to ``inbox/`` with the
attempt count kept and run again. So no two agents ever work on one memo at once, and nothing in
``active/`` is forgotten. A run that was being cancelled is finished as
cancelled: the person's decision outlives the orchestrator.

On a Ray cluster the adopter re-attaches to the wrappers of the unfinished runs;
those it cannot take back are failed attempts as above, and every other attempt of
this project still on the cluster is halted before recovery ends (``Adopter.halt_others``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil

from orchestrator.agents import procs
from orchestrator.agents.proc_table import read_marks
from orchestrator.config import Config, Role
from orchestrator.console import Console
from orchestrator.core.run import CancelOrder, MemoRef
from orchestrator.core.states import STOP_ENDS, UNFINISHED, RunState
from orchestrator.intake import memo_index
from orchestrator.intake.memo import ACTIVE, INBOX, is_memo_name, move_memo
from orchestrator.store import Store
from orchestrator.supervisor.adoption import Adopter
from orchestrator.supervisor.lifecycle import Lifecycle, active_ref

DEFAULT_GRACE = 10.0
AT_RESTART = "the orchestrator, at restart"


def _ancestors() -> set[int]:
    out = {os.getpid()}
    try:
        for parent in psutil.Process().parents():
            out.add(parent.pid)
    except psutil.Error:
        pass
    return out


def orphan_run_ids(project_root: str) -> set[int]:
    """Run ids carried by live processes of this project root that are not ours. Their marks are read as every stop
    reads them (``read_marks``): a Ray agent's carry its project's key too, so they are never this root's alone (its
    wrappers and Ray's names find it)."""
    skip = _ancestors()
    found: set[int] = set()
    for pid in procs.all_pids():
        marks = None if pid in skip else read_marks(pid)
        if marks is not None and marks.root == project_root and marks.run_id.isdigit():
            found.add(int(marks.run_id))
    return found


async def recover(
    config: Config, store: Store, console: Console, lifecycle: Lifecycle, adopter: Adopter | None = None
) -> None:
    """Adopt what ``adopter`` can; stop other leftover agents, finish their runs, and empty every active/ folder."""
    root = str(config.root)
    handled: set[int] = set()
    for row in store.runs_in_states(s.value for s in UNFINISHED):
        role = config.roles.get(row["role"])
        if adopter is not None and await adopter.adopt(row, role, _memo_refs(config, row)):
            handled.add(row["run_id"])
            continue
        grace = role.grace if role else DEFAULT_GRACE
        ref = procs.ProcRef(row["pid"], row["create_time"]) if row.get("pid") and row.get("create_time") else None
        target = procs.Target(ref, row["pid"] if ref and ref.process() else None, row["run_id"], root)
        found = procs.find_tree(target)
        report = await procs.stop_tree(target, grace, found=found) if found else procs.KillReport()
        handled.add(row["run_id"])
        _finish_row(config, store, console, lifecycle, row, role, report)
    if adopter is not None:
        await adopter.halt_others()
    for run_id in orphan_run_ids(root) - handled:
        report = await procs.stop_tree(procs.Target(None, None, run_id, root), DEFAULT_GRACE)
        console.line(f"recovery: stopped {len(report.pids)} leftover process(es) of run {run_id}: {report.pids}")
    await lifecycle.settling.drained()  # the ends that wait for their work (a workspace's set-aside) are over
    for name in config.roles:
        kept = adopter.kept.get(name, set()) if adopter else set()
        kept |= {m.name for run in lifecycle.runs.values() if run.role.name == name for m in run.memos}
        _empty_active(config, store, console, name, kept, lifecycle.clock.now().timestamp())
    if adopter is not None:
        adopter.release()


def _memo_refs(config: Config, row: dict[str, Any]) -> list[MemoRef]:
    ids = row.get("memo_ids") or []
    return [
        active_ref(config, row["role"], name, ids[i] if i < len(ids) else None, row.get("subject") if i == 0 else None)
        for i, name in enumerate(row["memos"])
    ]


def _finish_row(
    config: Config,
    store: Store,
    console: Console,
    lifecycle: Lifecycle,
    row: dict[str, Any],
    role: Role | None,
    report: procs.KillReport,
) -> None:
    """Rebuild the run from its record and end it the one way runs end."""
    state = RunState(row["state"])
    memos = _memo_refs(config, row)
    run = lifecycle.rebuild(row, role or Role.model_validate({"name": row["role"], "prompt": "-"}), memos, state)
    lifecycle.adopt(run)
    end = STOP_ENDS[state].at_restart if state in STOP_ENDS and role is not None else RunState.RETURNED
    if end is RunState.CANCELLED:
        reason = f"{row.get('reason') or 'cancelled'} (finished at restart: the orchestrator stopped during the cancel)"
        lifecycle.stopped(run, report)
        lifecycle.finish(run, RunState.CANCELLED, reason=reason, order=CancelOrder(AT_RESTART, reason, state))
        return
    what = f"stopped its agent ({len(report.pids)} process(es): {report.pids})" if report.pids else "no agent was alive"
    console.line(
        f"recovery: run {run.run_id} was {state.value} when the orchestrator stopped; {what}", role=row["role"]
    )
    names = [m.name for m in memos]

    def warn(_moved: list[Path]) -> None:
        for old, memo in zip(names, run.memos, strict=True):
            if memo.path.parent.name == INBOX:
                _warn_returned(console, store, row["role"], old, memo.name)

    lifecycle.finish(
        run,
        RunState.RETURNED,
        reason=f"the orchestrator stopped while this run was {state.value}; at restart {what}; memo returned to the inbox",
        announce=False,
        then=warn,
    )


def _empty_active(config: Config, store: Store, console: Console, role: str, keep: set[str], now: float) -> None:
    """Memos in active/ that no live run holds (claimed just before the orchestrator died) go back to the inbox."""
    active = config.role_dir(role) / ACTIVE
    try:
        names = sorted(n for n in os.listdir(active) if is_memo_name(n) and n not in keep)
    except FileNotFoundError:
        return
    for name in names:
        attempts = store.memo_attempts(role, name)
        back = move_memo(active / name, config.role_dir(role) / INBOX)
        memo_index.moved(store.db, active / name, back, now)
        if back.name != name:  # a new memo took the name meanwhile: the count goes with the returned one
            store.set_memo_attempts(role, back.name, attempts)
            store.forget_memo_attempts(role, [name])
        _warn_returned(console, store, role, name, back.name)


def _warn_returned(console: Console, store: Store, role: str, old: str, new: str) -> None:
    console.line(
        f"warning: {old} was in active/ when the orchestrator stopped; back in the inbox as {new} "
        f"({store.memo_attempts(role, new)} attempt(s) so far)",
        role=role,
    )
