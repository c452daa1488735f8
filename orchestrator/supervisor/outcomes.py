"""What an attempt's events mean for its run: started, could not start, exited, timed out, stopped, retry due.

Every decision here is a transition or a ``finish`` through the lifecycle; the
failure rules themselves are the pure functions of ``rules``.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.agents.backends import stall_seconds
from orchestrator.config import RoleRun
from orchestrator.console import Console
from orchestrator.core.agent import AttemptVerdict, describe_exit
from orchestrator.core.events import (
    AgentStarted,
    AgentStartFailed,
    Event,
    RetryDue,
    RunExited,
    StallCheck,
    StopDone,
    TimeoutFired,
)
from orchestrator.core.states import STOP_ENDS, Ending, RunState
from orchestrator.core.team_events import TeamEvent
from orchestrator.store import Store
from orchestrator.supervisor import decisions, rules
from orchestrator.supervisor.agent_stops import AgentStops
from orchestrator.supervisor.lifecycle import Lifecycle
from orchestrator.supervisor.pauses import Pauses
from orchestrator.supervisor.start_faults import StartFaults

FORCED = "the orchestrator was force-stopped"


def duration_text(seconds: float) -> str:
    """``600`` as ``10m``, ``5400`` as ``90m``, ``7200`` as ``2h``, ``45`` as ``45s``: as a person writes it."""
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


class Outcomes:
    """Decides each attempt's outcome from its events."""

    def __init__(
        self,
        lifecycle: Lifecycle,
        agent_stops: AgentStops,
        store: Store,
        console: Console,
        post: Callable[[Event], None],
        ending: Callable[[], Ending | None],
        begin_ending: Callable[[Ending, str, int | None], None],
        figures_changed: Callable[[], None],
        start_faults: StartFaults,
    ) -> None:
        self.lc = lifecycle
        self.start_faults = start_faults
        self.clock = lifecycle.clock
        self.agent_stops = agent_stops
        self.store = store
        self.console = console
        self.post = post
        self.ending = ending
        self.begin_ending = begin_ending
        self.figures_changed = figures_changed
        self.crashes = rules.CrashCounter(lifecycle.config.roles)
        self.pauses: Pauses | None = None  # usage limits: set by the supervisor
        self.end_hooks: list[decisions.DecideEnd] = []  # the extensions' ``decide_end``, asked before the rules

    def _current(self, run_id: int, attempt: int | None = None) -> RoleRun | None:
        """The run an event is about, unless it has ended or is ending (settling): then the event is late."""
        run = self.lc.runs.get(run_id)
        if run is None or run.settling is not None or (attempt is not None and run.attempt != attempt):
            return None
        return run

    # ------------------------------------------------------------ start
    def started(self, event: AgentStarted) -> None:
        run = self._current(event.run_id, event.attempt)
        if run is None:  # its run ended meanwhile (an internal error): the agent must not live on without one
            self.console.error(
                f"internal error: run {event.run_id} attempt {event.attempt} started an agent after "
                "its run ended; stopping it"
            )
            self.agent_stops.orphan(event.agent, event.run_id)
            return
        agent = event.agent
        if run.agent is agent:  # its next turn's process (a tell carried on): a restart must take back this one
            self.store.update_run(run.run_id, pid=agent.pid, create_time=agent.create_time)
            self.store.record_attempt(run.run_id, run.attempt, pid=agent.pid)
            return
        self.lc.attach(run, agent)
        if run.state is RunState.STARTING:
            self.lc.transition(
                run,
                RunState.RUNNING,
                pid=agent.pid,
                create_time=agent.create_time,
                log_path=str(run.log_path),
            )
            self.store.record_attempt(
                run.run_id, run.attempt, pid=agent.pid, started_at=run.started_at, log_path=str(run.log_path)
            )
            self.lc.arm(run, "timeout", run.role.timeout, TimeoutFired(run.run_id, run.attempt))
            self._check_stall_in(run, stall_seconds(run.role), self.clock.now().timestamp())
            self.start_faults.started(run.role.name)
        elif run.state is RunState.CANCELLING:  # cancelled while it was being started: stop it now
            self.agent_stops.stop(run, run.role.grace, interrupt_first=agent.capabilities.interrupt)
        elif run.state is RunState.STOPPING:
            self.agent_stops.stop(run, 0.0)

    def start_failed(self, event: AgentStartFailed) -> None:
        run = self._current(event.run_id, event.attempt)
        if run is None:
            return
        if run.state is RunState.STARTING and event.internal:  # our doing, not the role's: no failed attempt
            self.start_faults.failed(run, event.reason)
        elif run.state is RunState.STARTING:
            self.attempt_failed(run, event.reason, None)
        elif run.state.being_stopped:  # asked to stop while it was being started: nothing to stop now
            self._end_stopped(run, None, began=False)

    # ------------------------------------------------------------ exit
    def exited(self, event: RunExited) -> None:
        run = self._current(event.run_id, event.attempt)
        if run is None:
            return
        verdict = event.verdict
        code = verdict.returncode
        self.lc.exited(run, code, verdict.ended_at)
        agent = run.agent
        if agent is not None:
            if self.lc.record_figures(run, agent, verdict.session_id):
                self.figures_changed()
        if run.state.being_stopped:
            return  # a stop task owns this attempt; its StopDone sweeps it and ends the run once the tree is dead
        self.agent_stops.sweep(run)
        ran = run.elapsed(self.clock.monotonic())
        if self.pauses is not None and verdict.usage_limit is None:
            self.pauses.ran(run)
        if run.state is RunState.INTERRUPTING and verdict.interrupted and code != 0:  # a person's word: no redirect
            assert run.cancel is not None
            self.lc.end_attempt(run, "cancelled", run.cancel.line, code)
            self.lc.finish(run, RunState.CANCELLED, reason=run.cancel.line, exit_code=code)
            return
        decision = decisions.decide(self.end_hooks, run, verdict, self.console)
        if isinstance(decision, decisions.Park):
            decisions.park(self.lc, self.console, run, decision, code)
        elif isinstance(decision, decisions.Fail):
            self.attempt_failed(run, decision.reason, code, retry=decision.retry)
        else:
            self._by_the_rules(run, verdict, ran)

    def _by_the_rules(self, run: RoleRun, verdict: AttemptVerdict, ran: float) -> None:
        """The default end of an attempt that ended by itself, from its verdict."""
        code = verdict.returncode
        if verdict.usage_limit is not None and code != 0 and self.pauses is not None:
            self.pauses.limited(run, verdict.usage_limit, code)  # not an attempt: the account waits for its reset
            return
        elif verdict.budget_exceeded:
            self.attempt_failed(run, verdict.failure_reason or "per-run budget exceeded", code, retry=False)
        elif not verdict.succeeded and verdict.permanent_failure:
            self.attempt_failed(run, verdict.failure_reason or describe_exit(code), code, retry=False)
        elif verdict.succeeded:
            # an interrupt that came after the last turn had ended stopped nothing: that work succeeded
            self.crashes.note(run.role.name, ran, failed=False)
            warning = "; ".join(verdict.warnings) or None
            if warning:
                self.console.line(f"warning: {run.label}: {warning} (run {run.run_id})", role=run.role.name)
            self.lc.end_attempt(run, "succeeded", warning, 0)
            self.lc.finish(run, RunState.SUCCEEDED, reason=warning, exit_code=0)
        else:
            self.attempt_failed(run, verdict.failure_reason or describe_exit(code), code)

    def attempt_failed(self, run: RoleRun, reason: str, exit_code: int | None, retry: bool = True) -> None:
        """One attempt failed: retry after the backoff, give up into failed/, or return the memo (ending)."""
        role = run.role
        self.lc.end_attempt(run, "failed", reason, exit_code)
        self.console.line(f"{run.label} attempt {run.attempt} failed: {reason} (run {run.run_id})", role=role.name)
        if self.crashes.note(role.name, run.last_ran or 0.0, failed=True):
            self.lc.team_events(TeamEvent("crash_loop", role.name, run.memos[0].name, run.memos[0].subject, reason))
            self.begin_ending(
                Ending.GRACEFUL,
                f"critical role {role.name} crashed {self.crashes.counts[role.name]} times in a row, each within "
                f"{role.crash.window:g}s of its start (last: {reason}); see {run.log_path}",
                3,
            )
        decision = rules.after_failure(role, run.attempt, ending=self.ending() is not None, retry=retry)
        if decision.next is rules.Next.RETURN:
            self.lc.finish(
                run,
                RunState.RETURNED,
                reason=f"the orchestrator is ending; last attempt failed: {reason}",
                exit_code=exit_code,
            )
        elif decision.next is rules.Next.RETRY:
            self._retry(run, decision.delay, reason)
        else:
            self.lc.finish(run, RunState.FAILED, reason=reason, exit_code=exit_code)
            if role.stop_on_failure:
                self.begin_ending(Ending.GRACEFUL, f"role {role.name} has stop_on_failure and {run.label} failed", 1)

    def _retry(self, run: RoleRun, delay: float, reason: str, prefix: str = "", suffix: str = "") -> None:
        retry_number = run.attempt
        self.lc.wait_for_retry(run, delay, reason)
        self.console.line(
            f"{run.label} {prefix}retry {retry_number} of {run.role.retry.max} in {delay:g}s{suffix}",
            role=run.role.name,
        )

    def retry_due(self, event: RetryDue) -> None:
        run = self._current(event.run_id)
        if run is not None and run.state is RunState.RETRY_WAIT:
            self.lc.retry_due(run)

    # ------------------------------------------------------------ timeouts and stops
    def timed_out(self, event: TimeoutFired) -> None:
        run = self._current(event.run_id, event.attempt)
        if run is None or run.state not in (RunState.RUNNING, RunState.INTERRUPTING):
            return
        self.console.line(f"{run.label} passed its timeout of {run.role.timeout:g}s; stopping it", role=run.role.name)
        self.lc.time_out(run)
        self.agent_stops.stop(run, run.role.grace)

    def _check_stall_in(self, run: RoleRun, delay: float | None, since: float) -> None:
        if delay is not None:
            self.lc.arm(run, "stall", delay, StallCheck(run.run_id, run.attempt, since))

    def stall_check(self, event: StallCheck) -> None:
        """An attempt that has written nothing (no output, no event) for its ``stall_timeout`` is stopped by the
        kill ladder and fails, to be retried: a CLI waiting on a prompt nobody sees would say nothing until its
        timeout, every attempt."""
        run = self._current(event.run_id, event.attempt)
        stall = stall_seconds(run.role) if run is not None else None
        if run is None or stall is None or run.agent is None:
            return
        now = self.clock.now().timestamp()
        seen = run.agent.last_output()
        if run.state is not RunState.RUNNING or seen is None:  # a kept session waits for a tell; unknown output
            self._check_stall_in(run, stall, now)
            return
        since = max(event.since, seen)
        if now - since < stall:
            self._check_stall_in(run, since + stall - now, since)
            return
        stalled = f"stalled: no output for {duration_text(stall)} (the CLI may be waiting for a prompt it cannot show)"
        self.console.line(f"{run.label} {stalled}; stopping it", role=run.role.name)
        self.lc.team_events(TeamEvent("stalled", run.role.name, run.memos[0].name, run.memos[0].subject, stalled))
        self.lc.time_out(run, stalled)
        self.agent_stops.stop(run, run.role.grace)

    def stopped(self, event: StopDone) -> None:
        """The stop task ended the attempt's tree: the state says why it was stopped, and so how the run ends."""
        run = self._current(event.run_id, event.attempt)
        if run is None:
            return
        self.lc.stopped(run, event.report)
        # swept here, not at its exit: the exit may be told after this (its end is read in a worker thread) and
        # then finds no run, and a Ray attempt's actor, which holds its CPUs, is let go only by this sweep
        self.agent_stops.sweep(run)
        if run.state.being_stopped:
            self._end_stopped(run, run.exit_codes[-1] if run.exit_codes else None, began=True)

    def _end_stopped(self, run: RoleRun, code: int | None, *, began: bool) -> None:
        """End a run whose agent was being stopped as ``STOP_ENDS`` says for its state; ``began``: its agent
        had started (an attempt to complete on record)."""
        end = STOP_ENDS[run.state].stopped
        if end is RunState.CANCELLED:
            assert run.cancel is not None
            if began and run.cancel.previous is not RunState.RETRY_WAIT:
                self.lc.end_attempt(run, "cancelled", run.cancel.line, code)
            self.lc.finish(run, RunState.CANCELLED, reason=run.cancel.line, exit_code=code)
        elif end is RunState.RETURNED:
            self.lc.finish(run, RunState.RETURNED, reason=FORCED, exit_code=code)
        elif run.stalled is not None:  # TIMED_OUT: stopped for its silence, a failed attempt like any other
            self.attempt_failed(run, run.stalled, code)
        else:
            self._timed_out_for_good(run, code)

    def _timed_out_for_good(self, run: RoleRun, code: int | None) -> None:
        role = run.role
        reason = f"timed out after {role.timeout:g}s (attempt {run.attempt})"
        self.lc.end_attempt(run, "timed_out", reason, code)
        decision = rules.after_failure(role, run.attempt, ending=self.ending() is not None, timed_out=True)
        if decision.next is rules.Next.RETURN:
            self.lc.finish(run, RunState.RETURNED, reason=reason, exit_code=code)
        elif decision.next is rules.Next.RETRY:
            self._retry(run, decision.delay, reason, prefix=f"{reason}; ", suffix=" (retry_timeouts)")
        else:
            self.lc.finish(run, RunState.TIMED_OUT, reason=reason, exit_code=code)
            if role.stop_on_failure:
                self.begin_ending(Ending.GRACEFUL, f"role {role.name} has stop_on_failure and {run.label} timed out", 1)
