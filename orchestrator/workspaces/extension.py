"""The workspaces feature: each run of a ``workspace: {mode: worktree}`` role works in a git worktree of its
conversation, one run at a time, and each attempt is a transaction on the work.

Before every start (``prepare``, awaited, its git work on a thread) the workspace is made or reused, the last
attempt's leftovers are set aside, and the agent is moved into it with ``ORCHESTRATOR_WORKSPACE``,
``ORCHESTRATOR_BRANCH`` and ``ORCHESTRATOR_BASE``. As a run ends, before its memo moves (``before_finish``, the one
hook every end passes, cancel and forced stop included; its git work is the awaitable it returns, done on a thread
while the run settles), a success's work is committed on the branch and any other end's work is kept under
``refs/orchestrator/attempts/<name>/<run>-<attempt>`` with the workspace put back where the attempt began.
Landing a workspace's branch (``orchestrator land``) goes through this feature's queue (``land``): no run starts in
a workspace while it lands, and a workspace's next memo waits for a landing asked for before it. A memo for a busy workspace waits in its queue
(``waits``), and the role's memos for other workspaces go before it. A run that ends
waiting for a person (``waiting/``, orchestrator/asks) keeps its work where it is, and no other memo works there
until its own memo, answered, takes it on (or is cancelled or failed; the folder says which after a restart).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.agents.spec import LaunchSpec, SpawnError
from orchestrator.config import Role, RoleRun
from orchestrator.core.agent import AttemptVerdict
from orchestrator.core.clock import Timer, iso
from orchestrator.core.events import RunFinished
from orchestrator.core.states import RunState
from orchestrator.intake.memo import WAITING
from orchestrator.supervisor.decisions import DEFAULT, EndDecision, Fail
from orchestrator.supervisor.extension import WAITS_PASSED, Extension, Handler, Host
from orchestrator.supervisor.feature_requests import Command
from orchestrator.workspaces import copying, git, ports, records, retire
from orchestrator.workspaces.land import LandQueue
from orchestrator.workspaces.landing import BASE_KEY
from orchestrator.workspaces.naming import memo_key, workspace_and_memo
from orchestrator.workspaces.unfinished import unfinished

HOLD = "workspace"  # the source of the holds this feature puts on a role
WAIT_STEP = 0.05  # how often a start for a busy workspace looks again
MEASURE_EVERY = 60.0  # seconds between two measures of the workspaces' disk use, at most
SHOWN_WAITS = 20  # of a role's first queued memos, those that wait for their workspace are in ``status``


def attempt_ref(name: str, run_id: int, attempt: int) -> str:
    """Where a set-aside attempt's work is kept."""
    return f"{git.ATTEMPTS_REF}/{name}/{run_id}-{attempt}"


def message(run: RoleRun) -> str:
    """The commit message of a run's work: ``<role>: <subject> (memo <id>, run N)``."""
    memo = run.memos[0] if run.memos else None
    subject = (memo.subject if memo else None) or run.label
    return f"{run.role.name}: {subject} (memo {memo.label if memo else '-'}, run {run.run_id})"


