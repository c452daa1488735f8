"""Starting work: pick what may start, claim its memos, open the run, render the prompt, spawn the agent.

The claim is an atomic rename from ``inbox/`` into ``active/``: whoever renames
first owns the memo, so nothing runs twice. From the rename on, every path ends
in a run: a memo that must not be delivered is rejected through the lifecycle
into ``failed/``, and an unexpected error while reading it does the same. The
spawn runs in a task, whose outcome comes back as ``AgentStarted`` or
``AgentStartFailed``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import traceback
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.agents import memo_list
from orchestrator.agents.spawner import OnExit, Spawner
from orchestrator.agents.spec import LaunchSpec, SpawnError, agent_environment, role_folder
from orchestrator.config import Config, Role, RoleRun
from orchestrator.console import Console
from orchestrator.core.agent import AgentHandle, AttemptVerdict
from orchestrator.core.clock import Clock
from orchestrator.core.events import AgentStarted, AgentStartFailed, Event, RunExited
from orchestrator.core.run import MemoRef
from orchestrator.core.states import RunState
from orchestrator.intake import memo_index, notices
from orchestrator.intake.memo import (
    ACTIVE,
    FAILED,
    HELD,
    BadMemo,
    header_tasks,
    move_memo,
    parse_front_matter,
    read_memo,
)
from orchestrator.intake.queue import Intake, Queued
from orchestrator.prompts import PromptTemplate
from orchestrator.store import Store
from orchestrator.supervisor.extension import WAITS_PASSED
from orchestrator.supervisor.lifecycle import Lifecycle
from orchestrator.supervisor.memo_moves import reason_writer
from orchestrator.supervisor.slots import Waiting, pick

Prepare = Callable[[RoleRun, LaunchSpec], Awaitable[LaunchSpec]]


async def prepared(hooks: list[Prepare], run: RoleRun, spec: LaunchSpec) -> LaunchSpec:
    """``spec`` as every extension's ``prepare`` leaves it, each given what the one before returned; a hook that
    returns anything but a spec of the same attempt is a bug (``TypeError``)."""
    for prepare in hooks:
        given, spec = spec, await prepare(run, spec)
        if not isinstance(spec, LaunchSpec) or (spec.run_id, spec.attempt) != (given.run_id, given.attempt):
            name = getattr(prepare, "__qualname__", repr(prepare))
            raise TypeError(
                f"{name} returned {spec!r:.80}, not the LaunchSpec of run {given.run_id} attempt {given.attempt}"
            )
    return spec


class Launcher:
    """Turns waiting memos and due retries into started attempts, within the limits."""

    def __init__(
        self,
        config: Config,
        store: Store,
        console: Console,
        clock: Clock,
        lifecycle: Lifecycle,
        intake: Intake,
        spawner: Spawner,
        templates: dict[str, PromptTemplate],
        post: Callable[[Event], None],
    ) -> None:
        self.config = config
        self.store = store
        self.console = console
        self.clock = clock
        self.lc = lifecycle
        self.intake = intake
        self.spawner = spawner
        self.templates = templates
        self.post = post
        self.tasks: set[asyncio.Task[Any]] = set()
        # extension points: prompt sections fill placeholders; memo checks may hold a memo back (held/)
        self.sections: list[Callable[[RoleRun], dict[str, str]]] = []
        self.memo_checks: list[Callable[[Role, MemoRef, str], str | None]] = []
        # waits: why a queued memo may not start yet (it stays queued, and the role's later memos may pass it)
        self.waits: list[Callable[[Role, Path], str | None]] = []
        # notes put at the very top of a prompt (called after the sections), such as a handoff over its cap
        self.notes: list[Callable[[RoleRun], list[str]]] = []
        # gates: more roles that start nothing now, asked again after each start (a usage-limit probe lets one
        # run through); each starting attempt is told to ``on_start``
        self.gates: list[Callable[[], list[str]]] = []
        self.on_start: list[Callable[[RoleRun], None]] = []
        # more variables for an attempt's agent, asked once its start is on record (TRACEPARENT, web/otel.py)
        self.env_hooks: list[Callable[[RoleRun], dict[str, str]]] = []
        # awaited before every start, in order, each given the spec the one before returned (``Extension.prepare``)
        self.prepares: list[Prepare] = []

    # ------------------------------------------------------------ what next
    def schedule(self, blocked: list[str]) -> None:
        """Start work while the limits allow, oldest first across roles; ``blocked`` roles start nothing."""
        while True:
            choice = pick(self._waiting(), self.lc.slots, blocked + [role for gate in self.gates for role in gate()])
            if choice is None:
                return
            if choice.retry:
                self.start_attempt(self.lc.retry_ready[choice.role].popleft())
            else:
                self.start_from_queue(self.config.roles[choice.role])

    def _waiting(self) -> list[Waiting]:
        out = []
        for name, role in self.config.roles.items():
            retries = self.lc.retry_ready[name]
            if retries:
                out.append(Waiting(name, retries[0].arrival, True))
            elif not (role.batch and any(r.role.name == name for r in self.lc.runs.values())):
                first = next(self._startable(role), None)
                if first is not None:
                    out.append(Waiting(name, first.arrival, False))
        return out

    def _startable(self, role: Role) -> Iterator[Queued]:
        """The role's queued memos that may start now, oldest first: a memo an extension says ``waits`` (for a busy
        workspace) stays queued, and the role's later memos go before it."""
        for entry in itertools.islice(self.intake.queues[role.name].values(), WAITS_PASSED + 1):
            if not any(wait(role, entry.path) for wait in self.waits):
                yield entry

    # ------------------------------------------------------------ claims
    def start_from_queue(self, role: Role) -> None:
        """Claim the role's first memo that may start (for a batch role its oldest, up to ``batch_max``) and start
        its run.

        A batch role's other memos stay queued: its next run takes them as soon as this one ends."""
        queue = self.intake.queues[role.name]
        wanted = role.batch_max if role.batch else 1
        claimed: list[tuple[MemoRef, str, str]] = []
        first: Queued | None = None
        try:
            while len(claimed) < wanted:  # a memo held or rejected at its claim leaves room for the next
                entry = next(self._startable(role), None)  # an extension's ``waits``, asked between two claims
                if entry is None:
                    break
                first = entry if first is None else first
                del queue[entry.path]
                got = self.claim(role, entry.path, entry.seen_ts)
                if got is not None:
                    claimed.append(got)
            if first is None or not claimed:
                return
            attempt = self.lc.attempts_so_far(role.name, [inbox for _, _, inbox in claimed]) + 1
            for ref, _, inbox in claimed:
                self.lc.carry_attempts(role.name, inbox, ref.name)
            run = self.lc.open(
                role, [ref for ref, _, _ in claimed], arrival=first.arrival, attempt=attempt, numbered=True
            )
        except Exception as exc:  # noqa: BLE001 - no run holds these claimed memos: they must not stay in active/
            if not claimed:
                raise  # nothing claimed: the loop's handling of an internal error
            self.console.error(f"internal error: opening a run of {role.name} failed:\n{traceback.format_exc()}")
            for ref, _, _ in claimed:
                self._fail_unrecorded(role, ref.path, f"internal error: {type(exc).__name__}: {exc}")
            return
        self.start_attempt(run, first_text=claimed[0][1])

    def _fail_unrecorded(self, role: Role, path: Path, why: str) -> None:
        """A claimed memo the database cannot take: failed/ with a reason file, without a run on record."""
        try:
            failed = move_memo(path, self.config.role_dir(role.name) / FAILED, reason_writer(f"not delivered: {why}\n"))
            memo_index.moved(self.store.db, path, failed, self._wall())
            self.console.line(f"{path.name} not delivered: {why}; moved to failed/", role=role.name)
        except OSError as exc:
            self.console.error(f"internal error: {path.name} stays in active/ until the next start: {exc}")

    def claim(self, role: Role, path: Path, seen_ts: float | None = None) -> tuple[MemoRef, str, str] | None:
        """Rename the memo into active/ and read it: (its reference, its text, its inbox name), or None.

        ``seen_ts``: when the memo was first seen in its inbox; the loop breaker counts a memo without a
        usable ``created_at`` at that time.
        """
        try:
            active = move_memo(path, self.config.role_dir(role.name) / ACTIVE)
        except FileNotFoundError:
            return None  # deleted or renamed before its claim: simply gone
        except OSError as exc:
            self.console.line(f"cannot claim {path.name}: {exc}; leaving it in the inbox", role=role.name)
            return None
        try:
            return self._read_claimed(role, active, path, seen_ts)
        except Exception as exc:  # noqa: BLE001 - claimed memos always end in a run: at worst a failed one
            self.console.error(f"internal error: reading {active.name} failed:\n{traceback.format_exc()}")
            self.reject(role, active, f"internal error: {type(exc).__name__}: {exc}")
            return None

    def _read_claimed(
        self, role: Role, active: Path, inbox: Path, seen_ts: float | None
    ) -> tuple[MemoRef, str, str] | None:
        try:
            text = read_memo(active, self.config.max_memo_bytes)
        except FileNotFoundError:
            return None
        except BadMemo as exc:
            self.reject(role, active, str(exc))
            return None
        except OSError as exc:  # say it is not readable by us: it must not sit in active/ unrecorded
            self.reject(role, active, f"it cannot be read: {exc.strerror or exc}")
            return None
        header = parse_front_matter(text)
        memo_index.moved(self.store.db, inbox, active, self._wall(), header)
        if header.warning:
            self.console.line(f"{active.name}: {header.warning}; delivering it anyway", role=role.name)
        ref = MemoRef(
            active.name,
            active,
            header.id,
            header.subject,
            header.reply_to,
            header.sender,
            header_tasks(header.extra),
            created_at=header.created_at,
            seen_ts=seen_ts,
        )
        for check in self.memo_checks:
            why = check(role, ref, text)
            if why:
                self._hold(role, active, why)
                return None
        return ref, text, inbox.name

    def _hold(self, role: Role, path: Path, why: str) -> None:
        """A memo that may not run now: ``held/`` with its reason beside it, until someone releases it."""
        target = move_memo(path, self.config.role_dir(role.name) / HELD, reason_writer(f"held: {why}\n"))
        memo_index.moved(self.store.db, path, target, self._wall())
        self.console.line(f"{target.name} held: {why}; moved to {HELD}/", role=role.name)

    def _wall(self) -> float:
        """Now, in seconds since the epoch, on the supervisor's clock (the memo index's times)."""
        return self.clock.now().timestamp()

    def reject(self, role: Role, path: Path, why: str) -> None:
        """A memo that must never reach an agent: a run on record that ends at once in failed/ with the reason."""
        run = self.lc.open(role, [MemoRef(path.name, path)], arrival=0, attempt=0)
        reason = f"not delivered: {why}"
        self.lc.finish(run, RunState.FAILED, reason=reason, reason_text=reason + "\n")

    # ------------------------------------------------------------ attempts
    def start_attempt(self, run: RoleRun, first_text: str | None = None) -> None:
        """Take a slot, put the attempt on record, render the prompt and spawn the agent in a task."""
        role = run.role
        for hook in self.on_start:
            hook(run)
        self.lc.begin_attempt(run)
        if first_text is None and not role.batch:
            try:
                first_text = run.memos[0].path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                first_text = ""
        memo_paths = [m.path for m in run.memos]
        memos_file = memo_list.list_path(self.config.state_dir, run.run_id) if role.batch else None
        try:
            prompt = self._render(run, first_text or "", memos_file)
        except Exception as exc:  # noqa: BLE001 - a run holding a slot must always end somewhere
            self.console.error(f"preparing run {run.run_id} failed:\n{traceback.format_exc()}")
            self.post(AgentStartFailed(run.run_id, run.attempt, f"could not prepare the prompt: {exc}"))
            return
        env = agent_environment(role, self.config.root, run.run_id, run.attempt, memo_paths, run.seq, memos_file)
        for more_env in self.env_hooks:
            env.update(more_env(run))
        spec = LaunchSpec(
            run_id=run.run_id,
            attempt=run.attempt,
            role=role,
            root=self.config.root,
            prompt=prompt,
            memo_paths=memo_paths,
            log_path=run.log_path or Path(os.devnull),
            cwd=role_folder(self.config.root, role.cwd),
            env=env,
            resume=run.resumed_from,
        )
        self.console.line(
            f'start {run.label} "{run.subject}" (run {run.run_id}, attempt {run.attempt})', role=role.name
        )
        task = asyncio.ensure_future(self._spawn(run, spec, memos_file))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _spawn(self, run: RoleRun, spec: LaunchSpec, memos_file: Path | None = None) -> None:
        self.store.commit_pending()  # the attempt is on record before its agent can exist
        if self.prepares:
            ready = await self._prepare(run, spec)
            if ready is None:
                return
            spec = ready
        if memos_file is not None:
            try:  # before the agent exists: ORCHESTRATOR_MEMOS_FILE names it
                memo_list.write_list(memos_file, spec.memo_paths)
            except OSError as exc:  # ours: the run's memos go back to the inbox
                why = f"could not write the list of its memos {memos_file}: {exc.strerror or exc}"
                self.post(AgentStartFailed(spec.run_id, spec.attempt, why, internal=True))
                return
        try:
            agent = await self.spawner.start(spec, self._exited(spec.run_id, spec.attempt))
        except SpawnError as exc:
            reason = f"could not start the agent: {exc}"
            self.post(AgentStartFailed(spec.run_id, spec.attempt, reason, internal=exc.internal))
        except Exception as exc:  # noqa: BLE001 - whatever it is, the attempt failed and the run goes on
            self.console.error(f"starting run {spec.run_id} failed:\n{traceback.format_exc()}")
            self.post(AgentStartFailed(spec.run_id, spec.attempt, f"could not start the agent: {exc}", True))
        else:
            agent.on_turn = self._turned(spec.run_id, spec.attempt)
            # handled before the exit watcher can report: it runs only once this task yields
            self.post(AgentStarted(spec.run_id, spec.attempt, agent))

    async def _prepare(self, run: RoleRun, spec: LaunchSpec) -> LaunchSpec | None:
        """The spec the extensions' ``prepare`` made of ``spec``; None when the start is given up (they failed it,
        or the run was cancelled or stopped meanwhile: no agent is started only to be stopped)."""
        try:
            spec = await prepared(self.prepares, run, spec)
        except SpawnError as exc:
            why = f"could not prepare the start: {exc}"
            self.post(AgentStartFailed(spec.run_id, spec.attempt, why, internal=exc.internal))
            return None
        except Exception as exc:  # noqa: BLE001 - an extension's bug: loud, and the attempt fails like a start's
            self.console.error(f"preparing the start of run {spec.run_id} failed:\n{traceback.format_exc()}")
            why = f"could not prepare the start: {exc}"
            self.post(AgentStartFailed(spec.run_id, spec.attempt, why, unexpected=True))
            return None
        if run.state is not RunState.STARTING or run.settling is not None:
            self.post(AgentStartFailed(spec.run_id, spec.attempt, "called off while its start was prepared"))
            return None
        return spec

    def _turned(self, run_id: int, attempt: int) -> Callable[[AgentHandle], None]:
        """What tells the loop that this attempt goes on in a process of its own (its next turn)."""
        return lambda agent: self.post(AgentStarted(run_id, attempt, agent))

    def _exited(self, run_id: int, attempt: int) -> OnExit:
        """What tells the loop that this attempt's agent ended."""

        def exited(_agent: AgentHandle, verdict: AttemptVerdict) -> None:
            self.post(RunExited(run_id, attempt, verdict))

        return exited

    def _render(self, run: RoleRun, text: str, memos_file: Path | None = None) -> str:
        sections: dict[str, str] = {}
        for section in self.sections:
            sections.update(section(run))
        prompt = self.templates[run.role.name].render(
            role=run.role.name,
            run_id=run.run_id,
            seq=run.seq,
            attempt=run.attempt,
            root=self.config.root,
            memo_paths=[m.path for m in run.memos],
            memo_text=text,
            batch=run.role.batch,
            now=self.clock.now(),
            sections=sections,
            memos_file=memos_file,
        )
        notes = [note for source in self.notes for note in source(run)]
        late = [note for note in (notices.late_report_note(self.store, m) for m in run.memos) if note]
        notes += late
        for note in late:
            self.console.line(note.splitlines()[0], role=run.role.name)
        return "\n".join(notes) + ("\n\n" if notes else "") + prompt
