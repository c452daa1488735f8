"""The workspaces feature: each run of a ``workspace: {mode: worktree}`` role works in a git worktree of its
conversation, one run at a time, and each attempt is a transaction on the work.

Before every start (``prepare``, awaited, its git work on a thread) the workspace is made or reused, the last
attempt's leftovers are set aside, and the agent is moved into it with ``ORCHESTRATOR_WORKSPACE``,
``ORCHESTRATOR_BRANCH`` and ``ORCHESTRATOR_BASE``. As a run ends, before its memo moves (``before_finish``, the one
hook every end passes, cancel and forced stop included; it cannot await, so its few git commands run there), a
success's work is committed on the branch and any other end's work is kept under
``refs/orchestrator/attempts/<name>/<run>-<attempt>`` with the workspace put back where the attempt began. A run
that ends waiting for a person (``waiting/``, orchestrator/asks) keeps its work where it is, and no other memo works
there until its own memo, answered, takes it on (or is cancelled or failed; the folder says which after a restart).
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
from pathlib import Path

from orchestrator.agents.spec import LaunchSpec, SpawnError
from orchestrator.config import Role, RoleRun
from orchestrator.core.states import RunState
from orchestrator.intake.memo import WAITING
from orchestrator.supervisor.extension import Extension, Host
from orchestrator.workspaces import git, records
from orchestrator.workspaces.naming import workspace_name

HOLD = "workspace"  # the source of the holds this feature puts on a role
WAIT_STEP = 0.05  # how often a start for a busy workspace looks again
BASE_KEY = "orchestratorbase"  # branch.<branch>.orchestratorbase: the base a workspace was made from
SETUP_DONE = "orchestrator-setup-done"  # in the worktree's own git folder: its setup passed


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
        self.names: dict[Path, str] = {}  # a queued memo -> its workspace (read once)
        self.identity: dict[str, str] | None = None
        self.making = asyncio.Lock()
        records.ensure(host.store.db)

    def _isolated(self) -> list[Role]:
        return [role for role in self.host.config.roles.values() if role.workspace.isolated]

    def _name(self, role: Role, path: Path) -> str:
        name = self.names.get(path)
        if name is None:
            name = self.names[path] = workspace_name(self.host.store.db, role, path)
        return name

    def _busy(self, name: str, run_id: int | None, memo: str | None = None) -> int | None:
        """The other live run working in workspace ``name`` (0: a run waiting for a person, unless ``memo`` is its
        own memo), or None."""
        if name in self.waiting and self.waiting[name] != memo:
            return 0
        owner = self.owners.get(name)
        if owner is None or owner == run_id:
            return None
        if owner not in self.host.runs():
            self.owners.pop(name, None)
            return None
        return owner

    def start(self) -> None:
        """The memos that wait for a person with their work in a workspace, as the folders say (a restart)."""
        for role in self._isolated():
            folder = self.host.config.role_dir(role.name) / WAITING
            for path in sorted(folder.glob("*.md")) if folder.is_dir() else ():
                self.waiting[workspace_name(self.host.store.db, role, path)] = path.name

    # ------------------------------------------------------------ one run at a time
    def check_holds(self) -> None:
        """A role whose next memo is for a busy workspace waits (the memo stays in its queue)."""
        queues = self.host.queues()
        roles = self._isolated()
        firsts = [next(iter(queues.get(role.name) or ()), None) for role in roles]
        self.names = {path: name for path, name in self.names.items() if path in firsts}  # no stale entries
        for role, first in zip(roles, firsts, strict=True):
            owner = None
            if first is not None:
                name = self._name(role, first)
                owner = self._busy(name, None, first.name)
            if owner is not None:
                who = f"run {owner}" if owner else "a run waiting for a person"
                self.host.holds.hold(role.name, HOLD, f"its next memo waits for workspace {name} ({who})")
            else:
                self.host.holds.release(role.name, HOLD, quiet=True)

    # ------------------------------------------------------------ before every start
    async def prepare(self, run: RoleRun, spec: LaunchSpec) -> LaunchSpec:
        settings = run.role.workspace
        if not settings.isolated or not run.memos:
            return spec
        name = self._name(run.role, run.memos[0].path)
        if spec.adopted:  # its agent runs already, in its workspace: it owns it
            self.owners[name] = run.run_id
            return spec
        while (
            self._busy(name, run.run_id, run.memos[0].name) is not None
        ):  # claimed in the same pass as the run working there
            if run.state is not RunState.STARTING:  # cancelled or stopped meanwhile: the launcher calls it off
                return spec
            await asyncio.sleep(WAIT_STEP)
        self.owners[name] = run.run_id
        resumed = self.waiting.pop(name, None) is not None  # its memo, answered: the work it left is its own
        if self.identity is None:
            self.identity = await asyncio.to_thread(git.identity, self.root)
        folder = self.root / settings.root / name
        branch = git.BRANCH_PREFIX + name
        previous = records.open_attempt(self.host.store.db, run.run_id)
        try:
            async with self.making:  # one at a time: two `worktree add`s, or config writes, may meet on a lock
                start, base, kept = await asyncio.to_thread(self._ready, run, name, folder, branch, previous, resumed)
        except (git.GitError, OSError) as exc:
            raise SpawnError(f"workspace {name}: {exc}") from None
        with self.host.store.batch():
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
        try:
            await asyncio.to_thread(self._setup, run.role, folder)
        except (git.GitError, OSError, SpawnError) as exc:
            raise SpawnError(f"workspace {name}: {exc}") from None
        env = {
            **spec.env,
            "ORCHESTRATOR_WORKSPACE": str(folder),
            "ORCHESTRATOR_BRANCH": branch,
            "ORCHESTRATOR_BASE": base,
        }
        return dataclasses.replace(spec, cwd=(folder / run.role.cwd).resolve(), env=env)

    def _ready(
        self,
        run: RoleRun,
        name: str,
        folder: Path,
        branch: str,
        previous: records.AttemptWork | None,
        resumed: bool = False,
    ) -> tuple[str, str, str | None]:
        """On a thread: the workspace made or reused and clean; (the branch's commit, the base, the commit the
        last attempt's work was set aside as)."""
        settings = run.role.workspace
        if git.ensure_worktree(self.root, folder, branch, settings.base or git.current_branch(self.root) or "HEAD"):
            base = settings.base or git.current_branch(self.root) or "HEAD"
            git.git(self.root, "config", f"branch.{branch}.{BASE_KEY}", base)
        base = git.git(self.root, "config", f"branch.{branch}.{BASE_KEY}", check=False) or settings.base or "HEAD"
        kept = None
        if previous is not None and previous.name == name:
            ref = attempt_ref(name, previous.run_id, previous.attempt)
            kept = git.set_aside(folder, previous.start, ref, message(run), self.identity or {})
        elif not resumed and git.changed(folder):  # left by a run the orchestrator lost (a crash): kept aside
            head = git.git(folder, "rev-parse", "HEAD")
            git.set_aside(folder, head, attempt_ref(name, run.run_id, 0), "left in the workspace", self.identity or {})
        return git.git(folder, "rev-parse", "HEAD"), base, kept

    def _setup(self, role: Role, folder: Path) -> None:
        """The role's ``setup`` once per workspace; a failure fails the attempt, and the next one runs it again."""
        settings = role.workspace
        if not settings.setup:
            return
        marker = Path(git.git(folder, "rev-parse", "--absolute-git-dir")) / SETUP_DONE
        if marker.exists():
            return
        try:
            done = subprocess.run(  # noqa: S603 - the role's argv, never a shell
                settings.setup,
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=settings.setup_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SpawnError(f"setup {settings.setup[0]!r} took longer than {settings.setup_timeout:g}s") from None
        except OSError as exc:
            raise SpawnError(f"setup {settings.setup[0]!r} could not start: {exc.strerror or exc}") from None
        if done.returncode != 0:
            tail = " ".join((done.stdout + done.stderr).strip().splitlines()[-3:])[-300:]
            raise SpawnError(f"setup {settings.setup[0]!r} exited {done.returncode}: {tail}")
        marker.write_text("", encoding="utf-8")

    # ------------------------------------------------------------ the end of a run: commit, or set aside
    def before_finish(self, run: RoleRun, state: RunState, reason: str | None) -> None:
        if not run.role.workspace.isolated:
            return
        for memo in run.memos:
            self.names.pop(memo.path, None)
            if memo.path.parent.name == WAITING:  # a waiting memo cancelled or failed: its workspace is free
                self.waiting = {name: waits for name, waits in self.waiting.items() if waits != memo.name}
        db = self.host.store.db
        work = records.open_attempt(db, run.run_id)
        if work is None:
            return
        if self.owners.get(work.name) == run.run_id:
            del self.owners[work.name]
        if state is RunState.RETURNED and (reason or "").startswith(f"{WAITING}:") and run.memos:
            self.waiting[work.name] = run.memos[0].name
            records.ended(db, run.run_id, work.attempt, "waiting", None, None)
            self.host.console.line(
                f"{run.label}: its work stays in workspace {work.name} while it waits (run {run.run_id})",
                role=run.role.name,
            )
            return
        folder = Path(work.folder)
        try:
            if self.identity is None:  # a run taken back at a restart ends before any start asked
                self.identity = git.identity(self.root)
            identity = self.identity
            if state is RunState.SUCCEEDED:
                commit = git.commit_all(folder, message(run), identity)
                head = git.git(folder, "rev-parse", "HEAD")
                outcome = "committed" if head != work.start else "unchanged"
                records.ended(db, run.run_id, work.attempt, outcome, head if outcome == "committed" else None, None)
                if commit is not None:
                    self.host.console.line(
                        f"{run.label}: its work committed on {work.branch} ({commit[:10]}, run {run.run_id})",
                        role=run.role.name,
                    )
                return
            ref = attempt_ref(work.name, run.run_id, work.attempt)
            kept = git.set_aside(folder, work.start, ref, message(run), identity)
            records.ended(
                db, run.run_id, work.attempt, "set aside" if kept else "unchanged", kept, ref if kept else None
            )
            if kept is not None:
                self.host.console.line(
                    f"{run.label}: its work set aside as {ref} ({state.value}, run {run.run_id})", role=run.role.name
                )
        except (git.GitError, OSError) as exc:
            self.host.console.error(f"workspace {work.name}: run {run.run_id}'s work was not settled: {exc}")
