"""Start-up reconciliation of the database with the folders, after an orchestrator died.

Runs before the watcher starts. The choice made here: agents of an earlier
orchestrator that still live are **stopped** with the kill ladder, never
adopted, because their output pipe and exit status cannot be reattached; their
memos go back to ``inbox/`` with the attempt count kept and run again. So no
two agents ever work on one memo at once, and nothing in ``active/`` is
forgotten. A run that was being cancelled is finished as cancelled: the
person's decision outlives the orchestrator.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import psutil

from orchestrator.agents import procs
from orchestrator.control.cancel import finish_after_restart
from orchestrator.intake.memo import ACTIVE, INBOX, is_memo_name, move_memo
from orchestrator.core.states import UNFINISHED, RunState
from orchestrator.store import now_iso

if TYPE_CHECKING:
    from orchestrator.supervisor.loop import Supervisor

DEFAULT_GRACE = 10.0


def _ancestors() -> set[int]:
    out = {os.getpid()}
    try:
        for parent in psutil.Process().parents():
            out.add(parent.pid)
    except psutil.Error:
        pass
    return out


def orphan_run_ids(project_root: str) -> set[int]:
    """Run ids carried by live processes of this project root that are not ours."""
    mark = f"ORCHESTRATOR_ROOT={project_root}\0".encode()
    skip = _ancestors()
    found: set[int] = set()
    for pid in procs._all_pids():
        if pid in skip:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                env = b"\0" + handle.read()
        except OSError:
            continue
        if b"\0" + mark not in env:
            continue
        start = env.find(b"\0ORCHESTRATOR_RUN_ID=")
        if start >= 0:
            value = env[start + 21 : env.find(b"\0", start + 1)]
            if value.isdigit():
                found.add(int(value))
    return found


async def recover(sup: Supervisor) -> None:
    """Stop leftover agents, close their runs as returned, and put every memo in active/ back in its inbox."""
    store, root = sup.store, str(sup.root)
    stale = store.runs_in_states(s.value for s in UNFINISHED)
    handled: set[int] = set()
    for row in stale:
        role = sup.config.roles.get(row["role"])
        grace = role.grace if role else DEFAULT_GRACE
        ref = procs.ProcRef(row["pid"], row["create_time"]) if row.get("pid") and row.get("create_time") else None
        target = procs.Target(ref, row["pid"] if ref and ref.process() else None, row["run_id"], root)
        report = await procs.stop_tree(target, grace) if procs.find_tree(target) else procs.KillReport()
        handled.add(row["run_id"])
        if row["state"] == RunState.CANCELLING.value and row["role"] in sup.config.roles:
            finish_after_restart(sup, row, report.pids)
            continue
        started = bool(row.get("pid"))
        attempt = row["attempt"] if started or row["state"] == RunState.RETRY_WAIT.value else row["attempt"] - 1
        for name in row["memos"]:
            store.set_memo_attempts(row["role"], name, max(0, attempt))
        what = f"stopped its agent ({len(report.pids)} process(es): {report.pids})" if report.pids else "no agent was alive"
        store.update_run(row["run_id"], state=RunState.RETURNED.value, ended_at=now_iso(),
                         reason=f"the orchestrator stopped while this run was {row['state']}; at restart {what}; "
                         "memo returned to the inbox")  # fmt: skip
        sup.console.line(f"recovery: run {row['run_id']} was {row['state']} when the orchestrator stopped; {what}",
                         role=row["role"])  # fmt: skip
    for run_id in orphan_run_ids(root) - handled:
        report = await procs.stop_tree(procs.Target(None, None, run_id, root), DEFAULT_GRACE)
        sup.console.line(f"recovery: stopped {len(report.pids)} leftover process(es) of run {run_id}: {report.pids}")
    for role in sup.config.roles:
        active = sup.config.role_dir(role) / ACTIVE
        try:
            names = sorted(n for n in os.listdir(active) if is_memo_name(n))
        except FileNotFoundError:
            continue
        for name in names:
            attempts = store.memo_attempts(role, name)
            back = move_memo(active / name, sup.config.role_dir(role) / INBOX)
            if back.name != name:  # a new memo took the name meanwhile: the count goes with the returned one
                store.set_memo_attempts(role, back.name, attempts)
                store.forget_memo_attempts(role, [name])
            sup.console.line(
                f"warning: {name} was in active/ when the orchestrator stopped; back in the inbox as {back.name} "
                f"({attempts} attempt(s) so far)",
                role=role,
            )
