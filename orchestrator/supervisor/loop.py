"""The supervisor: the one owner of all run state.

A single asyncio loop holds the table of runs and, through its ``Intake``, the
queues of waiting memos. The watchdog
thread, the agents' exit watchers, timers, signals and the control channel
only post events to it (``post`` is thread-safe); every state change of a run
goes through ``_transition``.

Life of a memo: seen in ``inbox/`` -> queued (FIFO) -> claimed by an atomic
rename into ``active/`` when its agent starts -> ``archive/`` on exit 0, or
retried, or ``failed/`` / ``cancelled/``. Work is started the moment it is
seen complete and the limits allow: there is no debounce delay.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import traceback
from collections import deque
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable

from orchestrator.intake import notices

from orchestrator.agents import procs
from orchestrator.config import Config, Role
from orchestrator.console import Console
from orchestrator.core.errors import ControlError
from orchestrator.core.events import Event, MemoGone, MemoSeen, RescanNeeded, RetryDue, RunExited, SignalReceived, TimeoutFired
from orchestrator.intake.queue import Intake
from orchestrator.intake.memo import ACTIVE, ARCHIVE, FAILED, FOLDERS, INBOX, BadMemo, move_memo, parse_front_matter, read_memo
from orchestrator.prompts import PromptTemplate, load_template
from orchestrator.core.run import MemoRef, Run
from orchestrator.agents.command import Agent, LaunchSpec, SpawnError, agent_environment, start_command
from orchestrator.control.cancel import record_cancel
from orchestrator.core.states import RunState
from orchestrator.store import Store, now_iso

FORCE_PRESSES = 3  # Ctrl-C presses within FORCE_WINDOW that kill every agent
FORCE_WINDOW = 1.0
IDLE_EXIT_AFTER = 1.5


class Supervisor:
    """Runs one project root until told to end; ``serve`` returns the exit status."""

    def __init__(self, config: Config, console: Console, *, until_idle: bool = False) -> None:
        self.config = config
        self.root = config.root
        self.console = console
        self.until_idle = until_idle
        self.store = Store(config.state_dir / "state.db")
        self.templates: dict[str, PromptTemplate] = {
            name: load_template(self.root / role.prompt) for name, role in config.roles.items()
        }
        self.intake = Intake(list(config.roles), config.role_dir, console, self.store,
                             lambda delay, callback: self._require_loop().call_later(delay, callback),
                             self._schedule)  # fmt: skip
        self.runs: dict[int, Run] = {}
        self.retry_ready: dict[str, deque[Run]] = {name: deque() for name in config.roles}
        self.live: dict[str, int] = {name: 0 for name in config.roles}
        self.total_live = 0
        self.crashes: dict[str, int] = {name: 0 for name in config.roles if config.roles[name].critical}
        self.budget_blocks: dict[str, str] = {}
        self.ending: str | None = None  # None, "graceful" or "force"
        self.exit_code = 0
        self.sigints: deque[float] = deque(maxlen=FORCE_PRESSES)
        self.done = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.watcher: Any = None
        self.control: Any = None
        self._idle_since: float | None = None
        self._background: set[asyncio.Future[Any]] = set()
        self._sweeps: set[asyncio.Future[Any]] = set()  # kill ladders for processes an agent left behind
        self.started_at = now_iso()

    # ------------------------------------------------------------------ life
    def post(self, event: Event) -> None:
        """Thread-safe: hand an event to the loop."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.handle, event)

    async def serve(self) -> int:
        from orchestrator.control.channel import ControlServer
        from orchestrator.supervisor.recovery import recover
        from orchestrator.intake.watcher import InboxWatcher

        self.loop = asyncio.get_running_loop()
        procs.become_subreaper()
        for role in self.config.roles:
            # every folder now, so each is under the watch before a memo moves into it: a move into a folder
            # made a moment earlier is seen as half a move, which watchdog holds 0.5 s, stalling every event
            for folder in FOLDERS:
                (self.config.role_dir(role) / folder).mkdir(parents=True, exist_ok=True)
        await recover(self)
        self.refresh_budgets()
        self._install_signals()
        # the watcher starts before the first scan, so a memo written meanwhile is seen by one or both;
        # the claim rename makes sure it runs once either way
        self.watcher = InboxWatcher({r: self.config.role_dir(r) for r in self.config.roles}, self.post)
        self.watcher.start()
        if self.watcher.patch_problem:
            self.console.line(self.watcher.patch_problem)
        self.control = ControlServer(self)
        await self.control.start()
        self.console.line(
            f"orchestrator up: {len(self.config.roles)} roles, max_concurrent {self.config.max_concurrent}, "
            f"root {self.root} (pid {os.getpid()})"
        )
        self.rescan(initial=True)
        ticker = asyncio.ensure_future(self._tick())
        self.console.start_live(self)
        try:
            await self.done.wait()
        finally:
            ticker.cancel()
            self.console.stop_live()
            self.watcher.stop()
            await self.control.close()
            pending_sweeps = [task for task in self._sweeps if not task.done()]
            if pending_sweeps:  # an agent's leftovers must not outlive the orchestrator
                await asyncio.wait(pending_sweeps, timeout=max(r.grace for r in self.config.roles.values()) + 6)
            for task in list(self._background):
                task.cancel()
            self.store.close()
        return self.exit_code

    def _install_signals(self) -> None:
        assert self.loop is not None
        for signum in (signal.SIGINT, signal.SIGTERM):
            # the handler only records; the loop decides what it means
            self.loop.add_signal_handler(signum, lambda s=signum: self.handle(SignalReceived(s, time.monotonic())))
        self.loop.add_signal_handler(signal.SIGHUP, lambda: None)
        self.loop.add_signal_handler(signal.SIGPIPE, lambda: None)

    def begin_ending(self, mode: str, why: str, exit_code: int | None = None) -> None:
        """Graceful: nothing new starts, running agents finish. Force: kill every agent, memos back to inbox."""
        if exit_code is not None and self.exit_code == 0:
            self.exit_code = exit_code
        if self.ending == mode or self.ending == "force":
            self._maybe_done()
            return
        self.ending = mode
        if mode == "graceful":
            self.console.line(f"ending: {why}; waiting for {self.total_live} running agent(s); nothing new starts")
        else:
            self.exit_code = self.exit_code or 1
            self.console.line(f"ending now: {why}; stopping {self.total_live} agent(s) and returning their memos")
        for run in list(self.runs.values()):
            if run.state is RunState.RETRY_WAIT:
                self._return_to_inbox(run, "the orchestrator ended before the retry")
            elif mode == "force" and run.state.live:
                self._ensure_ladder(run, grace=0.0)
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.ending and not self.runs:
            self.done.set()

    async def _tick(self) -> None:
        """The safety net: periodic rescan, watcher health, orphan reaping, idle exit."""
        interval = max(0.05, self.config.rescan_interval)
        while True:
            await asyncio.sleep(min(interval, 0.5) if self.until_idle else interval)
            try:
                problem = self.watcher.healthy()
                if problem:
                    self.console.line(f"watcher: {problem}; restarting it and rescanning the inboxes")
                    self.watcher.restart()
                self.refresh_budgets()
                self.rescan()
                procs.reap_orphans()
                self._check_idle()
            except Exception:  # noqa: BLE001 - the safety net must keep running
                self.console.error(f"periodic check failed:\n{traceback.format_exc()}")

    def _check_idle(self) -> None:
        if not self.until_idle or self.ending:
            return
        busy = self.runs or self.intake.busy
        if busy:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = time.monotonic()
        elif time.monotonic() - self._idle_since >= IDLE_EXIT_AFTER:
            self.begin_ending("graceful", "all work is done")

    # ---------------------------------------------------------------- events
    def handle(self, event: Event) -> None:
        """Dispatch one event; an exception here is logged and never stops the loop."""
        try:
            if isinstance(event, MemoSeen):
                self.intake.seen(event)
            elif isinstance(event, MemoGone):
                self.intake.gone(event)
            elif isinstance(event, RescanNeeded):
                self.console.line(f"rescan: {event.reason}")
                self.rescan()
            elif isinstance(event, RunExited):
                self._on_run_exited(event)
            elif isinstance(event, TimeoutFired):
                self._on_timeout(event)
            elif isinstance(event, RetryDue):
                self._on_retry_due(event)
            elif isinstance(event, SignalReceived):
                self._on_signal(event)
        except Exception:  # noqa: BLE001
            self.console.error(f"error while handling {event!r}:\n{traceback.format_exc()}")
        self._schedule()

    def _on_signal(self, event: SignalReceived) -> None:
        if event.signum == signal.SIGINT:
            self.sigints.append(event.at)
            if len(self.sigints) == FORCE_PRESSES and self.sigints[-1] - self.sigints[0] <= FORCE_WINDOW:
                self.begin_ending("force", f"Ctrl-C pressed {FORCE_PRESSES} times")
                return
            self.begin_ending("graceful", "Ctrl-C (press it 3 times within a second to kill the agents)")
        else:
            self.begin_ending("graceful", f"signal {signal.Signals(event.signum).name}")

    def rescan(self, initial: bool = False) -> None:
        """Look at every inbox again (the safety net for missed events), then start what may start."""
        self.intake.rescan(initial)
        self._schedule()

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        assert self.loop is not None, "the supervisor's loop runs"
        return self.loop

    # ------------------------------------------------------------ scheduling
    def _batch_busy(self, role: str) -> bool:
        return any(run.role.name == role for run in self.runs.values())

    def _schedule(self) -> None:
        """Start work while both limits allow; an error here is logged and never escapes into a caller."""
        try:
            self._schedule_now()
        except Exception:  # noqa: BLE001 - called from handlers, ladders and timers: none may die of it
            self.console.error(f"error while scheduling:\n{traceback.format_exc()}")

    def _schedule_now(self) -> None:
        """Start work while both limits allow, oldest first across roles."""
        if self.ending:
            return
        while self.total_live < self.config.max_concurrent:
            best: tuple[int, str, str] | None = None
            for name, role in self.config.roles.items():
                if self.live[name] >= role.limit:
                    continue
                retries, queue = self.retry_ready[name], self.intake.queues[name]
                if not retries and not queue:
                    continue
                if role.batch and not retries and self._batch_busy(name):
                    continue
                if self._budget_block(name):
                    continue
                if retries:
                    candidate = (retries[0].seq, name, "retry")
                else:
                    candidate = (next(iter(queue.values())).seq, name, "queue")
                if best is None or candidate < best:
                    best = candidate
            if best is None:
                return
            _seq, name, source = best
            if source == "retry":
                self._start_attempt(self.retry_ready[name].popleft())
            else:
                self._start_from_queue(self.config.roles[name])

    def _budget_block(self, role: str) -> str | None:
        """Why this role may not start new runs now (a daily budget is spent), or None."""
        return self.budget_blocks.get(role) or self.budget_blocks.get("*")

    def refresh_budgets(self) -> None:
        """Recompute which daily budgets are spent (SDK-reported costs, finished and running); log each change."""
        caps = {name: role.budget.per_day_usd for name, role in self.config.roles.items() if role.budget.per_day_usd}
        team_cap = self.config.budget.per_day_usd
        if not caps and not team_cap:
            return
        day = datetime.now().astimezone().replace(hour=0, minute=0, second=0, microsecond=0)
        since = day.isoformat(timespec="milliseconds")
        running: dict[str, float] = {}
        for run in self.runs.values():
            if run.agent is not None and run.agent.cost_usd and run.state.live:
                # what this attempt's session spent beyond what is already on record for the run: nothing once
                # its exit recorded its figures (the run is still live then), else beyond the session it resumed
                key = getattr(run.agent, "session_id", None) or f"attempt-{run.attempt}"
                recorded = run.sessions.get(key) or run.sessions.get(run.resumed_from or "") or {}
                live = max(0.0, run.agent.cost_usd - (recorded.get("cost_usd") or 0.0))
                running[run.role.name] = running.get(run.role.name, 0.0) + live
        blocks: dict[str, str] = {}
        tomorrow = (day + timedelta(days=1)).strftime("%Y-%m-%d")
        if team_cap:
            spent = self.store.spent_since(since) + sum(running.values())
            if spent >= team_cap:
                blocks["*"] = f"the team spent ${spent:.2f} of its ${team_cap:.2f} daily budget; new runs wait until {tomorrow}"
        for name, cap in caps.items():
            spent = self.store.spent_since(since, name) + running.get(name, 0.0)
            if spent >= cap:
                blocks[name] = f"role {name} spent ${spent:.2f} of its ${cap:.2f} daily budget; new runs wait until {tomorrow}"
        for key, why in blocks.items():
            if self.budget_blocks.get(key) is None:
                self.console.line(f"budget: {why}", role=None if key == "*" else key)
        for key in self.budget_blocks.keys() - blocks.keys():
            self.console.line("budget: new day or budget raised; starting runs again", role=None if key == "*" else key)
        self.budget_blocks = blocks

    def _start_from_queue(self, role: Role) -> None:
        queue = self.intake.queues[role.name]
        entries = list(queue.values()) if role.batch else [next(iter(queue.values()))]
        seq = entries[0].seq
        memos: list[tuple[MemoRef, str]] = []
        for entry in entries:
            del queue[entry.path]
            claimed = self._claim(role, entry.path)
            if claimed is not None:
                memos.append(claimed)
        if not memos:
            return
        attempt = max(self.store.memo_attempts(role.name, ref.name) for ref, _ in memos) + 1
        run_id = self.store.insert_run(
            role=role.name,
            backend=role.backend,
            memos=[ref.name for ref, _ in memos],
            memo_ids=[ref.memo_id for ref, _ in memos],
            subject=memos[0][0].subject,
            state=RunState.QUEUED.value,
            attempt=attempt,
        )
        run = Run(run_id=run_id, role=role, memos=[ref for ref, _ in memos], seq=seq, attempt=attempt)
        run.log_path = self.config.state_dir / "logs" / f"{run_id}-{role.name}.log"
        self.runs[run_id] = run
        self._start_attempt(run, first_text=memos[0][1])

    def _claim(self, role: Role, path: Path) -> tuple[MemoRef, str] | None:
        """Rename the memo into active/ and read it; None when it is gone or cannot be delivered."""
        try:
            active = move_memo(path, self.config.role_dir(role.name) / ACTIVE)
        except FileNotFoundError:
            return None  # deleted or renamed before its claim: simply gone
        except OSError as exc:
            self.console.line(f"cannot claim {path.name}: {exc}; leaving it in the inbox", role=role.name)
            return None
        try:
            text = read_memo(active, self.config.max_memo_bytes)
        except FileNotFoundError:
            return None
        except BadMemo as exc:
            self._reject(role, active, str(exc))
            return None
        except OSError as exc:  # say it is not readable by us: it must not sit in active/ unrecorded
            self._reject(role, active, f"it cannot be read: {exc.strerror or exc}")
            return None
        header = parse_front_matter(text)
        if header.warning:
            self.console.line(f"{active.name}: {header.warning}; delivering it anyway", role=role.name)
        return MemoRef(active.name, active, header.id, header.subject, header.reply_to, header.sender), text

    def _reject(self, role: Role, path: Path, why: str) -> None:
        """A memo that must never reach an agent: failed/ with a reason, and a failed run on record."""
        target = move_memo(path, self.config.role_dir(role.name) / FAILED,
                           before=lambda target: notices.write_reason(target, f"not delivered: {why}\n"))  # fmt: skip
        self.store.insert_run(
            role=role.name, backend=role.backend, memos=[target.name], memo_ids=[None], subject=None,
            state=RunState.FAILED.value, attempt=0, ended_at=now_iso(), reason=f"not delivered: {why}",
        )  # fmt: skip
        self.console.line(f"{target.name} not delivered: {why}; moved to failed/", role=role.name)

    # ------------------------------------------------------------- attempts
    def _start_attempt(self, run: Run, first_text: str | None = None) -> None:
        """Take a slot and launch the agent; spawning is awaited in a task so the loop goes on."""
        role = run.role
        if run.state is RunState.RETRY_WAIT:
            run.attempt += 1
            run.next_attempt_at = None
        self._take_slot(run)
        run.interrupt_request = None  # an interrupt asked of an earlier attempt is not this one's
        run.started_mono = time.monotonic()
        run.started_at = now_iso()
        self._transition(run, RunState.RUNNING, attempt=run.attempt, started_at=run.started_at, next_attempt_at=None)
        if first_text is None and not role.batch:
            try:
                first_text = run.memos[0].path.read_text(encoding="utf-8")
            except OSError:
                first_text = ""
        run.resumed_from = run.session_id if role.backend == "sdk" and role.retry_resumes and run.attempt > 1 else None
        try:
            prompt = self._render(run, first_text or "")
        except Exception as exc:  # noqa: BLE001 - a run holding a slot must always end somewhere
            self.console.error(f"preparing run {run.run_id} failed:\n{traceback.format_exc()}")
            self._attempt_failed(run, f"could not prepare the prompt: {exc}", None)
            return
        env = agent_environment(role, self.root, run.run_id, run.attempt, [m.path for m in run.memos])
        spec = LaunchSpec(
            run_id=run.run_id, attempt=run.attempt, role=role, root=self.root, prompt=prompt,
            memo_paths=[m.path for m in run.memos], log_path=run.log_path or Path(os.devnull), env=env,
            extra={"resume": run.resumed_from},
        )  # fmt: skip
        self.console.line(f'start {run.label} "{run.subject}" (run {run.run_id}, attempt {run.attempt})', role=role.name)
        self._spawn_in_background(run, spec)

    def _spawn_in_background(self, run: Run, spec: LaunchSpec) -> None:
        assert self.loop is not None
        launched: asyncio.Future[Agent | None] = self.loop.create_future()
        run.launched = launched
        run.agent = None

        async def launch() -> None:
            try:
                if run.role.backend == "sdk":
                    from orchestrator.agents.sdk.backend import start_sdk

                    agent = await start_sdk(spec, self._agent_exited)
                else:
                    agent = await start_command(spec, self._agent_exited)
            except Exception as exc:  # noqa: BLE001 - whatever it is, the attempt failed and the run must go on
                launched.set_result(None)
                if not isinstance(exc, SpawnError):
                    self.console.error(f"starting run {run.run_id} failed:\n{traceback.format_exc()}")
                if run.stopping is None and run.state is RunState.RUNNING:
                    self._attempt_failed(run, f"could not start the agent: {exc}", None)
                    self._schedule()
                return
            except BaseException:
                launched.set_result(None)
                raise
            run.agent = agent
            launched.set_result(agent)
            if run.stopping is not None:
                return  # cancelled or force-ended while it was being spawned: its ladder stops it now
            ref = agent.ref
            self.store.update_run(run.run_id, pid=agent.pid, create_time=ref.create_time if ref else None,
                                  log_path=str(run.log_path))  # fmt: skip
            self.store.record_attempt(run.run_id, run.attempt, pid=agent.pid, started_at=run.started_at,
                                      log_path=str(run.log_path))  # fmt: skip
            assert self.loop is not None
            run.timers["timeout"] = self.loop.call_later(
                run.role.timeout, self.handle, TimeoutFired(run.run_id, run.attempt)
            )

        self._keep(launch())

    def _keep(self, coro: Any) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _render(self, run: Run, text: str) -> str:
        prompt = self.templates[run.role.name].render(
            role=run.role.name, run_id=run.run_id, attempt=run.attempt, root=self.root,
            memo_paths=[m.path for m in run.memos], memo_text=text, batch=run.role.batch,
        )  # fmt: skip
        notes = [notices.late_report_note(self.store, m) for m in run.memos]
        notes = [n for n in notes if n]
        for note in notes:
            self.console.line(note.splitlines()[0], role=run.role.name)
        return "\n".join(notes) + ("\n\n" if notes else "") + prompt

    def _agent_exited(self, agent: Agent, code: int) -> None:
        self.handle(RunExited(agent.spec.run_id, agent.spec.attempt, code))

    def _take_slot(self, run: Run) -> None:
        if not run.holds_slot:
            run.holds_slot = True
            self.live[run.role.name] += 1
            self.total_live += 1

    def _release_slot(self, run: Run) -> None:
        """Idempotent: an attempt gives its slot back exactly once, whoever ends it."""
        if run.holds_slot:
            run.holds_slot = False
            self.live[run.role.name] -= 1
            self.total_live -= 1

    def _on_run_exited(self, event: RunExited) -> None:
        run = self.runs.get(event.run_id)
        if run is None or run.attempt != event.attempt:
            return
        run.exit_codes.append(event.returncode)
        run.cancel_timers("timeout")
        agent = run.agent
        if agent is not None:
            self._record_result(run, agent)
            if procs.group_has_members(agent.pid):
                self.console.line(f"run {run.run_id}: processes left in its group after exit; stopping them", role=run.role.name)
                # only this attempt's leftovers: a retry under the same run id must not be caught by the sweep
                target = procs.Target(None, agent.pid, run.run_id, str(self.root), attempt=event.attempt)
                self._sweeps.add(self._keep(procs.stop_tree(target, run.role.grace)))
        if run.stopping is not None or run.state is not RunState.RUNNING:
            return  # a kill ladder owns this run; it finishes the run when the tree is dead
        self._release_slot(run)
        ran = run.elapsed()
        # an interrupt that came after the last turn had ended stopped nothing: that work succeeded
        interrupted = (agent is not None and getattr(agent, "interrupted", False) and run.interrupt_request is not None
                       and event.returncode != 0)  # fmt: skip
        outcome = "cancelled" if interrupted else "succeeded" if event.returncode == 0 else "failed"
        self.store.record_attempt(run.run_id, run.attempt, pid=run.pid, started_at=run.started_at, ended_at=now_iso(),
                                  exit_code=event.returncode, log_path=str(run.log_path), outcome=outcome)  # fmt: skip
        if interrupted:
            request = run.interrupt_request
            assert request is not None
            record_cancel(self, run, RunState.RUNNING, request["who"], request["reason"], None)
        elif agent is not None and getattr(agent, "budget_exceeded", False):
            self._attempt_failed(run, agent.failure_reason or "per-run budget exceeded", event.returncode, retry=False)
        elif event.returncode == 0:
            self._note_crash(run.role, ran, failed=False)
            self._succeed(run)
        else:
            reason = agent.failure_reason if agent and agent.failure_reason else describe_exit(event.returncode)
            self._attempt_failed(run, reason, event.returncode)
        self._maybe_done()

    def _record_result(self, run: Run, agent: Agent) -> None:
        """Figures an SDK agent reported (cost, tokens, session), stored with the run, summed over its attempts.

        A session's figures are running totals, and a resumed session carries on from the one it resumed,
        so the run keeps the latest figures of each session and drops those of a session that was resumed.
        """
        session = getattr(agent, "session_id", None) or agent.result.get("session_id")
        if session:
            run.session_id = session
        result = agent.result
        if not result:
            return
        key = result.get("session_id") or f"attempt-{run.attempt}"
        resumed = run.sessions.pop(run.resumed_from, None) if run.resumed_from else None
        figures = dict(result)
        if resumed and resumed.get("num_turns") is not None:  # cost and tokens carry on in a resumed session, turns not
            figures["num_turns"] = (figures.get("num_turns") or 0) + resumed["num_turns"]
        run.sessions[key] = figures
        totals: dict[str, Any] = {}
        for name in ("cost_usd", "input_tokens", "output_tokens", "num_turns"):
            values = [figures[name] for figures in run.sessions.values() if figures.get(name) is not None]
            if values:
                totals[name] = sum(values)
        self.store.update_run(run.run_id, **totals, session_id=key, is_error=int(bool(result.get("is_error"))))
        self.refresh_budgets()

    def _succeed(self, run: Run) -> None:
        moved = self._move_memos(run, ARCHIVE)
        self.store.forget_memo_attempts(run.role.name, [m.name for m in run.memos])
        self._finish(run, RunState.SUCCEEDED, exit_code=0, reason=None)
        self.console.line(f"done {run.label} in {run.elapsed():.1f}s (run {run.run_id}); archived {len(moved)} memo(s)",
                          role=run.role.name)  # fmt: skip

    def _note_crash(self, role: Role, ran: float, failed: bool) -> bool:
        """Count crashes of a critical role on the monotonic clock; True when the loop limit is reached."""
        if not role.critical:
            return False
        if failed and ran <= role.crash.window:
            self.crashes[role.name] += 1
        else:
            self.crashes[role.name] = 0
        return self.crashes[role.name] >= role.crash.max

    def _attempt_failed(self, run: Run, reason: str, exit_code: int | None, retry: bool = True) -> None:
        """One attempt failed: retry after the backoff, or give up into failed/."""
        self._release_slot(run)
        self._end_attempt(run, "failed", reason, exit_code)
        role = run.role
        self.console.line(f"{run.label} attempt {run.attempt} failed: {reason} (run {run.run_id})", role=role.name)
        if self._note_crash(role, run.elapsed(), failed=True):
            self.begin_ending(
                "graceful",
                f"critical role {role.name} crashed {self.crashes[role.name]} times in a row, each within "
                f"{role.crash.window:g}s of its start (last: {reason}); see {run.log_path}",
                exit_code=3,
            )
        if self.ending:
            self._return_to_inbox(run, f"the orchestrator is ending; last attempt failed: {reason}")
            return
        retries_done = run.attempt - 1
        if retry and retries_done < role.retry.max:
            self._wait_for_retry(run, reason, exit_code=exit_code)
            return
        self._give_up(run, RunState.FAILED, reason, exit_code)
        if role.stop_on_failure:
            self.begin_ending("graceful", f"role {role.name} has stop_on_failure and {run.label} failed", exit_code=1)

    def _end_attempt(self, run: Run, outcome: str, reason: str, exit_code: int | None) -> None:
        """An attempt ended without success: on record, with the memos' attempt count kept for any return."""
        run.last_ran = run.elapsed()
        self.store.record_attempt(run.run_id, run.attempt, started_at=run.started_at, ended_at=now_iso(),
                                  exit_code=exit_code, outcome=outcome, reason=reason,
                                  log_path=str(run.log_path))  # fmt: skip
        for memo in run.memos:
            self.store.set_memo_attempts(run.role.name, memo.name, run.attempt)

    def _wait_for_retry(self, run: Run, reason: str, *, prefix: str = "", suffix: str = "", **fields: Any) -> None:
        """RETRY_WAIT for the role's next backoff (no slot held); ``RetryDue`` queues it again."""
        retry_number = run.attempt  # attempts so far, so the next retry is this one
        delay = run.role.retry.delay(retry_number)
        run.next_attempt_at = (datetime.now().astimezone() + timedelta(seconds=delay)).isoformat(timespec="milliseconds")
        self._transition(run, RunState.RETRY_WAIT, next_attempt_at=run.next_attempt_at, reason=reason, **fields)
        run.timers["retry"] = self._require_loop().call_later(delay, self.handle, RetryDue(run.run_id))
        self.console.line(f"{run.label} {prefix}retry {retry_number} of {run.role.retry.max} in {delay:g}s{suffix}",
                          role=run.role.name)  # fmt: skip

    def _give_up(self, run: Run, state: RunState, reason: str, exit_code: int | None) -> None:
        """Retries are over: memos to failed/ beside a reason file, and the coordinator told."""
        text = notices.failure_reason_text(run, state, reason, self.store.attempts(run.run_id))
        # the reason file is written first, so nobody sees a failed memo without its reason
        moved = self._move_memos(run, FAILED, before=lambda target: notices.write_reason(target, text))
        self.store.forget_memo_attempts(run.role.name, [m.name for m in run.memos])
        self._finish(run, state, exit_code=exit_code, reason=reason)
        self.console.line(f"{state.value} {run.label}: {reason}; moved to failed/ (run {run.run_id})", role=run.role.name)
        notify = self.config.notify
        if notify and notify != run.role.name:
            notice = notices.write_failure_notice(self.config, notify, run, state, reason, moved)
            self.console.line(f"told {notify}: {notice.name}", role=run.role.name)

    def _on_retry_due(self, event: RetryDue) -> None:
        run = self.runs.get(event.run_id)
        if run is None or run.state is not RunState.RETRY_WAIT:
            return
        run.timers.pop("retry", None)
        self.retry_ready[run.role.name].append(run)

    def _on_timeout(self, event: TimeoutFired) -> None:
        run = self.runs.get(event.run_id)
        if run is None or run.attempt != event.attempt or run.state is not RunState.RUNNING:
            return
        self.console.line(f"{run.label} passed its timeout of {run.role.timeout:g}s; stopping it", role=run.role.name)
        self._transition(run, RunState.TIMING_OUT)
        task = self._ensure_ladder(run, run.role.grace)
        task.add_done_callback(lambda _t: self._after_timeout_ladder(run))

    def _after_timeout_ladder(self, run: Run) -> None:
        if run.state is not RunState.TIMING_OUT:
            return  # a cancel took over, or the orchestrator force-ended
        reason = f"timed out after {run.role.timeout:g}s (attempt {run.attempt})"
        self._end_attempt(run, "timed_out", reason, run.exit_codes[-1] if run.exit_codes else None)
        if self.ending:
            self._return_to_inbox(run, reason)
        elif run.role.retry_timeouts and run.attempt - 1 < run.role.retry.max:
            run.stopping = run.stop_result = None  # this attempt's ladder is over; the next attempt starts free of it
            self._wait_for_retry(run, reason, prefix=f"{reason}; ", suffix=" (retry_timeouts)")
        else:
            self._give_up(run, RunState.TIMED_OUT, reason, run.exit_codes[-1] if run.exit_codes else None)
            if run.role.stop_on_failure:
                self.begin_ending("graceful", f"role {run.role.name} has stop_on_failure and {run.label} timed out",
                                  exit_code=1)  # fmt: skip
        self._schedule()
        self._maybe_done()

    # ------------------------------------------------------------ stopping
    def _ensure_ladder(self, run: Run, grace: float) -> asyncio.Future[Any]:
        """Start the kill ladder for the run's agent once; every caller awaits the same task."""
        if run.stopping is None:
            run.stopping = self._keep(self._ladder(run, grace))
        return run.stopping

    async def _ladder(self, run: Run, grace: float) -> dict[str, Any]:
        agent = await run.launched if run.launched is not None else run.agent
        report = procs.KillReport()
        if agent is not None:
            target = procs.Target(agent.ref, agent.pid, run.run_id, str(self.root))
            report = await procs.stop_tree(target, grace, lambda s: self.console.line(f"run {run.run_id}: {s}", role=run.role.name))
            if agent.waiter is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(agent.waiter), 5)
                except asyncio.TimeoutError:
                    pass
        self._release_slot(run)
        result = {"pids": report.pids, "seconds": round(report.seconds, 3), "escalated": report.escalated,
                  "survivors": report.survivors}  # fmt: skip
        run.stop_result = result
        if self.ending == "force" and run.state in (RunState.RUNNING, RunState.TIMING_OUT):
            self._return_to_inbox(run, "the orchestrator was force-stopped")
        self._schedule()
        self._maybe_done()
        return result

    def _return_to_inbox(self, run: Run, why: str) -> None:
        """Put the run's memos back into the inbox, attempt count kept, and end the run as returned."""
        run.cancel_timers()
        if run in self.retry_ready[run.role.name]:
            self.retry_ready[run.role.name].remove(run)
        for memo in run.memos:
            self.store.set_memo_attempts(run.role.name, memo.name, run.attempt)
        moved = self._move_memos(run, INBOX)
        self._finish(run, RunState.RETURNED, exit_code=run.exit_codes[-1] if run.exit_codes else None, reason=why)
        self.console.line(f"returned {', '.join(p.name for p in moved)} to the inbox: {why} (run {run.run_id})",
                          role=run.role.name)  # fmt: skip

    def _move_memos(self, run: Run, folder: str, before: Callable[[Path], None] | None = None) -> list[Path]:
        moved = []
        for memo in run.memos:
            try:
                old_name = memo.name
                memo.path = move_memo(memo.path, self.config.role_dir(run.role.name) / folder, before)
                memo.name = memo.path.name
                moved.append(memo.path)
                # attempt counts are kept by the name in active/; a move may rename (a clash), so settle them here
                if folder != INBOX:
                    self.store.forget_memo_attempts(run.role.name, [old_name])
                elif memo.name != old_name:
                    self.store.set_memo_attempts(run.role.name, memo.name, self.store.memo_attempts(run.role.name, old_name))
                    self.store.forget_memo_attempts(run.role.name, [old_name])
            except FileNotFoundError:
                self.console.line(f"{memo.path} disappeared from {ACTIVE}/ while its run was going", role=run.role.name)
        return moved

    def _finish(self, run: Run, state: RunState, exit_code: int | None, reason: str | None) -> None:
        run.cancel_timers()
        self._transition(run, state, ended_at=now_iso(), exit_code=exit_code, reason=reason,
                         memos=[m.name for m in run.memos])  # fmt: skip
        self.runs.pop(run.run_id, None)
        self._maybe_done()  # the last run of an ending orchestrator may end on any path (a failed spawn too)

    def _transition(self, run: Run, new: RunState, **fields: Any) -> None:
        run.move_to(new, self._announce)
        self.store.update_run(run.run_id, state=new.value, **fields)

    def _announce(self, run: Run, old: RunState, new: RunState) -> None:
        self.console.event(run, old, new)

    # ------------------------------------------------------------ cancel API
    async def request(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """A control-channel request; raises ``ControlError`` for a refusal."""
        from orchestrator.control import cancel

        if op == "status":
            return self.snapshot()
        if op == "stop":
            self.begin_ending("force" if args.get("force") else "graceful",
                              f"`orchestrator stop{' --force' if args.get('force') else ''}` from {args.get('who', '?')}")  # fmt: skip
            return {"ending": self.ending}
        if op == "cancel":
            return await cancel.cancel(self, args)
        if op in ("interrupt", "tell"):
            return await cancel.live_control(self, op, args)
        raise ControlError(f"unknown request {op!r}; known: status, stop, cancel, interrupt, tell")

    def snapshot(self) -> dict[str, Any]:
        """Live state for ``status``: the light view plus recent finished runs from the database."""
        return {**self.snapshot_light(), "recent": self.store.recent_runs(20)}

    def snapshot_light(self) -> dict[str, Any]:
        """Live state without touching the database (redrawn several times a second)."""
        runs = sorted(self.runs.values(), key=lambda r: r.run_id)
        return {
            "running": True,
            "pid": os.getpid(),
            "root": str(self.root),
            "started_at": self.started_at,
            "ending": self.ending,
            "runs": [r.describe() for r in runs],
            "queued": {role: len(q) for role, q in self.intake.queues.items()},
            "queued_memos": {role: [p.name for p in list(q)[:20]] for role, q in self.intake.queues.items() if q},
            "pending": len(self.intake.pending),
            "limits": {"max_concurrent": self.config.max_concurrent, "running": self.total_live},
            "crash_counts": dict(self.crashes),
            "budget_blocks": dict(self.budget_blocks),
            "events": list(self.console.recent),
        }


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (not sent by the orchestrator)"
    return f"exit code {code}"
