"""One view of a run, as ``status``, ``history``, ``cancel`` and the live view show it.

A run reaches people from three places: the live ``Run`` object the supervisor
owns (``RunView.from_run``), a row of the database (``RunView.from_row``), and the
JSON the control channel carries (``RunView.model_validate``, whose field names are
the JSON keys). Each answer keeps its own set of keys: ``to_json`` gives what
``status --json`` prints for a run, ``to_history_json`` what ``history --json``
prints, and ``CancelView.to_json`` what a cancel answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from orchestrator.core.states import RunState

if TYPE_CHECKING:
    from orchestrator.core.run import Run

#: what a run spent, as its record holds it: its cost (and whether it is estimated from `prices`), tokens, turns
FIGURES = (
    "cost_usd",
    "cost_estimated",
    "input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
    "num_turns",
)
#: the keys of a run in ``status --json`` (``runs`` and ``recent`` alike), in the order printed
STATUS_KEYS = (
    "run_id",
    "seq",
    "role",
    "memo",
    "memo_id",
    "workspace",
    "branch",
    "memos",
    "subject",
    "state",
    "pid",
    "attempt",
    "started_at",
    "ended_at",
    "elapsed",
    "next_attempt_at",
    "exit_code",
    "reason",
    "backend",
    "activity",
    "cost_usd",
    "cost_estimated",
    "input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
    "log",
    "log_pruned_at",
)
#: the keys of a run in ``history --json``
HISTORY_KEYS = (
    "run_id",
    "seq",
    "role",
    "memo",
    "memo_id",
    "workspace",
    "branch",
    "state",
    "reason",
    "backend",
    "attempt",
    *FIGURES,
    "session_id",
    "is_error",
    "started_at",
    "ended_at",
    "node",
    "log",
    "log_pruned_at",
    "adopted_at",
)
#: the keys of one cancelled memo's answer to ``cancel``
CANCEL_KEYS = (
    "memo",
    "memo_id",
    "role",
    "run_id",
    "state",
    "previous_state",
    "pids",
    "seconds",
    "escalated",
    "survivors",
    "memos",
    "moved_to",
    "notice",
    "reason",
)


class RunView(BaseModel):
    """A run as people see it: what it works on, where it stands, what it cost."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: int
    seq: int | None = None
    role: str
    memo: str | None = None
    memo_id: str | None = None
    memos: list[str] = []
    subject: str | None = None
    state: str
    pid: int | None = None
    attempt: int | None = None
    started_at: str | None = None
    ended_at: str | None = None
    elapsed: float | None = None
    next_attempt_at: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    backend: str | None = None
    activity: str | None = None
    cost_usd: float | None = None
    cost_estimated: bool | None = None  # its cost is an estimate from `prices` (a backend reporting only tokens)
    input_tokens: int | None = None
    cached_input_tokens: int | None = None  # among the input tokens
    cache_write_input_tokens: int | None = None  # among the input tokens
    output_tokens: int | None = None
    reasoning_output_tokens: int | None = None  # among the output tokens
    num_turns: int | None = None
    session_id: str | None = None
    is_error: bool | None = None
    log: str | None = None
    log_pruned_at: str | None = None  # when retention removed the log (``log`` still names where it was)
    node: str | None = None  # the Ray node it runs (ran) on; None for local runs
    adopted_at: str | None = None  # when a restart of the orchestrator last took it back (supervisor/adoption)
    workspace: str | None = None  # the workspace it worked in (orchestrator/workspaces); None: the project folder
    branch: str | None = None  # that workspace's branch

    @classmethod
    def of(cls, data: RunView | Mapping[str, Any]) -> RunView:
        """A view from a view or from its JSON (a run of a status snapshot)."""
        return data if isinstance(data, RunView) else cls.model_validate(data)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunView:
        """A run as the database recorded it (a ``runs`` row of ``orchestrator.store``)."""
        memos = row.get("memos") or []
        ids = row.get("memo_ids") or []
        is_error = row.get("is_error")
        return cls(
            run_id=row["run_id"],
            seq=row.get("seq"),
            role=row["role"],
            memo=memos[0] if memos else None,
            memo_id=ids[0] if ids else None,
            memos=memos,
            subject=row.get("subject"),
            state=row["state"],
            pid=None if row["state"] == RunState.RETRY_WAIT.value else row.get("pid"),  # as ``from_run``
            attempt=row.get("attempt"),
            started_at=row.get("started_at"),
            ended_at=row.get("ended_at"),
            next_attempt_at=row.get("next_attempt_at"),
            exit_code=row.get("exit_code"),
            reason=row.get("reason"),
            backend=row.get("backend"),
            cost_usd=row.get("cost_usd"),
            cost_estimated=None if row.get("cost_usd") is None else bool(row.get("cost_estimated")),
            input_tokens=row.get("input_tokens"),
            cached_input_tokens=row.get("cached_input_tokens"),
            cache_write_input_tokens=row.get("cache_write_input_tokens"),
            output_tokens=row.get("output_tokens"),
            reasoning_output_tokens=row.get("reasoning_output_tokens"),
            num_turns=row.get("num_turns"),
            session_id=row.get("session_id"),
            is_error=None if is_error is None else bool(is_error),
            log=row.get("log_path"),
            log_pruned_at=row.get("log_pruned_at"),
            node=row.get("node"),
            adopted_at=row.get("adopted_at"),
            workspace=row.get("workspace"),
            branch=row.get("branch"),
        )

    @classmethod
    def from_run(cls, run: Run, now: float, **extra: Any) -> RunView:
        """A run the supervisor holds, ``now`` being the monotonic clock's reading; ``extra`` sets or overrides
        fields (a cancel's outcome, its end state)."""
        first = run.memos[0] if run.memos else None
        state = RunState(run.state)
        agent = run.agent
        fields: dict[str, Any] = dict(
            run_id=run.run_id,
            seq=run.seq,
            role=run.role.name,
            memo=first.name if first else None,
            memo_id=first.memo_id if first else None,
            memos=[m.name for m in run.memos],
            subject=(first.subject or first.name) if first else "",
            state=state.value,
            pid=None if state is RunState.RETRY_WAIT else run.pid,  # its last agent is dead: no pid is its now
            attempt=run.attempt,
            started_at=run.started_at,
            elapsed=round(run.elapsed(now), 3) if state.live else None,
            next_attempt_at=run.next_attempt_at if state is RunState.RETRY_WAIT else None,
            backend=run.role.backend,
            activity=f"ending as {run.settling}" if run.settling else agent.activity if agent else None,
            cost_usd=agent.cost_usd if agent else None,
            log=str(run.log_path) if run.log_path else None,
            node=agent.node if agent else None,
        )
        if state is RunState.RETRY_WAIT and run.retry_due and run.settling is None and run.next_attempt_at:
            # due, and not ending: what holds it is its role's (a slot, a budget, a pause, a hold), not its time
            fields["activity"] = (
                f"retry due since {run.next_attempt_at[11:19]}; it waits to start (a free slot, or a budget, pause or hold below)"
            )
        return cls(**{**fields, **extra})

    @property
    def label(self) -> str:
        """How people name the run's memo: its front-matter id, else its file name."""
        return self.memo_id or self.memo or ""

    def to_json(self) -> dict[str, Any]:
        """The run as ``status --json`` prints it."""
        return {key: getattr(self, key) for key in STATUS_KEYS}

    def to_history_json(self) -> dict[str, Any]:
        """The run as ``history --json`` prints it."""
        return {key: getattr(self, key) for key in HISTORY_KEYS}


class CancelView(RunView):
    """A run a cancel ended (or found ending): the run, the state it was in, and how it was stopped."""

    run_id: int | None = None  # type: ignore[assignment]  # an answer about a run already being cancelled has none
    previous_state: str | None = None
    pids: list[int] = []
    seconds: float = 0.0
    escalated: bool = False
    survivors: list[int] = []
    moved_to: list[str] = []
    notice: str | None = None
    note: str | None = None

    @classmethod
    def of(cls, data: RunView | Mapping[str, Any]) -> CancelView:
        """A cancel's answer for one memo, from its JSON."""
        return data if isinstance(data, CancelView) else cls.model_validate(data)

    def to_json(self) -> dict[str, Any]:
        """One cancelled memo as ``cancel`` answers it."""
        return {key: getattr(self, key) for key in CANCEL_KEYS}
