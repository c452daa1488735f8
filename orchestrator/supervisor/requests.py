"""Requests from the control channel, answered by the loop: cancel, interrupt, tell (status and stop are in the loop).

Each handler runs in the loop, changes runs only through the lifecycle, and
answers through the request's future: at once when it can, or when the runs it
stopped have ended (a cancel answers only once the work is stopped for good).
A refusal is an ``OrchestratorError`` raised here; the loop turns it into the
error answer.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any, cast

from orchestrator.config import RoleRun
from orchestrator.console import Console
from orchestrator.control import lookup
from orchestrator.control.client import ANSWER_WITHIN
from orchestrator.control.lookup import Candidate
from orchestrator.core.errors import (
    AmbiguousMemoError,
    ControlError,
    DeadlineError,
    MemoFinishedError,
    OrchestratorError,
    UnknownMemoError,
    UnsupportedError,
    UsageError,
)
from orchestrator.core.events import CancelRequested, Event, InterruptRefused, InterruptRequested, TellRequested
from orchestrator.core.run import CancelOrder, MemoRef
from orchestrator.core.states import RunState
from orchestrator.intake.memo import WAITING
from orchestrator.intake.queue import Intake
from orchestrator.store import Store
from orchestrator.supervisor import replies
from orchestrator.supervisor.agent_stops import AgentStops
from orchestrator.supervisor.lifecycle import Lifecycle

ANSWER_SLACK = 5.0  # an interrupt answers at the latest this long after the role's grace, whatever the agent does
TELL_WITHIN = 20.0  # a tell's text is taken by then, or the answer says it was not (the client waits 30 s)


class Requests:
    """The cancel, interrupt and tell handlers."""

    def __init__(
        self,
        lifecycle: Lifecycle,
        intake: Intake,
        agent_stops: AgentStops,
        store: Store,
        console: Console,
        post: Callable[[Event], None],
    ) -> None:
        self.lc = lifecycle
        self.config = lifecycle.config
        self.intake = intake
        self.agent_stops = agent_stops
        self.store = store
        self.console = console
        self.post = post
        self.tasks: set[asyncio.Task[Any]] = set()

    def find(self, query: str) -> list[Candidate]:
        """Every live or waiting memo ``query`` names."""
        return lookup.find(list(self.lc.runs.values()), self.config.roles, self.config.role_dir, query)

    def _keep(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # ------------------------------------------------------------ cancel
    def cancel(self, event: CancelRequested) -> None:
        """Cancel one memo, every match (``all``), or all of a role's work (``role``)."""
        targets = self._cancel_targets(event)
        if targets is None:
            event.reply.set_result(
                {"cancelled": [], "role": event.role, "message": f"role {event.role} has no queued or running work"}
            )
            return
        # queued memos first, before the loop runs anything else: a slot freed meanwhile (even by this very cancel's
        # stop) would otherwise let the scheduler claim a memo that was found queued and is about to be cancelled
        answers: dict[int, tuple[asyncio.Future[Any], dict[str, Any]]] = {}
        for cand in targets:
            if cand.run is None:  # in its inbox, or in waiting/ (its run asked a person): its receipt says which
                answers[id(cand)] = self._cancel_queued(cand, event), {}
        for cand in targets:
            if cand.run is not None:
                answers[id(cand)] = self._cancel_run(cand, event)
        waits = [answers[id(c)] for c in targets]
        single = len(waits) == 1 and not event.role
        stopped = [c.run for c in targets if c.run is not None]
        seconds = replies.stop_deadline(stopped)

        def still() -> str:
            left = [run for run in stopped if run.run_id in self.lc.runs]
            return f"cancel: after {seconds:g}s still waiting for " + _runs_line(left)

        async def answer() -> None:
            everyone = asyncio.gather(*(f for f, _ in waits), return_exceptions=True)  # each one's error retrieved
            try:
                ends = await replies.within(everyone, seconds, self.lc.clock, still)
                failed = next((end for end in ends if isinstance(end, BaseException)), None)
                if failed is not None:  # (a waiter is only ever cancelled by a deadline or the orchestrator's end)
                    raise failed if isinstance(failed, Exception) else ControlError("cancel: its wait was called off")
            except Exception as exc:  # noqa: BLE001 - one failed cancel fails the answer, with its own error
                if not event.reply.done():
                    event.reply.set_exception(exc)
                return
            results = [{**cast(dict[str, Any], end), **extra} for end, (_, extra) in zip(ends, waits, strict=True)]
            if not event.reply.done():
                event.reply.set_result(results[0] if single else {"cancelled": results, "count": len(results)})

        self._keep(answer())

    def _cancel_targets(self, event: CancelRequested) -> list[Candidate] | None:
        if event.role:
            if event.role not in self.config.roles:
                raise UnknownMemoError(f"no role {event.role!r} in roles.yaml ({', '.join(self.config.roles)})")
            found = lookup.role_candidates(list(self.lc.runs.values()), event.role, self.config.role_dir(event.role))
            return found or None
        query = event.memo or ""
        if not query:
            raise UsageError("name a memo to cancel (its id, file name or path), or use --role ROLE")
        targets = self.find(query)
        if not targets:
            gone = lookup.waiting_in_gone_role(self.config.root, self.config.roles, query)
            if gone:
                raise UsageError(gone)
            finished = lookup.finished_message(self.store, query)
            if finished:
                raise MemoFinishedError(finished)
            raise UnknownMemoError(f"no queued or running memo matches {query!r}; `orchestrator status` lists them")
        distinct = {(c.role, c.name, c.run.run_id if c.run else None) for c in targets}
        if len(distinct) > 1 and not event.all:
            listing = "; ".join(c.describe() for c in targets)
            raise AmbiguousMemoError(
                f"{query!r} matches {len(targets)} memos: {listing}. Name one by file name or path, or use --all"
            )
        return targets

    def _cancel_queued(self, cand: Candidate, event: CancelRequested) -> asyncio.Future[Any]:
        """A memo still in its inbox: a run on record that ends at once in cancelled/; it never runs."""
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.intake.drop(cand.role, cand.path)
        if not os.path.lexists(cand.path):
            reply.set_exception(UnknownMemoError(f"memo {cand.name} left the inbox before it could be cancelled"))
            return reply
        header = lookup.read_header(cand.path)
        ref = MemoRef(cand.name, cand.path, header.id, header.subject, header.reply_to, header.sender)
        run = self.lc.open(self.config.roles[cand.role], [ref], arrival=0, attempt=0)
        order = CancelOrder(
            event.who, event.reason, RunState.QUEUED, "waiting" if cand.path.parent.name == WAITING else None
        )
        self.lc.wait_for_end(run, reply)
        self.lc.finish(run, RunState.CANCELLED, reason=order.line, order=order)
        return reply

    def _cancel_run(self, cand: Candidate, event: CancelRequested) -> tuple[asyncio.Future[Any], dict[str, Any]]:
        """A run in the table: stopped at whatever stage it is, answered when it has ended (with what to add to
        its receipt: a run already being cancelled answers with the first cancel's receipt and a note)."""
        run = cand.run
        assert run is not None
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.lc.wait_for_end(run, reply)
        previous = run.state
        if run.settling is not None:  # its agent has ended; its end (a workspace's commit) is being made
            return reply, {"previous_state": previous.value, "note": f"it had already ended ({run.settling})"}
        if previous is RunState.CANCELLING:
            return reply, {"previous_state": previous.value, "note": "it was already being cancelled"}
        order = CancelOrder(event.who, event.reason, previous)
        if previous is RunState.RETRY_WAIT:
            self.lc.finish(run, RunState.CANCELLED, reason=order.line, order=order)
            return reply, {}
        self.lc.transition(run, RunState.CANCELLING, order=order, reason=order.line)  # on record, should we die mid-way
        self.console.line(
            f"cancelling {run.label} (run {run.run_id}, was {previous.value}) for {event.who}", role=run.role.name
        )
        if run.agent is not None:  # else it is still starting: its start (or failure) brings the stop
            self.agent_stops.stop(run, run.role.grace, interrupt_first=run.agent.capabilities.interrupt)
        return reply, {}

    # ------------------------------------------------------------ interrupt and tell
    def _running(self, query: str, what: str) -> tuple[RoleRun, Candidate]:
        candidates = [c for c in self.find(query) if c.run is not None] if query else []
        if not candidates:
            finished = lookup.finished_message(self.store, query) if query else None
            if finished:
                raise MemoFinishedError(finished)
            raise UnknownMemoError(f"no running memo matches {query!r}")
        if len({c.run.run_id for c in candidates if c.run}) > 1:
            raise AmbiguousMemoError(f"{query!r} matches several runs: " + "; ".join(c.describe() for c in candidates))
        run = candidates[0].run
        assert run is not None
        if run.settling is not None:
            raise ControlError(f"memo {candidates[0].name}'s agent has ended ({run.settling}); nothing to {what}")
        if run.state is RunState.STARTING:
            raise ControlError(f"memo {candidates[0].name}'s agent is still starting; nothing to {what} yet, try again")
        if run.state is not RunState.RUNNING:
            raise ControlError(f"memo {candidates[0].name} is {run.state.value}, not running; nothing to {what}")
        agent = run.agent  # a running run's agent is started: it is never None
        if agent is None or not (agent.capabilities.interrupt if what == "interrupt" else agent.capabilities.tell):
            raise UnsupportedError(_unsupported(run, what))
        return run, candidates[0]

    def interrupt(self, event: InterruptRequested) -> None:
        """End an SDK agent's turn: the run ends as cancelled (with ``keep``, the session stays open for a tell)."""
        run, cand = self._running(event.memo, "interrupt")
        agent, attempt = run.agent, run.attempt
        assert agent is not None  # _running checked it
        answer = {"memo": cand.name, "run_id": run.run_id, "role": run.role.name}
        ended: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not event.keep:
            order = CancelOrder(event.who, event.reason, RunState.RUNNING)
            self.lc.transition(run, RunState.INTERRUPTING, order=order, reason=order.line)
            self.lc.wait_for_end(run, ended)  # here, in the loop: the task below only awaits it

        seconds = min(ANSWER_WITHIN, run.role.grace + ANSWER_SLACK)  # for both waits below, together
        until = self.lc.clock.monotonic() + seconds

        def still() -> str:
            return (
                f"interrupt: after {seconds:g}s run {run.run_id}'s agent ({run.label}) has still not taken the "
                f"interrupt; it is {run.state.value} (`orchestrator cancel {cand.name}` stops it)"
            )

        async def send() -> None:
            try:
                await replies.within(agent.interrupt(keep=event.keep), seconds, self.lc.clock, still)
            except DeadlineError as exc:
                if not event.reply.done():
                    event.reply.set_exception(exc)
                return
            except OrchestratorError as exc:
                self.post(InterruptRefused(run.run_id, attempt))
                if not event.reply.done():
                    event.reply.set_exception(exc)
                return
            self.console.line(f"interrupted {run.label} (run {run.run_id})", role=run.role.name)
            if event.keep or run.state.finished:
                if not event.reply.done():
                    event.reply.set_result({**answer, "state": run.state.value})
                return
            limit = asyncio.ensure_future(self.lc.clock.sleep(until - self.lc.clock.monotonic()))
            await asyncio.wait({ended, limit}, return_when=asyncio.FIRST_COMPLETED)
            limit.cancel()
            state = ended.result()["state"] if ended.done() and not ended.exception() else run.state.value
            if not event.reply.done():
                event.reply.set_result({**answer, "state": state})

        self._keep(send())

    def interrupt_refused(self, event: InterruptRefused) -> None:
        """The interrupt could not be delivered (the session had ended): its exit must not count as one."""
        run = self.lc.runs.get(event.run_id)
        if run is None or run.settling is not None:  # ended, or ending: too late to change anything
            return
        if run.attempt == event.attempt and run.state is RunState.INTERRUPTING:
            self.lc.transition(run, RunState.RUNNING, reason=None)  # its cancel order is withdrawn with it

    def tell(self, event: TellRequested) -> None:
        """A follow-up message into an agent's session (an SDK agent's at once; a program's, such as Codex's, kept
        for the end of its turn: the receipt's ``delivery`` says which)."""
        if not event.text.strip():
            raise UsageError("nothing to tell: give the text as an argument or on standard input")
        run, cand = self._running(event.memo, "tell")
        agent = run.agent
        assert agent is not None  # _running checked it

        def still() -> str:
            return f"tell: after {TELL_WITHIN:g}s run {run.run_id}'s agent ({run.label}) has still not taken the text"

        async def send() -> None:
            try:
                delivery = await replies.within(agent.tell(event.text), TELL_WITHIN, self.lc.clock, still)
            except OrchestratorError as exc:
                if not event.reply.done():
                    event.reply.set_exception(exc)
                return
            first_line = event.text.splitlines()[0][:80] if event.text.splitlines() else ""
            then = f" ({delivery})" if delivery else ""
            self.console.line(f"told {run.label} (run {run.run_id}){then}: {first_line}", role=run.role.name)
            if not event.reply.done():
                answer = {"memo": cand.name, "run_id": run.run_id, "role": run.role.name, "state": run.state.value}
                event.reply.set_result({**answer, "delivery": delivery} if delivery else answer)

        self._keep(send())


def _runs_line(runs: list[RoleRun]) -> str:
    """What a cancel still waits for, in one line: each run, its memo and state, and where to look."""
    if not runs:
        return "their ends to be answered (they ended; `orchestrator status` shows how)"
    named = ", ".join(f"run {r.run_id} ({r.role.name}, {r.label}, {r.state.value})" for r in runs[:5])
    more = f" and {len(runs) - 5} more" if len(runs) > 5 else ""
    return f"{named}{more} to end; the stop goes on (`orchestrator status` shows when it ends)"


def _unsupported(run: RoleRun, what: str) -> str:
    backend = run.role.backend
    instead = run.agent.capabilities.instead if run.agent is not None else None  # its backend's own advice
    if what == "interrupt":
        return (
            f"role {run.role.name} uses the {backend} backend, which cannot interrupt a turn; "
            "use `orchestrator cancel` to stop it" + ("" if instead else ", or set `backend: sdk`")
        )
    return f"role {run.role.name} uses the {backend} backend, which cannot take follow-up messages; " + (
        instead or "set `backend: sdk` for that"
    )
