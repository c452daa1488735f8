"""What follows the end of a run: the line for people, the notice for the coordinator, the receipt for a waiter.

Listens to the lifecycle's ``RunFinished``; it changes no run. A cancellation
is put on record (who, when, why, what was running) and told to the ``notify``
role, and every reply that waited for the run's end (``cancel``,
``interrupt``) is answered with the receipt built here.
"""

from __future__ import annotations

from typing import Any

from orchestrator.config import Config, RoleRun
from orchestrator.console import Console
from orchestrator.core.clock import Clock, iso
from orchestrator.core.events import RunFinished
from orchestrator.core.states import RunState
from orchestrator.core.view import CancelView, RunView
from orchestrator.intake import notices
from orchestrator.store import Store


class Announcer:
    """Tells people and the coordinator how each run ended, and answers those who waited for it."""

    def __init__(self, config: Config, store: Store, console: Console, clock: Clock) -> None:
        self.config = config
        self.store = store
        self.console = console
        self.clock = clock

    def __call__(self, event: RunFinished) -> None:
        run, state = event.run, event.state
        receipt: dict[str, Any]
        if state is RunState.CANCELLED:
            receipt = self._cancelled(event)
        else:
            self._say(event)
            if not run.waiters:
                return  # nobody waits for this end: no receipt to make
            receipt = RunView.from_run(run, self.clock.monotonic(), state=state.value, reason=event.reason).to_json()
        for waiter in run.waiters:
            if not waiter.done():
                waiter.set_result(receipt)

    def _say(self, event: RunFinished) -> None:
        run, state, role = event.run, event.state, event.run.role.name
        names = notices.name_list([p.name for p in event.moved])
        if state is RunState.SUCCEEDED:
            ran = run.elapsed(self.clock.monotonic())
            self.console.line(
                f"done {run.label} in {ran:.1f}s (run {run.run_id}); archived {len(event.moved)} memo(s)", role=role
            )
            notify = self.config.notify
            if event.reason and notify and notify != role:  # archived with a warning (on_denied: warn)
                notice = notices.write_warning_notice(
                    self.config, notify, run, event.reason, event.moved, self.clock.now()
                )
                self.console.line(f"told {notify}: {notice.name}", role=role)
        elif state is RunState.RETURNED and event.announce:
            self.console.line(f"returned {names} to the inbox: {event.reason} (run {run.run_id})", role=role)
        elif state in (RunState.FAILED, RunState.TIMED_OUT):
            if run.attempt == 0:  # a memo that could not run, or whose question nobody answered in time
                self.console.line(f"{names or run.label} {event.reason}; moved to failed/", role=role)
            else:
                self.console.line(
                    f"{state.value} {run.label}: {event.reason}; moved to failed/ (run {run.run_id})", role=role
                )
            notify = self.config.notify
            if notify and notify != role:
                notice = notices.write_failure_notice(
                    self.config, notify, run, state, event.reason or "", event.moved, self.clock.now()
                )
                self.console.line(f"told {notify}: {notice.name}", role=role)

    def _cancelled(self, event: RunFinished) -> dict[str, Any]:
        """On record and told: who cancelled what, when, why, and what was running."""
        run = event.run
        order = run.cancel
        who = order.who if order else "unknown"
        reason = order.reason if order else ""
        previous = order.previous if order else event.previous
        found = order.found if order else previous.value  # "waiting" for a memo whose run asked a person
        report = run.stop_report
        pids = list(report.pids) if report is not None else []
        seconds = round(report.seconds, 3) if report is not None else 0.0
        ran = self._ran(run, previous)
        now = self.clock.now()
        when = iso(now)
        first = run.memos[0]
        notice = None
        # the coordinator is told even of its own cancelled work (its inbox is its memory), but never of a notice's
        if self.config.notify and first.sender != "orchestrator":
            notice = notices.write_cancel_notice(
                self.config,
                self.config.notify,
                run,
                event.moved,
                who=who,
                reason=reason,
                previous=found,
                ran_seconds=ran,
                pids=pids,
                when=when,
                now=now,
            )
        for memo in run.memos:
            self.store.record_cancellation(
                run_id=run.run_id,
                role=run.role.name,
                memo=memo.name,
                memo_id=memo.memo_id or memo.name.removesuffix(".md"),
                subject=memo.subject,
                cancelled_at=when,
                who=who,
                reason=reason,
                previous_state=found,
                pids=pids,
                seconds=seconds,
                ran_seconds=ran,
                log_path=str(run.log_path) if run.log_path else None,
                notice_path=str(notice) if notice else None,
            )
        how = f"; {len(pids)} process(es) ended in {seconds:.2f}s" if report is not None else ""
        self.console.line(
            f"cancelled {run.label} (was {found}, run {run.run_id}) by {who}" + (f": {reason}" if reason else "") + how,
            role=run.role.name,
        )
        return CancelView.from_run(
            run,
            self.clock.monotonic(),
            state=RunState.CANCELLED.value,
            previous_state=found,
            pids=pids,
            seconds=seconds,
            escalated=bool(report.escalated) if report is not None else False,
            survivors=list(report.survivors) if report is not None else [],
            moved_to=[str(p) for p in event.moved],
            notice=str(notice) if notice else None,
            reason=reason,
        ).to_json()

    def _ran(self, run: RoleRun, previous: RunState) -> float | None:
        """How long the agent had run: the current attempt, or the last one for a run waiting for its retry."""
        if previous.live and run.started_mono is not None:
            return run.elapsed(self.clock.monotonic())
        return run.last_ran
