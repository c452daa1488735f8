"""The landing queue: ``orchestrator land MEMO|WORKSPACE [--into BRANCH]``, one landing at a time, oldest first.

The queue is the workspaces feature's, on the loop's thread; the git work of a landing (``landing.land``) runs on a
worker thread and comes back as a ``LandDone`` event. A workspace a run works in is not landed while it works: its
landing waits in the queue (others behind it go first) and, from the moment it is asked for, the workspace's next
memo waits for it. A landing that stopped on a conflict or a failed check sends a memo to the role that last worked
in the workspace, with the workspace in its front matter so that role works there again. The ``land`` request is
answered when its landing ends, or at its deadline with a line saying where it still is. Where the branch stood is
recorded before the rebase, so a landing the orchestrator's end interrupted is put back at the next start.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from orchestrator.control.protocol import FeatureRequest
from orchestrator.core.clock import iso
from orchestrator.core.errors import ControlError, UnknownMemoError
from orchestrator.intake import outbox
from orchestrator.supervisor import replies
from orchestrator.supervisor.extension import Handler, Host
from orchestrator.supervisor.feature_requests import Command, Needs
from orchestrator.workspaces import git, land_records, landing

LAND_WITHIN = 900.0  # how long `land` waits for its landing by default (the queue, the rebase, the check)
CALLED_OFF = "the orchestrator ended before it landed"  # the reason of a landing still queued when `up` ends


class LandRequest(FeatureRequest):
    """``land``: land workspace ``target`` (its name, or a memo worked on in it) into ``into`` (empty: its base)."""

    op: Literal["land"] = "land"
    target: str = Field(min_length=1)
    into: str = ""
    within: float = Field(LAND_WITHIN, gt=0, le=86400)


@dataclass(frozen=True)
class LandDone:
    """A landing's git work is over (on its worker thread): how it went, and the memo it wrote, if any."""

    seq: int
    result: landing.Result
    memo: Path | None = None
    error: str | None = None


@dataclass
class Job:
    """One landing asked for, while it waits or lands."""

    seq: int
    plan: landing.Plan
    told: list[str]  # the roles that worked in the workspace, latest first
    reply_to: str | None
    done: asyncio.Future[dict[str, Any]]
    waiting_for: int | None = None  # the run it waits for, once said
    state: str = "queued"
    task: asyncio.Task[None] | None = field(default=None, repr=False)


def who(owner: int) -> str:
    """The run a landing waits for, in words (``busy``'s 0: a run waiting for a person with its work there)."""
    return f"run {owner}" if owner else "a run waiting for a person"


