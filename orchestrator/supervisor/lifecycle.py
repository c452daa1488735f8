"""The one lifecycle of a run: the run table, every transition, and the one way a run ends.

Every change of a ``Run`` is made here (its fields are read elsewhere, never
assigned): its beginning (``open``, or ``rebuild`` and ``adopt`` at a restart),
each attempt's beginning, agent, timers, exit and figures, the order to cancel
it and the replies waiting for its end.

``transition`` is the only place a run's state changes: it checks the edge
against ``states.ALLOWED``, takes or gives back the run's slot as it enters or
leaves a live state, writes the state to the store and logs it. An attempt is
on record from its ``starting`` transition on (state and attempt number in the
run's row, before the agent is spawned), so a kill of the orchestrator cannot
lose the count: recovery counts every attempt of a run past ``queued``.

``finish`` is the only way a run ends, whatever the cause (success, failure
after retries, timeout, cancel, return to the inbox at a stop or restart,
rejection of a bad memo, recovery, an internal error): it cancels the run's
timers, moves its memos to the folder of the final state (a failed memo's
reason file first), keeps or forgets the memos' attempt counts, records the
end, drops the run from the table and emits one ``RunFinished``. Callers ask
for an end; they never perform one.
"""

from __future__ import annotations

import asyncio
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from orchestrator.agents.backends import capabilities
from orchestrator.config import Config, Role, RoleRun
from orchestrator.console import Console
from orchestrator.core.agent import AgentHandle, KillReport
from orchestrator.core.clock import Clock, iso, mono_at, wall_at
from orchestrator.core.events import RetryDue, RunFinished
from orchestrator.core.run import CancelOrder, MemoRef
from orchestrator.core.states import RunState, check_transition
from orchestrator.core.team_events import TeamEvents
from orchestrator.intake import notices
from orchestrator.intake.memo import ACTIVE, ARCHIVE, CANCELLED, FAILED, INBOX
from orchestrator.store import Store
from orchestrator.supervisor import figures, replies
from orchestrator.supervisor.memo_moves import MemoMoves
from orchestrator.supervisor.settling import Settling
from orchestrator.supervisor.slots import Slots

FOLDER_OF = {
    RunState.SUCCEEDED: ARCHIVE,
    RunState.FAILED: FAILED,
    RunState.TIMED_OUT: FAILED,
    RunState.CANCELLED: CANCELLED,
    RunState.RETURNED: INBOX,
}


