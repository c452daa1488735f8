"""A change of ``executor:`` across a restart: refused while runs the other executor started are under way.

Recovery takes a run back only through the executor that started it: a local ``up`` cannot see a Ray actor (its
agent runs on there), and an ``up`` on Ray cannot read a keeper's exit record (an agent that ended while nobody
watched). Under the other executor, each such run would be a memo run again: twice at once, or its work done twice,
and paid twice. So every start records its executor in the store's ``meta``, and a start under another one is
refused while a run is on record with an agent under way, with the way out: the same executor again, which takes
them back, or ``up --rerun-unfinished`` once the person has decided (a cluster that is gone).
"""

from __future__ import annotations

import sqlite3
from typing import Any, NamedTuple

from orchestrator.config import Config
from orchestrator.core.errors import ConfigError
from orchestrator.core.states import LIVE
from orchestrator.store import Store
from orchestrator.supervisor.extension import Extension, ExtensionFactory, Host

KEY = "executor"  # the store's meta: the executor of the last start
SHOWN = 5  # runs named in the refusal; the rest are counted


class Switch(NamedTuple):
    """What ``check_executor`` found: the lines to log, and, for runs handed over, the feature that records the new
    executor once recovery has ended them (before, a start that failed would leave the wrong executor on record)."""

    lines: list[str]
    record: ExtensionFactory | None


def refusal(config: Config) -> str | None:
    """Why ``up`` would refuse this executor now (runs of the last one under way), read only: ``config check``."""
    path = config.state_dir / "state.db"
    if not path.exists():
        return None
    try:
        store = Store(path, readonly=True)
        try:
            last = store.meta(KEY)
            runs = store.runs_in_states(s.value for s in LIVE) if last not in (None, config.executor.kind) else []
        finally:
            store.close()
    except sqlite3.DatabaseError:  # a damaged database: `doctor` says so (its `database` check), not this one
        return None
    return _refusal(config, str(last), runs) if runs else None


def check_executor(config: Config, rerun_unfinished: bool = False) -> Switch:
    """Refuse a start under another executor than the last one while runs are under way (``ConfigError``), else
    record this start's executor: at once, or, with runs handed over (``--rerun-unfinished``), once recovery is done."""
    kind = config.executor.kind
    store = Store(config.state_dir / "state.db")
    try:
        last = store.meta(KEY)
        runs = store.runs_in_states(s.value for s in LIVE) if last not in (None, kind) else []
        if runs and not rerun_unfinished:
            raise ConfigError(_refusal(config, str(last), runs))
        if not runs:
            store.set_meta(KEY, kind)
    finally:
        store.close()
    if not runs:
        return Switch([], None)
    if last == "ray":
        fate = "an agent of theirs still on the cluster is left to its wrapper, which ends it reconnect_within after "
        fate += "its head left"
    else:
        fate = "an agent of theirs still running here is stopped first"
    line = (
        f"warning: up --rerun-unfinished: {_named(runs)} of executor: {last} end as at a restart and their memos "
        f"run again; {fate}"
    )
    return Switch([line], lambda host: _Recorded(host, kind))


class _Recorded(Extension):
    """The new executor on record once recovery has ended the runs handed over (``open``: after recovery)."""

    def __init__(self, host: Host, kind: str) -> None:
        self.store, self.kind = host.store, kind

    async def open(self) -> None:
        self.store.set_meta(KEY, self.kind)


def _named(runs: list[dict[str, Any]]) -> str:
    shown = ", ".join(f"{r['run_id']} ({r['role']}: {', '.join(r['memos'] or [])})" for r in runs[:SHOWN])
    more = f" and {len(runs) - SHOWN} more" if len(runs) > SHOWN else ""
    return f"run{'s' if len(runs) > 1 else ''} {shown}{more}"


def _refusal(config: Config, last: str, runs: list[dict[str, Any]]) -> str:
    kind, many = config.executor.kind, len(runs) > 1
    them, memos = ("them", "their memos") if many else ("it", "its memo")
    head = f"{config.path}: executor: {kind}, but the last `up` started with executor: {last}, and {_named(runs)} "
    head += "are" if many else "is"
    if last == "ray":
        return (
            f"{head} still under way on the Ray cluster: a start here would run {memos} again beside {them}. Start "
            f"with executor: ray again to take {them} back, then switch; or, if that cluster is gone, "
            f"`orchestrator up --rerun-unfinished` runs {memos} again here"
        )
    return (
        f"{head} still under way here: a start on {kind} would stop {them} and run {memos} again. Start with "
        f"executor: {last} again to take {them} back and let {them} finish, then switch; or "
        f"`orchestrator up --rerun-unfinished` stops {them} and runs {memos} again"
    )