class LandQueue:
    """The queue of landings of one orchestrator; ``busy(name)`` is the run working in a workspace (0: a run waiting
    for a person, which its answered memo carries on), or None."""

    def __init__(self, host: Host, busy: Callable[[str], int | None]) -> None:
        self.host = host
        self.busy = busy
        self.jobs: list[Job] = []  # oldest first; the one landing is the one whose state is "landing"
        self.stopping = threading.Event()
        self.recovered = False  # what a previous orchestrator left is put back first: nothing lands before
        land_records.ensure(host.store.db)

    # ------------------------------------------------------------ what the workspaces feature asks
    def commands(self) -> list[Command[Any]]:
        return [Command(LandRequest, self.ask, Needs("land"), command="land")]

    def handlers(self) -> Mapping[type, Handler]:
        return {LandDone: self._done}

    def lands_now(self, name: str) -> bool:
        """Whether workspace ``name`` is being landed now (no run may start there)."""
        return any(job.plan.name == name and job.state == "landing" for job in self.jobs)

    def wanted(self, name: str) -> bool:
        """Whether a landing of workspace ``name`` waits or runs (its next memo waits for it)."""
        return any(job.plan.name == name for job in self.jobs)

    def snapshot(self) -> dict[str, Any]:
        if not self.jobs:
            return {}
        return {
            "landings": [
                {
                    "workspace": job.plan.name,
                    "into": job.plan.into,
                    "state": job.state,
                    "waits_for_run": job.waiting_for or None,
                    "waits_for_person": job.waiting_for == 0,
                }
                for job in self.jobs
            ]
        }

    def stop(self) -> None:
        """The orchestrator is ending: a running check is stopped, and every landing still waiting is told, and on
        record as refused."""
        self.stopping.set()
        at = iso(self.host.clock.now())
        for job in self.jobs:
            if job.state == "queued":
                land_records.ended(self.host.store.db, job.seq, job.plan.into, at, "refused", None, CALLED_OFF)
            if job.state == "queued" and not job.done.done():
                job.done.set_exception(
                    ControlError(f"landing {job.plan.name} was called off: the orchestrator is ending")
                )
                job.done.exception()

    # ------------------------------------------------------------ a request
    def ask(self, request: LandRequest) -> Awaitable[dict[str, Any]]:
        """Queue the landing ``request`` names; the awaitable of its answer."""
        if self.host.ending():  # nothing new starts: it would wait in the queue only to be called off
            raise ControlError(f"land {request.target}: the orchestrator is ending; ask again once `up` runs again")
        db = self.host.store.db
        work = land_records.workspace_of(db, request.target)
        if work is None:
            raise UnknownMemoError(
                f"land: {request.target!r} names no workspace and no memo that worked in one; "
                "see `orchestrator status` or `orchestrator history`"
            )
        roles = self.host.config.roles
        workers = land_records.workers(db, work.name)
        told = [role for role, _ in workers if role in roles]
        checks = [roles[role].workspace for role in told if roles[role].workspace.check]
        settings = checks[0] if checks else None
        plan = landing.Plan(
            root=self.host.config.root,
            name=work.name,
            folder=Path(work.folder),
            branch=work.branch,
            into=request.into or None,
            check=tuple(settings.check) if settings else (),
            check_timeout=settings.check_timeout if settings else 1800.0,
            identity={},
        )
        seq = land_records.asked(db, work.name, work.branch, plan.into, iso(self.host.clock.now()), request.who)
        done: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        job = Job(seq, plan, told, workers[0][1] if workers else None, done)
        self.jobs.append(job)
        self.pump()
        return self._answer(job, request.within)

    async def _answer(self, job: Job, within: float) -> dict[str, Any]:
        def still() -> str:
            where = {
                "queued": f"still queued (behind {self._ahead(job)} landing(s))",
                "landing": "still landing (its rebase or its check)",
            }.get(job.state, job.state)
            if job.waiting_for is not None and job.state == "queued":
                where = f"still waiting for {who(job.waiting_for)}, which works in it"
            return f"landing {job.plan.name}: {where} after {within:g}s; it goes on (`orchestrator status` shows it)"

        return await replies.within(asyncio.shield(job.done), within, self.host.clock, still)

    def _ahead(self, job: Job) -> int:
        return self.jobs.index(job) if job in self.jobs else 0

    # ------------------------------------------------------------ one at a time
    def pump(self) -> None:
        """Start the oldest landing whose workspace no run works in, unless one lands already or ``up`` ends (its
        stop calls off the ones still queued)."""
        ending = self.stopping.is_set() or self.host.ending()
        if ending or not self.recovered or any(job.state == "landing" for job in self.jobs):
            return
        for job in self.jobs:
            owner = self.busy(job.plan.name)
            if owner is None:
                job.state = "landing"
                job.task = asyncio.ensure_future(self._work(job, self.host.clock.now()))
                return
            if job.waiting_for != owner:
                job.waiting_for = owner
                self.host.console.line(f"landing {job.plan.name} waits for {who(owner)}, which works in it")

    async def _work(self, job: Job, now: datetime) -> None:
        loop = asyncio.get_running_loop()
        into, start = await loop.run_in_executor(None, landing.where, job.plan)
        if start is not None:  # on record before the rebase: a kill of `up` mid-landing is put back at its restart
            land_records.began(self.host.store.db, job.seq, into, str(job.plan.folder), start)
            job.plan = dataclasses.replace(job.plan, start=start)
        done = await loop.run_in_executor(None, self._land, job, now)
        self.host.post(done)

    async def recover(self) -> None:
        """At the start: the landings a previous orchestrator ended under are closed as refused; one that was
        under way has its workspace put back where it found it (a rebase aborted, the branch reset), in one line."""
        db = self.host.store.db
        ours = {job.seq for job in self.jobs}  # asked of this orchestrator already (its socket listens first)
        for row in land_records.unfinished(db):
            if row.seq in ours:
                continue
            at = iso(self.host.clock.now())
            if row.start is None or row.folder is None or row.target is None:  # queued, never begun: none touched
                land_records.ended(db, row.seq, row.target, at, "refused", None, CALLED_OFF)
                continue
            result = await asyncio.to_thread(
                landing.interrupted,
                self.host.config.root,
                row.name,
                Path(row.folder),
                row.branch,
                row.target,
                row.start,
            )
            self.host.console.line(result.reason)
            land_records.ended(db, row.seq, row.target, at, result.outcome, result.commit, result.reason)
        self.recovered = True
        self.pump()

    def _land(self, job: Job, now: datetime) -> LandDone:
        """On the worker thread: the git work, and the memo of a conflict or a failed check."""
        plan = job.plan
        try:
            if not plan.identity:
                plan = dataclasses.replace(plan, identity=git.identity(plan.root))
            result = landing.land(plan, self.stopping)
            memo = None
            if result.outcome in ("conflict", "check failed") and job.told and not self.stopping.is_set():
                memo = self._write_memo(job, result, now)
            return LandDone(job.seq, result, memo)
        except Exception as exc:  # noqa: BLE001 - a bug: its landing ends, the orchestrator goes on, the log has it
            into = plan.into or "?"
            result = landing.Result(
                "refused", f"landing {plan.name}: internal error: {type(exc).__name__}: {exc}", into
            )
            return LandDone(job.seq, result, None, traceback.format_exc())

    def _write_memo(self, job: Job, result: landing.Result, now: datetime) -> Path:
        plan = job.plan
        to = job.told[0]
        if result.outcome == "conflict":
            subject = f"landing {plan.name} into {result.into}: conflicts in {', '.join(result.files)[:80]}"
            what = (
                f"Landing `{plan.branch}` into `{result.into}` stopped: these files conflict with `{result.into}`:\n\n"
                + "".join(f"- {name}\n" for name in result.files)
            )
            todo = (
                f"Rebase onto {result.into} and resolve: in this workspace run `git rebase {result.into}`, resolve the "
                "files above, `git add` them and `git rebase --continue`; then ask for the landing again "
                f"(`orchestrator land {plan.name}`)."
            )
        else:
            subject = f"landing {plan.name} into {result.into}: the check failed"
            what = (
                f"Landing `{plan.branch}` into `{result.into}` stopped: the check `{' '.join(plan.check)}` failed on the "
                f"branch rebased onto `{result.into}`. Its last lines:\n\n```\n{result.tail}\n```\n"
            )
            todo = (
                f"Rebase onto {result.into} and fix what the check says (run `git rebase {result.into}` and "
                f"`{' '.join(plan.check)}` in this workspace), commit, then ask for the landing again "
                f"(`orchestrator land {plan.name}`)."
            )
        body = (
            f"{what}\nNothing changed on `{result.into}`, and `{plan.branch}` is as it was before the landing.\n\n"
            f"{todo}\n"
        )
        sent = outbox.write_memo(
            plan.root,
            to,
            body,
            subject=subject,
            sender="orchestrator",
            now=now,
            reply_to=job.reply_to,
            tags=["land"],
            workspace=plan.name,
        )
        return sent.path

    # ------------------------------------------------------------ its end, on the loop
    def _done(self, event: LandDone) -> None:
        job = next((job for job in self.jobs if job.seq == event.seq), None)
        if job is None:
            return
        self.jobs.remove(job)
        result = event.result
        console = self.host.console
        if event.error is not None:
            console.error(f"{result.reason}\n{event.error}")
        land_records.ended(
            self.host.store.db,
            job.seq,
            result.into,
            iso(self.host.clock.now()),
            result.outcome,
            result.commit,
            result.reason,
        )
        told = None
        if event.memo is not None and job.told:
            told = job.told[0]
            self.host.offer_memo(told, event.memo)
        if result.landed:
            console.line(result.reason)
        elif event.error is None:
            console.line(result.reason + (f"; a memo went to {told}" if told else ""))
        if not job.done.done():
            job.done.set_result(
                {
                    "workspace": job.plan.name,
                    "branch": job.plan.branch,
                    "into": result.into,
                    "landed": result.landed,
                    "outcome": result.outcome,
                    "reason": result.reason,
                    "files": list(result.files),
                    "tail": result.tail,
                    "commit": result.commit,
                    "previous": result.previous,
                    "memo": event.memo.name if event.memo else None,
                    "to": told,
                }
            )
        self.pump()
