"""The dashboard and the spans per run as one extension of ``up``: what they read, what they ask, what they hear.

(a) ``state``: exactly what ``status --json`` prints (the host's snapshot, plus the held counts the command
adds); (b) actions: the same typed control requests the CLI sends (``control.protocol``), admitted by the same
gate and posted as the same events to the same loop, the caller a person holding the token unless the kernel
traced the connection to an agent's process (``web.peers``); (c) every run state change, for the ``events``
stream, the metrics and the spans. It is plugged in through the one port (``supervisor.extension``) like every
feature (``web.extension`` adds what it serves); nothing else in ``orchestrator/web`` knows of the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.agents.backends import capabilities
from orchestrator.config.schedule import zone as team_zone
from orchestrator.control import protocol
from orchestrator.control.authority import PERSON, Caller
from orchestrator.core.errors import MemoFinishedError, UnknownMemoError
from orchestrator.core.events import RunFinished
from orchestrator.core.run import Run
from orchestrator.core.states import RunState
from orchestrator.core.view import FIGURES, RunView
from orchestrator.intake.catalog import held_counts
from orchestrator.intake.memo import FAILED, INBOX, free_name
from orchestrator.intake.notices import reason_path
from orchestrator.supervisor.budgets import counted_since
from orchestrator.supervisor.extension import Extension, Host

if TYPE_CHECKING:
    from orchestrator.config import Config

Listener = Callable[[dict[str, Any]], None]


class Attachment(Extension):
    """The running orchestrator as the dashboard sees it, through its ``Host``: read-only views, the gate's
    requests, run changes."""

    def __init__(self, host: Host) -> None:
        self._host = host
        self.config: Config = host.config
        self.root: Path = host.config.root
        self.clock = host.clock
        self.started_at = host.started_at
        self._listeners: list[Listener] = []
        self._env_hooks: list[Callable[[int], dict[str, str]]] = []
        # set by ``start``: the server listens from ``open`` on, while other features may still be opening
        self._started = asyncio.Event()

    # ------------------------------------------------------------ the port's hooks
    def on_transition(self, run: Run, old: RunState, new: RunState) -> None:
        self._changed(run, old, new)

    def on_finished(self, event: RunFinished) -> None:
        self._finished(event.run, event.state, event.reason)

    def start(self) -> None:
        self._started.set()

    def agent_env(self, run: Run) -> dict[str, str]:
        env: dict[str, str] = {}
        for hook in self._env_hooks:
            env.update(hook(run.run_id))
        return env

    # ------------------------------------------------------------ (a) reads
    def state(self) -> dict[str, Any]:
        """``status --json``: the supervisor's snapshot and the held memos per role."""
        return {**self._host.snapshot(True), "held": held_counts(self.root)}

    def light(self) -> dict[str, Any]:
        """The live part of ``state`` without the database (for the metrics and the events' change checks)."""
        return self._host.snapshot(False)

    def spent_today(self) -> dict[str, Any]:
        """Spend since midnight in the team's ``timezone`` (as the daily budgets count it), the team's and each
        role's, beside the budgets of ``roles.yaml``."""
        since = counted_since(self.clock.now(), team_zone(self.config.timezone))
        store = self._host.store

        def spent(role: str | None) -> dict[str, Any]:
            return {
                "spent_usd": round(store.spent_since(since, role), 6),
                "estimated": store.estimated_since(since, role),
            }

        roles = {
            name: {**spent(name), "per_day_usd": role.budget.per_day_usd} for name, role in self.config.roles.items()
        }
        team = {**spent(None), "per_day_usd": self.config.budget.per_day_usd}
        return {"since": since, "team": team, "roles": roles}

    def quiet(self) -> dict[int, float]:
        """Seconds since each running run's agent last wrote output (the overview's colours); unknown left out."""
        now = self.clock.now().timestamp()
        out = {}
        for run in self._host.runs().values():
            seen = run.agent.last_output() if run.agent is not None and run.state is RunState.RUNNING else None
            if seen is not None:
                out[run.run_id] = round(max(0.0, now - seen), 1)
        return out

    def run(self, run_id: int) -> dict[str, Any] | None:
        """A run's view (live, else as recorded), its attempts, the controls its backend takes (``interrupt``,
        ``tell``) and, when it was cancelled, the receipt."""
        live = self._host.runs().get(run_id)
        store = self._host.store
        row = store.run(run_id)
        if live is not None:
            view = RunView.from_run(live, self.clock.monotonic()).to_json()
        elif row is not None:
            view = RunView.from_row(row).to_json()
        else:
            return None
        receipt = store.cancellation_of(view["memo_id"] or view["memo"] or "") if view["state"] == "cancelled" else None
        failed = None
        if view["state"] in ("failed", "timed_out") and view.get("memo"):
            failed = self._failed_memo(view["role"], view["memo"])
        role = self.config.roles.get(view["role"])
        can = capabilities(role) if role is not None else None
        return {
            "run": view,
            "controls": {"interrupt": bool(can and can.interrupt), "tell": bool(can and can.tell)},
            "attempts": store.attempts(run_id),
            "receipt": receipt,
            "retryable": failed is not None,
            "session_id": (row or {}).get("session_id"),
        }

    # ------------------------------------------------------------ (b) actions
    def caller(self, pid: int | None) -> Caller:
        """Who holds the connection: an agent when the kernel traces ``pid`` to one, else the token's person."""
        return PERSON if pid is None else self._host.identify(pid)

    async def ask(self, request: protocol.Request | protocol.FeatureRequest, caller: Caller) -> dict[str, Any]:
        """A control request, through the gate and the loop exactly as ``Supervisor.answer`` posts the CLI's, and like
        it held until every feature has started (a request acted on before, an answer before the asks feature has
        read back its questions, say, would find what a restart left half-done)."""
        await self._started.wait()
        request = self._host.admit(request, caller)
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._host.post(protocol.to_event(request, reply))
        return dict(await reply)

    def feature_models(self) -> Mapping[str, type[protocol.FeatureRequest]]:
        """The requests the features serve, by ``op``: the dashboard sends them as the CLI does."""
        return self._host.feature_requests()

    def require(self, caller: Caller, command: str, own: bool = False) -> None:
        """The gate's check for a command that acts on files itself (``send``, ``release``, a retry)."""
        self._host.require(caller, command, own)

    def retry(self, run_id: int, who: str) -> dict[str, Any]:
        """A failed run's memo back into its inbox with its attempts reset: a person's decision, logged."""
        row = self._host.store.run(run_id)
        if row is None:
            raise UnknownMemoError(f"no run {run_id} on record")
        view = RunView.from_row(row)
        if view.state not in ("failed", "timed_out") or not view.memos:
            raise MemoFinishedError(f"run {run_id} is {view.state}; only a failed run's memo can be retried")
        moved = []
        for name in view.memos:
            source = self._failed_memo(view.role, name)
            if source is None:
                continue
            inbox = self.config.role_dir(view.role) / INBOX
            target = free_name(inbox, name)
            self._host.store.forget_memo_attempts(view.role, [name, target.name])
            os.rename(source, target)
            with contextlib.suppress(OSError):
                reason_path(source).unlink()
            moved.append(target.name)
        if not moved:
            raise UnknownMemoError(f"run {run_id}'s memo is no longer in memo/{view.role}/failed/")
        when = self.clock.now().astimezone().isoformat(timespec="seconds")
        self._host.console.line(
            f"retry of run {run_id} ({', '.join(moved)}) by {who} at {when}: back to memo/{view.role}/inbox/, "
            "its attempts reset",
            role=view.role,
        )
        return {"run_id": run_id, "role": view.role, "memos": moved, "moved_to": f"memo/{view.role}/inbox/"}

    def _failed_memo(self, role: str, name: str) -> Path | None:
        path = self.config.role_dir(role) / FAILED / name
        return path if path.is_file() else None

    def recorded(self, run_id: int) -> dict[str, Any] | None:
        """The run's row as the database has it now (tokens, session id)."""
        return self._host.store.run(run_id)

    # ------------------------------------------------------------ (c) changes
    def add_agent_env(self, hook: Callable[[int], dict[str, str]]) -> None:
        """More environment for each attempt's agent, asked by run id once the attempt is on record."""
        self._env_hooks.append(hook)

    def watch(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with ``{"type": "run", "run": view}`` at every run state change; returns the undo."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _changed(self, run: Run, old: RunState, new: RunState) -> None:
        if self._listeners and not new.finished:
            self._emit(run, new, None, old)

    def _finished(self, run: Run, state: RunState, reason: str | None) -> None:
        if self._listeners:
            self._emit(run, state, reason, None)

    def _emit(self, run: Run, state: RunState, reason: str | None, old: RunState | None) -> None:
        now = self.clock.monotonic()
        extra: dict[str, Any] = {"state": state.value, "reason": reason}
        if state.finished and run.started_at:
            extra["elapsed"] = round(run.elapsed(now), 3)
        if state.finished:  # what it spent, as recorded at its end (a Codex run's agent reports no live cost)
            row = self._host.store.run(run.run_id) or {}
            extra.update({k: row[k] for k in FIGURES if row.get(k) is not None})
            if "cost_usd" in extra:
                extra["cost_estimated"] = bool(extra.get("cost_estimated"))
        view = RunView.from_run(run, now, **extra)
        event = {"type": "run", "run": view.to_json(), "previous": old.value if old else None}
        for listener in list(self._listeners):
            listener(event)