class Lifecycle:
    """Owns the table of runs; the supervisor's loop is its only caller."""

    def __init__(
        self,
        config: Config,
        store: Store,
        console: Console,
        clock: Clock,
        slots: Slots,
        on_finished: Callable[[RunFinished], None],
        *,
        post: Callable[[object], None],
    ) -> None:
        """``on_finished`` is the first listener; more may be added to ``listeners`` and ``before_finish``.
        ``post`` hands the loop the events of the runs' timers."""
        self.config = config
        self.post = post
        self.store = store
        self.console = console
        self.clock = clock
        self.slots = slots
        self.listeners: list[Callable[[RunFinished], None]] = [on_finished]
        # called inside ``finish`` before the memos move (a journal entry must exist before the memo is archived);
        # one may return an awaitable the end then waits for (``settling``)
        self.before_finish: list[Callable[[RoleRun, RunState, str | None], Awaitable[Any] | None]] = []
        self.settling = Settling(console, post)
        self.memo_moves = MemoMoves(config, store, console, clock)
        # told of every state change after it is recorded (the dashboard's events); read-only listeners
        self.on_transition: list[Callable[[RoleRun, RunState, RunState], None]] = []
        self.team_events = TeamEvents()  # a pause, a held memo, a stall...: told to the features that listen
        self.runs: dict[int, RoleRun] = {}
        self.touched: dict[int, RoleRun] = {}  # the runs whose state changed since the loop last cleared it
        self.retry_ready: dict[str, deque[RoleRun]] = {name: deque() for name in config.roles}

    def now(self, mono: float | None = None) -> str:
        """The time now, or at the clock's monotonic time ``mono`` (a run's ``ended_mono``)."""
        return iso(wall_at(self.clock, mono))

    # ------------------------------------------------------------ beginnings
    def open(self, role: Role, memos: list[MemoRef], *, arrival: int, attempt: int, numbered: bool = False) -> RoleRun:
        """A new run in QUEUED, on record and in the table; ``numbered`` runs get the role's next run number."""
        run_id, seq = self.store.insert_run_numbered(
            numbered,
            role=role.name,
            backend=role.backend,
            memos=[m.name for m in memos],
            memo_ids=[m.memo_id for m in memos],
            subject=memos[0].subject if memos else None,
            state=RunState.QUEUED.value,
            attempt=attempt,
            created_at=self.now(),
        )
        run = RoleRun(run_id=run_id, role=role, memos=memos, arrival=arrival, attempt=attempt, seq=seq)
        run.log_path = self.config.state_dir / "logs" / f"{run_id}-{role.name}.log"
        self.runs[run_id] = run
        self.touched[run_id] = run
        return run

    def rebuild(
        self,
        row: dict[str, Any],
        role: Role,
        memos: list[MemoRef],
        state: RunState,
        *,
        live: bool = False,
    ) -> RoleRun:
        """A run as its record says (recovery), in ``state``, not yet in the table.

        ``live``: its attempt goes on (adopted), so it keeps its start time and, when its backend reports a
        session, what its earlier attempts spent, so this attempt's figures add to them (an end while nobody watched
        comes with its verdict's ``ended_at``, as every kept end does: ``exited``).
        """
        run = RoleRun(
            run_id=row["run_id"],
            role=role,
            memos=memos,
            arrival=0,
            seq=row.get("seq"),
            attempt=row["attempt"],
            state=state,
        )
        run.log_path = self.config.state_dir / "logs" / f"{run.run_id}-{role.name}.log"
        if state is RunState.RETRY_WAIT:  # it waits on for its retry (adoption): when it is due, as recorded
            run.next_attempt_at = row.get("next_attempt_at")
        if live:
            run.started_at = row.get("started_at")
            run.started_mono = mono_at(self.clock, row.get("started_at"))
            can = capabilities(role)
            if can.session:
                run.session_id, run.resumed_from, run.sessions = figures.recorded(
                    row, role.retry_resumes and can.resume
                )
        return run

    def adopt(
        self,
        run: RoleRun,
        agent: AgentHandle | None = None,
        *,
        pid: int | None = None,
        create_time: float | None = None,
    ) -> None:
        """Put a rebuilt run into the table, so it can be finished like any other.

        It is rebuilt in the state its agent is in now, not always the one on record (a recorded exit, a
        ladder started again): adoption is not a transition. ``agent``: its attempt's agent, alive or ended
        while the orchestrator was down; ``pid``: a live agent's, on record again with the state. A run in a
        live state held a slot; it holds one again until it ends.
        """
        run.agent = agent
        if pid is not None:
            self.store.update_run(run.run_id, state=run.state.value, pid=pid, create_time=create_time)
        self.slots.adopt(run.role.name)
        if run.state.live:
            self.slots.take(run.role.name)
        self.runs[run.run_id] = run

    def attempts_so_far(self, role: str, names: list[str]) -> int:
        """The attempts already made for these memos (kept across returns to the inbox)."""
        return max((self.store.memo_attempts(role, name) for name in names), default=0)

    def carry_attempts(self, role: str, old: str, new: str) -> None:
        """A memo changed its name (claim into active/, clash suffix): its attempt count goes with it."""
        if old != new:
            self.store.set_memo_attempts(role, new, self.store.memo_attempts(role, old))
            self.store.forget_memo_attempts(role, [old])

    # ------------------------------------------------------------ transitions
    def transition(self, run: RoleRun, new: RunState, *, order: CancelOrder | None = None, **fields: Any) -> None:
        """Every state change passes here: checked against the table, slots kept, recorded, logged.

        ``order``: who asked to stop the run, given with the move into CANCELLING or INTERRUPTING; a run
        back to RUNNING (an interrupt that could not be delivered) no longer has one.
        """
        old = run.state
        check_transition(old, new)
        if new.live and not old.live:
            self.slots.take(run.role.name)
        elif old.live and not new.live:
            self.slots.release(run.role.name)
        if order is not None:
            run.cancel = order
        elif new is RunState.RUNNING:
            run.cancel = None
        run.state = new
        self.touched[run.run_id] = run
        self.store.update_run(run.run_id, state=new.value, **fields)
        self.console.event(run, old, new)
        for hook in self.on_transition:
            self._call(hook, run, old, new)

    # ------------------------------------------------------------ attempts
    def begin_attempt(self, run: RoleRun) -> None:
        """The run's next attempt (its first, or a retry that is due) begins: STARTING, on record."""
        role = run.role
        if run.state is RunState.RETRY_WAIT:
            run.attempt += 1
        run.next_attempt_at = None
        run.agent = None
        run.stop_report = None
        run.stalled = None
        run.started_mono, run.ended_mono = self.clock.monotonic(), None
        run.started_at = self.now()
        resumes = role.retry_resumes and run.attempt > 1 and capabilities(role).resume
        run.resumed_from = run.session_id if resumes else None
        self.transition(
            run,
            RunState.STARTING,
            attempt=run.attempt,
            started_at=run.started_at,
            next_attempt_at=None,
            pid=None,
            create_time=None,
        )

    def attach(self, run: RoleRun, agent: AgentHandle) -> None:
        """The attempt's agent is started: the run holds its handle."""
        run.agent = agent

    def arm(self, run: RoleRun, name: str, delay: float, event: object) -> None:
        """The run's timer ``name`` (``timeout``, ``stall``): ``event`` is posted to the loop after ``delay``."""
        run.cancel_timers(name)
        run.timers[name] = self.clock.call_later(delay, self.post, event)

    def exited(self, run: RoleRun, code: int, at: float | None = None) -> None:
        """The attempt's agent exited with ``code`` (``at``: when, if it was before now): its timeout and stall
        checks are over."""
        if at is not None and run.ended_mono is None and run.started_mono is not None:
            run.ended_mono = max(run.started_mono, mono_at(self.clock, at))
        run.exit_codes.append(code)
        run.cancel_timers("timeout", "stall")

    def time_out(self, run: RoleRun, stalled: str | None = None) -> None:
        """The attempt passed its timeout, or wrote nothing for its stall timeout (``stalled`` says so):
        TIMING_OUT, for the kill ladder to stop it."""
        if stalled is None:
            self.transition(run, RunState.TIMING_OUT)
            return
        run.stalled = stalled
        run.cancel_timers("timeout")
        self.transition(run, RunState.TIMING_OUT, reason=stalled)

    def stopped(self, run: RoleRun, report: KillReport) -> None:
        """The attempt's tree was stopped: how, for the cancel's record and receipt."""
        run.stop_report = report

    def wait_for_end(self, run: RoleRun, reply: asyncio.Future[Any]) -> None:
        """``reply`` is answered with the run's receipt when it ends."""
        run.waiters.append(reply)

    def record_figures(self, run: RoleRun, agent: AgentHandle, session: str | None) -> bool:
        """Figures an SDK agent reported (cost, tokens, session), stored with the run, summed over its attempts
        (``figures``); True when some were stored."""
        if session:
            run.session_id = session
        result = agent.result
        if not result:
            return False
        reported = result.get("session_id") or None  # on record as the run's session: ``key`` may be a placeholder
        if reported:  # a session another run began (a question's, answered) carries that run's spend in its totals
            result = figures.less(result, self.store.session_spent(reported, run.run_id))
        key, run.sessions, totals = figures.merged(run.sessions, run.resumed_from, result, run.attempt)
        own = figures.session_part(run.sessions[key])
        self.store.update_run(
            run.run_id, **totals, session_id=reported, session_figures=own, is_error=int(bool(result.get("is_error")))
        )
        return True

    def end_attempt(self, run: RoleRun, outcome: str, reason: str | None, exit_code: int | None) -> None:
        """An attempt ended: its row completed (how, why, exit code)."""
        run.last_ran = run.elapsed(self.clock.monotonic())
        self.store.record_attempt(
            run.run_id,
            run.attempt,
            started_at=run.started_at,
            ended_at=self.now(run.ended_mono),
            exit_code=exit_code,
            outcome=outcome,
            reason=reason,
            log_path=str(run.log_path),
        )

    def wait_for_retry(self, run: RoleRun, delay: float, reason: str) -> None:
        """RETRY_WAIT for ``delay`` seconds (no slot held), then ``RetryDue`` is posted."""
        run.next_attempt_at = iso(self.clock.now() + timedelta(seconds=delay))
        run.retry_due = False
        self.transition(run, RunState.RETRY_WAIT, next_attempt_at=run.next_attempt_at, reason=reason)
        self.arm(run, "retry", delay, RetryDue(run.run_id))

    def retry_due(self, run: RoleRun) -> None:
        run.timers.pop("retry", None)
        run.retry_due = True
        self.retry_ready[run.role.name].append(run)

    # ------------------------------------------------------------ the one end
    def finish(
        self,
        run: RoleRun,
        state: RunState,
        *,
        reason: str | None,
        exit_code: int | None = None,
        reason_text: str | None = None,
        announce: bool = True,
        attempts_used: int | None = None,
        order: CancelOrder | None = None,
        folder: str | None = None,
        then: Callable[[list[Path]], None] | None = None,
    ) -> list[Path]:
        """End the run in ``state``: timers, slot, memos, attempt counts, the record, one ``RunFinished``.

        ``announce=False`` when the caller says it in its own words (recovery); the record is the same.
        ``folder``: where the memos go instead of the state's (a parked run: ``held/``, with ``reason_text``).
        ``attempts_used``: what a returned memo keeps, when not every attempt counts (one that never began).
        ``order``: who cancelled a run that ends cancelled without having been stopped (queued, waiting).
        A ``before_finish`` hook that returns an awaitable makes the run settle first (``supervisor.settling``):
        the rest of the end comes once it is done, so the memos moved are returned only by an end that did not
        wait, and ``then`` is given them either way.
        """
        if run.settling is not None:  # its end is under way: the first one asked is the one it ends with
            self.console.line(f"run {run.run_id} is already ending as {run.settling}; not as {state.value}")
            return []
        previous = run.state
        check_transition(previous, state)  # before anything moves: a bug must not half-end a run
        if order is not None:
            run.cancel = order
        run.cancel_timers()
        ready = self.retry_ready.get(run.role.name)
        if ready is not None and run in ready:
            ready.remove(run)
        waits = [wait for hook in self.before_finish if (wait := self._call(hook, run, state, reason)) is not None]

        def rest() -> list[Path]:
            run.settling = None
            moved = self._end(run, previous, state, reason, exit_code, reason_text, announce, attempts_used, folder)
            if then is not None:
                then(moved)
            return moved

        if waits:
            self.settling.defer(run, waits, rest)
            run.settling = state.value
            return []
        return rest()

    def _end(
        self,
        run: RoleRun,
        previous: RunState,
        state: RunState,
        reason: str | None,
        exit_code: int | None,
        reason_text: str | None,
        announce: bool,
        attempts_used: int | None,
        folder: str | None,
    ) -> list[Path]:
        """The end itself, once the features' work for it is done: memos, attempt counts, record, ``RunFinished``."""
        folder = folder or FOLDER_OF[state]
        text = reason_text
        if folder == FAILED:
            text = reason_text or notices.failure_reason_text(
                run, state, reason or state.value, self.store.attempts(run.run_id)
            )
        self.store.checkpoint()  # the attempt's outcome is on record before the memo is seen in its folder
        renamed = self.memo_moves.move(run, folder, text)
        self._settle_attempts(run, previous, state, renamed, attempts_used)
        ended, memos = self.now(run.ended_mono), [m.name for m in run.memos]
        self.transition(run, state, ended_at=ended, exit_code=exit_code, reason=reason, memos=memos)
        self.store.checkpoint()  # and the end itself, at once, not when the event's handling is over
        self.runs.pop(run.run_id, None)
        moved = [m.path for m in run.memos if m.path.parent.name == folder]
        event = RunFinished(run, previous, state, reason, moved, run.cancel, announce)
        for listener in self.listeners:
            self._call(listener, event)
        replies.settle(run, previous, state, reason)  # what the listeners left unanswered: "ended as ..."
        run.waiters.clear()  # nothing may wait on an ended run
        return moved

    def _call(self, hook: Callable[..., Any], *args: Any) -> Any:
        """A hook's failure is a bug to report, never a reason for a run not to end; its result, or None."""
        try:
            return hook(*args)
        except Exception:  # noqa: BLE001 - the end goes on; the bug is loud in the log and on the terminal
            name = getattr(hook, "__qualname__", repr(hook))
            self.console.error(f"internal error in {name} while ending a run:\n{traceback.format_exc()}")
            return None

    def drop(self, run: RoleRun) -> None:
        """Last resort after ``finish`` itself failed: the run leaves the table and gives back its slot, and
        whoever waited for its end is told."""
        replies.refuse(run)
        run.waiters.clear()
        if run.state.live:
            self.slots.release(run.role.name)
        self.runs.pop(run.run_id, None)
        ready = self.retry_ready.get(run.role.name)
        if ready is not None and run in ready:
            ready.remove(run)
        run.cancel_timers()

    def _settle_attempts(
        self, run: RoleRun, previous: RunState, state: RunState, renamed: list[tuple[str, str]], used: int | None = None
    ) -> None:
        """The one rule: a returned memo keeps the attempts it used; every other end forgets them."""
        role = run.role.name
        if state is RunState.RETURNED:
            if used is None:
                used = run.attempt - 1 if previous is RunState.QUEUED else run.attempt
            for old, new in renamed:
                self.store.forget_memo_attempts(role, [old])
                self.store.set_memo_attempts(role, new, max(0, used))
        else:
            self.store.forget_memo_attempts(role, [old for old, _ in renamed] + [m.name for m in run.memos])


def active_ref(config: Config, role: str, name: str, memo_id: str | None = None, subject: str | None = None) -> MemoRef:
    """A reference to a memo in ``active/`` by name (recovery rebuilds runs from their records)."""
    return MemoRef(name, config.role_dir(role) / ACTIVE / name, memo_id, subject)