class Workspaces(Extension):
    """A git worktree per conversation for the roles that ask for one, and one run at a time in each."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.root = host.config.root
        self.owners: dict[str, int] = {}  # workspace name -> the run working in it
        self.waiting: dict[str, str] = {}  # workspace name -> the memo waiting for a person with its work there
        self.names: dict[Path, tuple[str, str]] = {}  # a queued memo -> its workspace and its key (read once)
        self.queued: dict[str, str] = {}  # a named memo's id -> its workspace (a reply to it is worked on there)
        self.identity: dict[str, str] | None = None
        self.making = asyncio.Lock()
        self.disk: dict[str, Any] | None = None  # the last measure of the workspaces' folders (``status``)
        self.measured: float | None = None  # when it was asked (the clock's monotonic time)
        self.measuring: asyncio.Future[dict[str, Any]] | None = None
        self.where: dict[int, tuple[str, str]] = {}  # a live run -> its workspace and branch (``status``)
        self.later: Timer | None = None  # a measure asked for within the minute, due when it is up
        records.ensure(host.store.db)
        ports.ensure(host.store.db)
        self.landings = LandQueue(host, lambda name: self._busy(name, None))

    # ------------------------------------------------------------ landing (workspaces/land.py)
    def requests(self) -> Sequence[Command[Any]]:
        return self.landings.commands()

    def handlers(self) -> Mapping[type, Handler]:
        return self.landings.handlers()

    async def open(self) -> None:
        await self.landings.recover()  # before any run starts: a landing `up` ended under is put back first

    def _isolated(self) -> list[Role]:
        return [role for role in self.host.config.roles.values() if role.workspace.isolated]

    def _name(self, role: Role, path: Path) -> tuple[str, str]:
        """The workspace of the memo at ``path`` and the memo's key (``naming.memo_key``), read once."""
        known = self.names.get(path)
        if known is None:
            known = self.names[path] = workspace_and_memo(self.host.store.db, role, path, self.queued)
            if known[1].startswith("id:"):
                self.queued[known[1][3:]] = known[0]
        return known

    def _busy(self, name: str, run_id: int | None, memo: str | None = None) -> int | None:
        """The other live run working in workspace ``name`` (0: a run waiting for a person, unless ``memo``, a memo's
        key, is its own memo), or None."""
        if name in self.waiting and self.waiting[name] != memo:
            return 0
        owner = self.owners.get(name)
        if owner is None or owner == run_id:
            return None
        if owner not in self.host.runs():
            self.owners.pop(name, None)
            return None
        return owner

    # ------------------------------------------------------------ what the workspaces hold on disk
    def start(self) -> None:
        """The memos that wait for a person with their work in a workspace, as the folders say (a restart); then a
        first measure of the disk."""
        db = self.host.store.db
        for role in self._isolated():
            folder = self.host.config.role_dir(role.name) / WAITING
            for path in sorted(folder.glob("*.md")) if folder.is_dir() else ():
                name, memo = workspace_and_memo(db, role, path)
                self.waiting[name] = memo
        for work in records.all_waiting(db):  # answered before the restart, its memo not started yet: still its own
            if work.name not in self.waiting:
                row = db.execute("SELECT memo_ids, memos FROM runs WHERE run_id = ?", (work.run_id,)).fetchone()
                ids, names = (json.loads(row[0] or "[]"), json.loads(row[1] or "[]")) if row else ([], [])
                if names:
                    self.waiting[work.name] = memo_key(ids[0] if ids else None, names[0])
        self._measure()

    def on_finished(self, event: RunFinished) -> None:
        self.landings.pump()  # a landing may have waited for this run's workspace
        self._measure()

    def stop(self) -> None:
        self.landings.stop()
        if self.later is not None:
            self.later.cancel()
            self.later = None

    def snapshot(self, full: bool) -> dict[str, Any]:
        out: dict[str, Any] = self.landings.snapshot()
        queues = self.host.queues()
        waits = [
            {"role": role.name, "memo": path.name, "reason": why}
            for role in self._isolated()
            for path in itertools.islice(queues.get(role.name) or (), SHOWN_WAITS)
            if (why := self.waits(role, path))
        ]
        if waits:
            out["memo_waits"] = waits
        if self.disk is not None:
            out["workspaces"] = self.disk
        out["run_workspaces"] = {  # always there, as ``nodes`` is: a script reads it without a guard
            str(run_id): {"workspace": name, "branch": branch} for run_id, (name, branch) in self.where.items()
        }
        return out

    def _measure(self) -> None:
        """Measure the workspaces' disk use on a thread (a walk of every checkout), at most once a minute."""
        now = self.host.clock.monotonic()
        if self.measuring is not None or self.later is not None:
            return
        if self.measured is not None and now - self.measured < MEASURE_EVERY:  # once, when the minute is up
            self.later = self.host.clock.call_later(self.measured + MEASURE_EVERY - now, self._measure_later)
            return
        self.measured = now
        self.measuring = asyncio.ensure_future(asyncio.to_thread(self._sizes))
        self.measuring.add_done_callback(self._measured)

    def _measure_later(self) -> None:
        self.later = None
        if not self.host.ending():
            self._measure()

    def _measured(self, done: asyncio.Future[dict[str, Any]]) -> None:
        self.measuring = None
        if not done.cancelled() and done.exception() is None:
            self.disk = {**done.result(), "measured_at": iso(self.host.clock.now())}

    def _sizes(self) -> dict[str, Any]:
        """On a thread: how many workspaces the roles' roots hold, and their bytes."""
        roots = {self.root / role.workspace.root for role in self._isolated()}
        folders = [entry for root in roots if root.is_dir() for entry in root.iterdir() if (entry / ".git").exists()]
        size = sum(retire.disk_use(folder) for folder in folders)
        return {"count": len(folders), "bytes": size}

    # ------------------------------------------------------------ what the agent is told
    def notes(self, run: RoleRun) -> list[str]:
        """The top of the prompt says where the agent works: its memos' paths and ``$root`` are the project
        root's, and a change made there by path would be on no branch."""
        if not run.role.workspace.isolated or not run.memos:
            return []
        name = self._name(run.role, run.memos[0].path)[0]
        folder = self.root / run.role.workspace.root / name
        return [
            f"You work in a git worktree of your own: {folder} (branch {git.BRANCH_PREFIX}{name}), your working "
            f"folder. Make every change there, never in the project root ({self.root}), which only holds the "
            "memos; what you leave in the worktree is committed on the branch when you end."
        ]

    # ------------------------------------------------------------ one run at a time
    def waits(self, role: Role, memo: Path) -> str | None:
        """A memo for a workspace another run works in (or waits in for a person, or that is being landed) stays
        queued; the role's memos for other workspaces start meanwhile, those for this one keep their order."""
        if not role.workspace.isolated:
            return None
        name, key = self._name(role, memo)
        owner = self._busy(name, None, key)
        if owner is not None:
            return f"waits for workspace {name} ({f'run {owner}' if owner else 'a run waiting for a person'})"
        if self.landings.wanted(name) and self.waiting.get(name) != key:
            # (the memo of the run waiting for a person in it goes on first: the landing waits for that run)
            return f"waits for workspace {name} (being landed)"
        return None

    def check_holds(self) -> None:
        """A role whose every queued memo waits for a busy workspace is held (``status`` says for which), unless a
        retry of its own is due: its run has its workspace."""
        queues = self.host.queues()
        roles = self._isolated()
        queued = {path for role in roles for path in queues.get(role.name) or ()}
        self.names = {path: known for path, known in self.names.items() if path in queued}  # no stale entries
        self.queued = {key[3:]: name for name, key in self.names.values() if key.startswith("id:")}
        for role in roles:
            firsts = itertools.islice(queues.get(role.name) or (), WAITS_PASSED + 1)
            reasons = (self.waits(role, path) for path in firsts)
            first = next(reasons, None)
            if first is not None and all(reasons) and not self.host.retry_waiting(role.name):
                self.host.holds.hold(role.name, HOLD, f"its next memo {first}")
            else:
                self.host.holds.release(role.name, HOLD, quiet=True)

    def on_transition(self, run: RoleRun, old: RunState, new: RunState) -> None:
        """A start takes its workspace at once, not when prepared: the role's next memo for it is held in the same
        scheduling pass (the holds are a gate of the launcher), instead of being claimed to wait holding a slot."""
        if new is not RunState.STARTING or not run.role.workspace.isolated or not run.memos:
            return
        name, memo = self._name(run.role, run.memos[0].path)
        if self._busy(name, run.run_id, memo) is None and not self.landings.lands_now(name):
            self.owners[name] = run.run_id
            self.check_holds()

    # ------------------------------------------------------------ before every start
    async def prepare(self, run: RoleRun, spec: LaunchSpec) -> LaunchSpec:
        settings = run.role.workspace
        if not settings.isolated or not run.memos:
            return spec
        name = self._name(run.role, run.memos[0].path)[0]
        memo = memo_key(run.memos[0].memo_id, run.memos[0].name)
        if spec.adopted:  # its agent runs already, in its workspace: it owns it
            self.owners[name] = run.run_id
            self.where[run.run_id] = (name, git.BRANCH_PREFIX + name)
            return spec
        while self._busy(name, run.run_id, memo) is not None or self.landings.lands_now(name):
            # claimed in the same pass as the run working there, or before its landing began
            if run.state is not RunState.STARTING:  # cancelled or stopped meanwhile: the launcher calls it off
                return spec
            await asyncio.sleep(WAIT_STEP)
        self.owners[name] = run.run_id
        resumed = self.waiting.pop(name, None) is not None  # its memo, answered: the work it left is its own
        if self.identity is None:
            self.identity = await asyncio.to_thread(git.identity, self.root)
        folder = self.root / settings.root / name
        branch = git.BRANCH_PREFIX + name
        db = self.host.store.db
        previous = records.open_attempt(db, run.run_id)
        live = self.host.runs()  # an ended run's attempt still open: its end's git work failed, or never ran
        lost = [work for work in records.unsettled_in(db, name, run.run_id) if work.run_id not in live]
        carried = records.waiting_in(db, name) if resumed else None  # its answered memo takes on its attempt's work
        try:
            async with self.making:  # one at a time: two `worktree add`s, or config writes, may meet on a lock
                start, base, kept, lost_kept = await asyncio.to_thread(
                    self._ready, run, name, folder, branch, previous, resumed, lost
                )
        except (git.GitError, OSError) as exc:
            raise SpawnError(f"workspace {name}: {exc}") from None
        with self.host.store.batch():
            for gone, commit in zip(lost, lost_kept, strict=True):
                ref = attempt_ref(name, gone.run_id, gone.attempt) if commit else None
                records.ended(db, gone.run_id, gone.attempt, "set aside" if commit else "unchanged", commit, ref)
                if ref is not None:
                    self.host.console.line(f"workspace {name}: run {gone.run_id}'s unsettled work set aside as {ref}")
            if carried is not None:
                records.ended(db, carried.run_id, carried.attempt, "carried on", None, None)
                start = carried.start  # what the waiting run did is this attempt's: kept or put back with its own
            if previous is not None:
                records.ended(
                    self.host.store.db,
                    previous.run_id,
                    previous.attempt,
                    "set aside" if kept else "unchanged",
                    kept,
                    attempt_ref(name, previous.run_id, previous.attempt) if kept else None,
                )
            work = records.AttemptWork(
                run.run_id, spec.attempt, name, str(folder), branch, base, start, None, None, None
            )
            records.began(self.host.store.db, work)
            self.host.store.update_run(run.run_id, workspace=name, branch=branch)
        self.where[run.run_id] = (name, branch)
        try:
            await asyncio.to_thread(copying.provision, self.root, run.role.workspace, folder)
        except (git.GitError, OSError, SpawnError, copying.CopyError) as exc:
            raise SpawnError(f"workspace {name}: {exc}") from None
        env = {
            **spec.env,
            "ORCHESTRATOR_WORKSPACE": str(folder),
            "ORCHESTRATOR_BRANCH": branch,
            "ORCHESTRATOR_BASE": base,
        }
        if settings.ports:
            try:
                env.update(ports.env(*ports.block(self.host.store.db, name, str(folder), settings.ports)))
            except ports.NoPortsError as exc:
                raise SpawnError(f"workspace {name}: {exc}") from None
        return dataclasses.replace(spec, cwd=(folder / run.role.cwd).resolve(), env=env)

    def _ready(
        self,
        run: RoleRun,
        name: str,
        folder: Path,
        branch: str,
        previous: records.AttemptWork | None,
        resumed: bool = False,
        lost: Sequence[records.AttemptWork] = (),
    ) -> tuple[str, str, str | None, list[str | None]]:
        """On a thread: the workspace made or reused and clean; (the branch's commit, the base, the commit the
        last attempt's work was set aside as, the commits ended runs' unsettled attempts were set aside as)."""
        settings = run.role.workspace
        if git.ensure_worktree(self.root, folder, branch, settings.base or git.current_branch(self.root) or "HEAD"):
            git.exclude(self.root, self.root / settings.root)
            base = settings.base or git.current_branch(self.root) or "HEAD"
            git.git(self.root, "config", f"branch.{branch}.{BASE_KEY}", base)
        base = git.git(self.root, "config", f"branch.{branch}.{BASE_KEY}", check=False) or settings.base or "HEAD"
        lost_kept = self._set_aside_lost(folder, lost)  # first: what they left is theirs, not a crash's
        kept = None
        if previous is not None and previous.name == name:
            ref = attempt_ref(name, previous.run_id, previous.attempt)
            kept = git.set_aside(folder, previous.start, ref, message(run), self.identity or {})
        elif not resumed and git.changed(folder):  # left by a run the orchestrator lost (a crash): kept aside
            head = git.git(folder, "rev-parse", "HEAD")
            git.set_aside(folder, head, attempt_ref(name, run.run_id, 0), "left in the workspace", self.identity or {})
        return git.git(folder, "rev-parse", "HEAD"), base, kept, lost_kept

    def _set_aside_lost(self, folder: Path, lost: Sequence[records.AttemptWork]) -> list[str | None]:
        """On a thread: the work of ended runs' attempts never settled (newest first) kept under their refs, and the
        workspace and its branch put back where the oldest began; the commit each was kept as, or None."""
        return [
            git.set_aside(
                folder,
                work.start,
                attempt_ref(work.name, work.run_id, work.attempt),
                f"run {work.run_id}: its work, not settled at its end",
                self.identity or {},
            )
            for work in lost
        ]

    # ------------------------------------------------------------ the end of a run: commit, or set aside
    def decide_end(self, run: RoleRun, verdict: AttemptVerdict) -> EndDecision:
        """An attempt that ended well but left its workspace mid-rebase (or off its branch) failed: its work is no
        commit on the branch; it is set aside, and a retry starts on the branch (``unfinished``)."""
        work = records.open_attempt(self.host.store.db, run.run_id) if run.role.workspace.isolated else None
        why = unfinished(Path(work.folder), work.branch) if work is not None and verdict.succeeded else None
        if work is None or why is None:
            return DEFAULT
        return Fail(f"it left its workspace {work.name} {why}: nothing was committed on {work.branch}", retry=True)

    def before_finish(self, run: RoleRun, state: RunState, reason: str | None) -> Awaitable[None] | None:
        """Its workspace's bookkeeping now; its git work (the commit, or the set-aside) returned as an awaitable,
        done on a thread while the run settles, so the memos move once it is on the branch or kept aside."""
        if not run.role.workspace.isolated:
            return None
        parked: list[str] = []  # the workspaces a waiting memo cancelled or failed had its work in
        for memo in run.memos:
            self.names.pop(memo.path, None)
            if memo.path.parent.name == WAITING:
                key = memo_key(memo.memo_id, memo.name)
                parked += [name for name, waits in self.waiting.items() if waits == key]
                self.waiting = {name: waits for name, waits in self.waiting.items() if waits != key}
        self.where.pop(run.run_id, None)
        db = self.host.store.db
        work = records.open_attempt(db, run.run_id)
        if work is None and parked:  # its work is set aside from where its attempt began, and the workspace freed
            work = records.waiting_in(db, parked[0])
        if work is None:
            return None
        if state is RunState.RETURNED and (reason or "").startswith(f"{WAITING}:") and run.memos:
            self._free(work.name, run.run_id)
            self.waiting[work.name] = memo_key(run.memos[0].memo_id, run.memos[0].name)
            records.ended(db, run.run_id, work.attempt, "waiting", None, None)
            self.host.console.line(
                f"{run.label}: its work stays in workspace {work.name} while it waits (run {run.run_id})",
                role=run.role.name,
            )
            return None
        self.owners.setdefault(work.name, run.run_id)  # a run ended at a restart never prepared: it owns it now
        return self._settle(run, state, work)

    def _free(self, name: str, run_id: int) -> None:
        if self.owners.get(name) == run_id:
            del self.owners[name]

    async def _settle(self, run: RoleRun, state: RunState, work: records.AttemptWork) -> None:
        """The attempt's work committed (a success) or set aside (any other end), on a thread; then its record."""
        try:
            if self.identity is None:  # a run taken back at a restart ends before any start asked
                self.identity = await asyncio.to_thread(git.identity, self.root)
            done = await asyncio.to_thread(self._end_work, run, state, work, self.identity)
        except (git.GitError, OSError) as exc:
            self.host.console.error(f"workspace {work.name}: run {run.run_id}'s work was not settled: {exc}")
            return
        finally:
            self._free(work.name, run.run_id)
        outcome, commit, ref = done
        records.ended(self.host.store.db, work.run_id, work.attempt, outcome, commit, ref)
        if outcome == "committed":
            line = f"its work committed on {work.branch} ({(commit or '')[:10]}, run {run.run_id})"
        elif outcome == "set aside":
            line = f"its work set aside as {ref} ({state.value}, run {run.run_id})"
        else:
            return
        self.host.console.line(f"{run.label}: {line}", role=run.role.name)

    def _end_work(
        self, run: RoleRun, state: RunState, work: records.AttemptWork, identity: dict[str, str]
    ) -> tuple[str, str | None, str | None]:
        """On a thread: (what became of the attempt's work, its commit, the ref it is kept under)."""
        folder = Path(work.folder)
        if state is RunState.SUCCEEDED:
            git.commit_all(folder, message(run), identity)
            head = git.git(folder, "rev-parse", "HEAD")
            return ("committed", head, None) if head != work.start else ("unchanged", None, None)
        ref = attempt_ref(work.name, work.run_id, work.attempt)
        kept = git.set_aside(folder, work.start, ref, message(run), identity, work.branch)
        return ("set aside", kept, ref) if kept is not None else ("unchanged", None, None)
