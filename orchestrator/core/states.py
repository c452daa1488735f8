"""The states of a run and the transitions allowed between them. Imports nothing of ours."""

from __future__ import annotations

from enum import Enum


class RunState(str, Enum):
    """Where one run (one memo, or one batch of memos, and its attempts) stands."""

    QUEUED = "queued"
    """Waiting in the inbox for a free slot; nothing claimed yet."""
    RUNNING = "running"
    """Memo(s) claimed into active/, the agent process is alive."""
    CANCELLING = "cancelling"
    """A person asked to stop it; the kill ladder is under way."""
    TIMING_OUT = "timing_out"
    """It passed the role's timeout; the kill ladder is under way."""
    RETRY_WAIT = "retry_wait"
    """The last attempt failed; the next starts after the backoff. Holds no slot."""
    SUCCEEDED = "succeeded"
    """The agent exited 0; memo(s) archived."""
    FAILED = "failed"
    """Retries ran out (or the memo cannot be delivered); memo(s) in failed/ with a reason."""
    CANCELLED = "cancelled"
    """Stopped on request; memo(s) in cancelled/, never retried."""
    TIMED_OUT = "timed_out"
    """Stopped for passing the timeout; memo(s) in failed/ with the reason."""
    RETURNED = "returned"
    """The orchestrator ended or restarted under it; memo(s) back in inbox/ with the attempt count kept."""

    @property
    def finished(self) -> bool:
        return self in FINISHED

    @property
    def live(self) -> bool:
        """A process exists (or is being stopped) for the run."""
        return self in (RunState.RUNNING, RunState.CANCELLING, RunState.TIMING_OUT)


FINISHED = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.TIMED_OUT, RunState.RETURNED}
)

UNFINISHED = [state for state in RunState if state not in FINISHED]

ALLOWED: dict[RunState, frozenset[RunState]] = {
    # QUEUED -> RUNNING: claimed and started; -> RETRY_WAIT: could not be started
    RunState.QUEUED: frozenset(
        {RunState.RUNNING, RunState.RETRY_WAIT, RunState.FAILED, RunState.CANCELLED, RunState.RETURNED}
    ),
    RunState.RUNNING: frozenset(
        {
            RunState.SUCCEEDED,
            RunState.RETRY_WAIT,
            RunState.FAILED,
            RunState.CANCELLING,
            RunState.TIMING_OUT,
            RunState.RETURNED,
            RunState.CANCELLED,
        }
    ),
    RunState.CANCELLING: frozenset({RunState.CANCELLED, RunState.RETURNED}),
    # a cancel during a timeout's ladder wins: the person's decision is what is remembered
    RunState.TIMING_OUT: frozenset(
        {RunState.TIMED_OUT, RunState.RETRY_WAIT, RunState.CANCELLING, RunState.RETURNED}
    ),
    RunState.RETRY_WAIT: frozenset({RunState.RUNNING, RunState.CANCELLED, RunState.RETURNED, RunState.FAILED}),
    RunState.SUCCEEDED: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.CANCELLED: frozenset(),
    RunState.TIMED_OUT: frozenset(),
    RunState.RETURNED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A bug: the supervisor tried a transition the table does not allow."""


def check_transition(current: RunState, new: RunState) -> None:
    if new not in ALLOWED[current]:
        raise IllegalTransition(f"run state {current.value} -> {new.value} is not allowed")
