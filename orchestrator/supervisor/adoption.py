"""Adoption at a restart: runs whose agent outlived the orchestrator go back into the table, not back to the inbox.

Recovery asks ``Adopter.adopt`` about each unfinished run before it acts. A
``command`` run (``recovery: adopt``, the default) whose keeper left an exit
record is rebuilt in its live state and its recorded exit comes back as the
usual ``RunExited`` (with ``StopDone`` when the keeper stopped it for its
timeout), so it is archived, retried or failed by the ordinary rules and never
run again. A run whose agent still lives (same pid and create time, its run id,
root and attempt in its environment; when the one on record has ended, the
earliest session leader carrying those marks under a keeper: the pid of a Codex
run's next turn may not be on record yet) is rebuilt with its agent re-attached
through a pidfd, its slot held and its timeout counted from the original start.
A run that waited for its retry waits on in ``retry_wait``, its pause's timer armed
once the loop serves (``start``). Anything else is left to recovery's stop-and-requeue.

Every backend is taken back the same way, through its own ``adopt`` and
``recorded`` (``agents/backends``): an ``sdk`` run's runner runs under a keeper
too, so an ended one comes back with the figures its event log and result file
hold (cost, session, failure reason), and a live one is reconnected to its
socket, which replays its latest events, so ``tell``, ``interrupt``, ``cancel``
and ``status`` work on it as before the crash.

On a cluster (a spawner with ``RemoteRuns``: Ray) there are no keepers here: each
run's attempt is asked of the spawner, which finds its wrapper on the cluster and
re-attaches to it, live or ended with its end kept; the attempts not taken back are
halted before recovery returns any memo to the inbox, so no memo runs twice at once.
Every run taken back has ``adopted_at`` on its record (``history`` shows it).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.agents import keeper, procs, run_folder
from orchestrator.agents.backends import backend_for, stall_seconds
from orchestrator.agents.handle import Agent
from orchestrator.agents.spawner import RemoteRuns, Spawner
from orchestrator.agents.spec import LaunchSpec, role_folder
from orchestrator.config import Config, Role, RoleRun
from orchestrator.console import Console
from orchestrator.core.agent import AgentHandle, AttemptVerdict
from orchestrator.core.events import (
    AgentStarted,
    Event,
    RetryDue,
    RunExited,
    RunFinished,
    StallCheck,
    StopDone,
    TimeoutFired,
)
from orchestrator.core.run import MemoRef
from orchestrator.core.states import RunState
from orchestrator.store import Store
from orchestrator.supervisor.extension import Extension
from orchestrator.supervisor.launch import Prepare
from orchestrator.supervisor.lifecycle import Lifecycle

SPENT_BATCH = 64  # spent exit records handed to the remover thread at once
SPENT_WAIT = 1.0  # or after this long, when fewer runs ended
EXEC_WAIT = 2.0  # how long a keeper found before its agent's exec is waited for
POLL = 0.005  # between two looks while waiting for it (on the clock: the loop goes on meanwhile)
ADOPTABLE = (RunState.STARTING, RunState.RUNNING, RunState.TIMING_OUT)


class Adopter(Extension):
    """Re-attaches runs that outlived the orchestrator; its events are posted once recovery is done.

    Plugged in as an extension once made (at start-up): each finished run's exit records are spent.
    """

    def __init__(
        self,
        config: Config,
        store: Store,
        console: Console,
        lifecycle: Lifecycle,
        post: Callable[[Event], None],
        prepares: list[Prepare] | None = None,
        spawner: Spawner | None = None,
    ) -> None:
        """``prepares``: the extensions' ``prepare`` hooks, shown each run taken back (they can only observe it)."""
        self.config = config
        self.prepares = prepares if prepares is not None else []
        self.remote = spawner if isinstance(spawner, RemoteRuns) else None
        self.taken_back: set[tuple[int, int]] = set()  # (run id, attempt) of the remote attempts taken back
        self.store = store
        self.console = console
        self.lc = lifecycle
        self.clock = lifecycle.clock
        self.post = post
        self.pending: list[Event] = []
        self.kept: dict[str, set[str]] = {}  # role -> names of adopted memos, which stay in active/
        self.retries: list[RoleRun] = []  # runs taken back waiting for their retry, whose timers ``start`` arms
        self._remover: ThreadPoolExecutor | None = None
        self._spent: list[Path] = []  # run folders whose exit records are spent, removed in batches

    async def adopt(self, row: dict[str, Any], role: Role | None, memos: list[MemoRef]) -> bool:
        """Take the run of ``row`` back when its exit record or its live agent allows; False: recovery decides."""
        state = RunState(row["state"])
        if self.config.recovery == "adopt" and role is not None and state is RunState.RETRY_WAIT:
            return await self._waits_on(row, role, memos)
        if self.config.recovery != "adopt" or role is None or state not in ADOPTABLE:
            return False
        if self.remote is not None:
            return await self._reattach(row, role, memos, state)
        run_id, attempt = row["run_id"], row["attempt"]
        record = keeper.read_exit(keeper.exit_path(self.config.state_dir, run_id, attempt))
        found = None if record is not None else await self._live_agent(row)
        if record is None and found is None:  # it may have ended while we looked: its keeper is writing
            record = await self._await_record(row)
        if record is None and found is None:
            return False
        if record is not None:
            how = f"exit status {record.returncode}" if record.returncode >= 0 else f"signal {-record.returncode}"
            timed_out = record.timed_out or state is RunState.TIMING_OUT
            as_now = RunState.TIMING_OUT if timed_out else RunState.RUNNING
            run = self.lc.rebuild(row, role, memos, as_now, live=True)
            self.console.line(
                f"recovery: run {run_id} ({run.label}) ended while the orchestrator was down ({how}"
                f"{', stopped by its keeper at its timeout' if record.timed_out else ''}); "
                "finishing it as its keeper recorded, not running it again",
                role=role.name,
            )
            ended = self._recorded(run, row)
            self.lc.adopt(run, ended)
            await self._show(run, ended.spec)
            # its end at the agent's time, as the keeper recorded it, through the verdict as a Ray wrapper's kept end
            self.pending.append(RunExited(run_id, attempt, ended.conclude(record.returncode, at=record.at)))
            if timed_out:
                self.pending.append(StopDone(run_id, attempt, procs.KillReport()))
        else:
            assert found is not None
            ref, keeper_pid = found
            # a run that was timing out is taken back running: its ladder starts again, from the top
            run = self.lc.rebuild(row, role, memos, RunState.RUNNING, live=True)

            def exited(_agent: AgentHandle, verdict: AttemptVerdict) -> None:
                self.post(RunExited(run_id, attempt, verdict))

            spec = self._spec(run, _folder_of(ref.pid))
            agent = backend_for(role).adopt(spec, ref, keeper_pid)
            agent.on_turn = lambda turned: self.post(AgentStarted(run_id, attempt, turned))
            self.lc.adopt(run, agent, pid=ref.pid, create_time=ref.create_time)
            await self._show(run, spec)
            agent.watch(exited)
            left = self._arm(run, state)
            self.console.line(
                f"recovery: run {run_id} ({run.label}) was {state.value} when the orchestrator stopped; adopted its "
                f"live agent (pid {ref.pid}{', keeper ' + str(keeper_pid) if keeper_pid else ''}), "
                f"{max(0.0, left):.0f}s left of its timeout",
                role=role.name,
            )
        self._taken(run, memos)
        return True

    async def _reattach(self, row: dict[str, Any], role: Role, memos: list[MemoRef], state: RunState) -> bool:
        """A run on the cluster: re-attached to its wrapper, alive or with its end kept; False when it is gone."""
        assert self.remote is not None
        run_id, attempt = row["run_id"], row["attempt"]
        run = self.lc.rebuild(row, role, memos, RunState.RUNNING, live=True)
        spec = self._spec(run)
        agent = await self.remote.reattach(spec)
        if agent is None:
            return False

        def exited(_agent: AgentHandle, verdict: AttemptVerdict) -> None:
            self.post(RunExited(run_id, attempt, verdict))

        self.taken_back.add((run_id, attempt))
        self.lc.adopt(run, agent, pid=agent.pid)
        await self._show(run, spec)
        agent.watch(exited)
        left = self._arm(run, state)
        self.console.line(
            f"recovery: run {run_id} ({run.label}) was {state.value} when the orchestrator stopped; re-attached to "
            f"its wrapper on {agent.node} (pid {agent.pid}), not running it again; {left:.0f}s left of its timeout",
            role=role.name,
        )
        self._taken(run, memos)
        return True

    async def halt_others(self) -> None:
        """On a cluster: halt the attempts left there that were not taken back, before any memo goes back."""
        if self.remote is None:
            return
        for name in await self.remote.halt_others(self.taken_back):
            self.console.line(f"recovery: halted {name}, an attempt left on the cluster that was not taken back")

    def _arm(self, run: RoleRun, state: RunState) -> float:
        """A live run taken back: its timeout from its original start (fired now if it was timing out), its
        stall check from now; the seconds left of its timeout."""
        run_id, attempt, role = run.run_id, run.attempt, run.role
        left = max(0.0, role.timeout - run.elapsed(self.clock.monotonic()))
        if state is RunState.TIMING_OUT:
            self.pending.append(TimeoutFired(run_id, attempt))
        else:
            self.lc.arm(run, "timeout", left, TimeoutFired(run_id, attempt))
        stall = stall_seconds(role)
        if stall is not None:  # counted from now: what it wrote while nobody watched is not known
            self.lc.arm(run, "stall", stall, StallCheck(run_id, attempt, self.clock.now().timestamp()))
        return left

    async def _waits_on(self, row: dict[str, Any], role: Role, memos: list[MemoRef]) -> bool:
        """A run that waited for its retry waits on (no agent of it runs), keeping its number, its figures and
        session, and its workspace (the extensions see it taken back); its pause's timer is armed once the loop
        serves (``start``), for what is left of it then."""
        run = self.lc.rebuild(row, role, memos, RunState.RETRY_WAIT, live=True)
        self.lc.adopt(run)
        await self._show(run, self._spec(run))
        self.console.line(
            f"recovery: run {run.run_id} ({run.label}) waits on for its retry, due in {self._left(run):.0f}s",
            role=role.name,
        )
        self.retries.append(run)
        self._taken(run, memos)
        return True

    def _left(self, run: RoleRun) -> float:
        """Seconds left of a waiting run's pause (0: due, or its time unknown)."""
        try:
            return max(0.0, (datetime.fromisoformat(run.next_attempt_at or "") - self.clock.now()).total_seconds())
        except (TypeError, ValueError):
            return 0.0

    def start(self) -> None:
        """The loop serves (the features started, the first scan made): the retries taken back wait out their
        pauses, and one that is due starts now, not in the middle of recovery."""
        for run in self.retries:
            if run.state is RunState.RETRY_WAIT and self.lc.runs.get(run.run_id) is run:
                self.lc.arm(run, "retry", self._left(run), RetryDue(run.run_id))
        self.retries.clear()

    def _taken(self, run: RoleRun, memos: list[MemoRef]) -> None:
        """A run taken back: its memos stay in active/, and its record says when (``history``)."""
        self.kept.setdefault(run.role.name, set()).update(m.name for m in memos)
        self.store.update_run(run.run_id, adopted_at=self.clock.now().isoformat(timespec="milliseconds"))

    def release(self) -> None:
        """Recovery is done: the recorded exits are handled by the loop like any other."""
        for event in self.pending:
            self.post(event)
        self.pending.clear()

    def on_finished(self, event: RunFinished) -> None:
        """A run ended: its keepers' exit records are spent; removed by a thread of their own, in batches.

        Off the loop: an ``rmdir`` on a busy ext3 disk was measured at 1.4 ms, a start's worth of latency.
        In batches: a thread woken at every run end takes the GIL from the loop at every run end.
        """
        self._spent.append(self.config.state_dir / "runs" / str(event.run.run_id))
        if len(self._spent) >= SPENT_BATCH or not self.lc.runs:  # a batch, or nothing else going on
            self.flush_records()
        elif len(self._spent) == 1:
            self.clock.call_later(SPENT_WAIT, self.flush_records)

    def flush_records(self) -> None:
        """Hand the spent records gathered so far to the remover thread (the loop's ending calls it too)."""
        spent, self._spent = self._spent, []
        if not spent:
            return
        if self._remover is None:
            self._remover = ThreadPoolExecutor(max_workers=1, thread_name_prefix="exit-records")
        self._remover.submit(_remove_all, spent)

    # ------------------------------------------------------------ helpers
    def _recorded(self, run: RoleRun, row: dict[str, Any]) -> Agent:
        """The handle of an attempt that ended while the orchestrator was down, as its backend reads it (an ``sdk``
        one has its figures and failure reason from its files); its group is offered to sweep unless another
        process took that pid."""
        pid = row["pid"] if row.get("pid") and self._group_is_the_runs(row) else None
        return backend_for(run.role).recorded(self._spec(run), pid)

    def _spec(self, run: RoleRun, cwd: Path | None = None) -> LaunchSpec:
        """What is known of a taken-back attempt's start: no prompt or environment; ``cwd``, where its live agent
        runs (else the role's folder)."""
        return LaunchSpec(
            run_id=run.run_id,
            attempt=run.attempt,
            role=run.role,
            root=self.config.root,
            prompt="",
            memo_paths=[m.path for m in run.memos],
            log_path=run.log_path or Path(os.devnull),
            cwd=cwd or role_folder(self.config.root, run.role.cwd),
            env={},
            resume=run.resumed_from,
            adopted=True,
        )

    async def _show(self, run: RoleRun, spec: LaunchSpec) -> None:
        """The extensions' ``prepare`` sees the run taken back (``spec.adopted``): its agent exists, so what they
        return changes nothing, and a hook that fails is logged and adoption goes on."""
        for prepare in self.prepares:
            try:
                await prepare(run, spec)
            except Exception:  # noqa: BLE001 - observing must not cost the run its adoption
                self.console.error(f"internal error in {prepare.__qualname__} at adoption:\n{traceback.format_exc()}")

    async def _live_agent(self, row: dict[str, Any]) -> tuple[procs.ProcRef, int | None] | None:
        """The run's agent when it still lives: (its reference, its keeper's pid or None)."""
        marks = _marks(str(self.config.root), row["run_id"], row["attempt"])
        recorded = procs.ProcRef(row["pid"], row["create_time"]) if row.get("pid") and row.get("create_time") else None
        if recorded is not None and recorded.process() is not None:
            if not _carries(recorded.pid, marks):  # another process took the pid, or its environment is unreadable
                return None
            ref = recorded
        else:  # it died between the spawn and recording the pid, or the pid on record is its ended turn's and its
            # next turn's was not recorded yet: the session leader carrying the run's marks under a keeper
            found = await self._unrecorded_agent(row, marks)
            if found is None:
                return None
            ref = found
        parent = _ppid(ref.pid)
        return ref, parent if parent > 1 and keeper.is_keeper(parent) else None

    def _group_is_the_runs(self, row: dict[str, Any]) -> bool:
        """Whether the ended agent's process group is empty or still the run's (leftovers a sweep may stop).

        A group whose members do not carry the run's marks took the pid after the agent died: it must
        never be swept, so such a run ends from its exit status alone.
        """
        pgid = row["pid"]
        if not procs.group_has_members(pgid):
            return True
        marks = _marks(str(self.config.root), row["run_id"], row["attempt"])
        return any(_pgid(pid) == pgid and _carries(pid, marks) for pid in procs.all_pids())

    async def _await_record(self, row: dict[str, Any]) -> keeper.ExitRecord | None:
        """The exit record, once every live keeper of the attempt has ended (it writes just before)."""
        path = keeper.exit_path(self.config.state_dir, row["run_id"], row["attempt"])
        keeper_marks = _keeper_marks(_marks(str(self.config.root), row["run_id"], row["attempt"]))
        deadline = self.clock.monotonic() + EXEC_WAIT
        while not path.exists() and self.clock.monotonic() < deadline:
            if not any(_carries(pid, keeper_marks) and keeper.is_keeper(pid) for pid in procs.all_pids()):
                break
            await self.clock.sleep(POLL)
        return keeper.read_exit(path)

    async def _unrecorded_agent(self, row: dict[str, Any], marks: tuple[bytes, ...]) -> procs.ProcRef | None:
        """An agent whose pid never reached the record; a keeper caught before its exec is given a moment."""
        keeper_marks = _keeper_marks(marks)
        record = keeper.exit_path(self.config.state_dir, row["run_id"], row["attempt"])
        deadline = self.clock.monotonic() + EXEC_WAIT
        while True:
            keepers, leaders = [], []
            for pid in procs.all_pids():
                if _carries(pid, marks) and _pgid(pid) == pid and keeper.is_keeper(_ppid(pid)):
                    ref = procs.ProcRef.of(pid)
                    if ref is not None and ref.process() is not None:
                        leaders.append(ref)
                elif _carries(pid, keeper_marks) and keeper.is_keeper(pid):
                    keepers.append(pid)
            if leaders:  # the agent, not a daemon of its own it detached later (its keeper is a subreaper)
                return min(leaders, key=lambda ref: ref.create_time)
            if not keepers or record.exists() or self.clock.monotonic() > deadline:
                return None
            await self.clock.sleep(POLL)  # a keeper whose agent is between its fork and its exec: milliseconds


def _marks(root: str, run_id: int, attempt: int) -> tuple[bytes, ...]:
    return tuple(
        f"\0{name}={value}\0".encode()
        for name, value in (
            ("ORCHESTRATOR_RUN_ID", run_id),
            ("ORCHESTRATOR_ROOT", root),
            ("ORCHESTRATOR_ATTEMPT", attempt),
        )
    )


def _remove_all(folders: list[Path]) -> None:
    for folder in folders:
        run_folder.remove_spent(folder)


def _keeper_marks(marks: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """The same marks as a keeper carries them (under ``KEEPER_``)."""
    return tuple(b"\0KEEPER_" + mark[1:] for mark in marks)


def _carries(pid: int, marks: tuple[bytes, ...]) -> bool:
    env = b"\0" + (procs.raw_environ(pid) or b"")  # marks is never empty: an unreadable environ carries none
    return all(mark in env for mark in marks)


def _folder_of(pid: int) -> Path | None:
    """The folder process ``pid`` runs in, or None when it cannot be read."""
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def _ppid(pid: int) -> int:
    fields = procs.stat_fields(pid)
    try:
        return int(fields[1]) if fields is not None else 0
    except (IndexError, ValueError):
        return 0


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return 0
