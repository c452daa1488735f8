"""The states of a run, the transitions allowed between them, and how the orchestrator ends. Imports nothing of ours.

A run holds a slot exactly while its state is ``live``; the lifecycle takes and
gives back slots on the transitions into and out of those states, so no flag
beside the state says whether it holds one. The three states in which the
orchestrator is stopping a run's agent end as ``STOP_ENDS`` says, the one place
that says it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class RunState(str, Enum):
    """Where one run (one memo, or one batch of memos, and its attempts) stands."""

    QUEUED = "queued"
    """Known to the database, nothing started: waiting for its first attempt (or about to be rejected)."""
    STARTING = "starting"
    """Memo(s) claimed into active/, a slot held, the attempt on record; the agent process is being started."""
    RUNNING = "running"
    """The agent process is alive and its pid is on record."""
    INTERRUPTING = "interrupting"
    """An SDK agent was asked to end its turn (`orchestrator interrupt`); that end makes the run cancelled."""
    CANCELLING = "cancelling"
    """A person asked to stop it; the agent is being stopped (interrupt first for SDK agents, then the kill ladder)."""
    TIMING_OUT = "timing_out"
    """It passed the role's timeout; the kill ladder is under way."""
    STOPPING = "stopping"
    """The orchestrator is force-ending; the kill ladder is under way and the memos go back to the inbox."""
    RETRY_WAIT = "retry_wait"
    """The last attempt failed; the next starts after the backoff. Holds no slot."""
    SUCCEEDED = "succeeded"
    """The agent exited 0; memo(s) archived."""
    FAILED = "failed"
    """Retries ran out, the memo cannot be delivered, or an internal error ended it; memo(s) in failed/ with a reason."""
    CANCELLED = "cancelled"
    """Stopped on request; memo(s) in cancelled/, never retried."""
    TIMED_OUT = "timed_out"
    """Stopped for passing the timeout; memo(s) in failed/ with the reason."""
    RETURNED = "returned"
    """The orchestrator ended or restarted under it; memo(s) back in inbox/ with the attempt count kept (or in held/,
    parked for a person by a feature's ``decide_end``, until ``orchestrator release``)."""

    @property
    def finished(self) -> bool:
        return self in FINISHED

    @property
    def live(self) -> bool:
        """A process exists, is being started or is being stopped for the run: it holds a slot."""
        return self in LIVE

    @property
    def being_stopped(self) -> bool:
        """The orchestrator is stopping the agent (a key of ``STOP_ENDS``): its exit does not decide the outcome."""
        return self in STOP_ENDS


class Ending(str, Enum):
    """How the orchestrator itself is ending (``Supervisor.ending``, None while it is not)."""

    GRACEFUL = "graceful"
    """Nothing new starts; running agents finish their work, then the orchestrator exits."""
    FORCE = "force"
    """Every agent is stopped now (its run ``STOPPING``) and its memos go back to the inbox."""

    def __str__(self) -> str:
        return self.value  # as ``status`` and the live view print it


@dataclass(frozen=True)
class StopEnd:
    """How a run ends whose agent the orchestrator was stopping.

    ``stopped``: once its tree is dead, or its start failed, in this orchestrator (``TIMED_OUT`` is the end
    when no retry is due: the failure rules may retry it, or return it while ending). ``at_restart``: when
    the orchestrator died during the stop and the run was not adopted.
    """

    stopped: RunState
    at_restart: RunState


FINISHED = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.TIMED_OUT, RunState.RETURNED})
LIVE = frozenset(
    {
        RunState.STARTING,
        RunState.RUNNING,
        RunState.INTERRUPTING,
        RunState.CANCELLING,
        RunState.TIMING_OUT,
        RunState.STOPPING,
    }
)

UNFINISHED = [state for state in RunState if state not in FINISHED]

STOP_ENDS: dict[RunState, StopEnd] = {
    # a person asked: never retried, and the decision outlives a restart
    RunState.CANCELLING: StopEnd(stopped=RunState.CANCELLED, at_restart=RunState.CANCELLED),
    # its timeout passed (or it stalled): a failed attempt; at a restart the memo goes back and runs again
    RunState.TIMING_OUT: StopEnd(stopped=RunState.TIMED_OUT, at_restart=RunState.RETURNED),
    # the orchestrator is force-ending: back to the inbox with the attempts kept
    RunState.STOPPING: StopEnd(stopped=RunState.RETURNED, at_restart=RunState.RETURNED),
}

_S = RunState
ALLOWED: dict[RunState, frozenset[RunState]] = {
    # QUEUED -> STARTING: claimed, a slot taken; -> FAILED: rejected (undeliverable); -> CANCELLED: cancelled in the
    # inbox; -> RETURNED: recorded by an orchestrator that died before starting it
    _S.QUEUED: frozenset({_S.STARTING, _S.FAILED, _S.CANCELLED, _S.RETURNED}),
    # STARTING -> RUNNING: the agent is up; -> RETRY_WAIT / FAILED: it could not be started; -> CANCELLING /
    # STOPPING: stopped before it was up; -> RETURNED: could not be started while ending, or found at restart
    _S.STARTING: frozenset({_S.RUNNING, _S.RETRY_WAIT, _S.FAILED, _S.CANCELLING, _S.STOPPING, _S.RETURNED}),
    _S.RUNNING: frozenset(
        {
            _S.SUCCEEDED,
            _S.RETRY_WAIT,
            _S.FAILED,
            _S.INTERRUPTING,
            _S.CANCELLING,
            _S.TIMING_OUT,
            _S.STOPPING,
            _S.RETURNED,
        }
    ),
    # INTERRUPTING -> CANCELLED: the interrupt ended the turn; -> SUCCEEDED: the work was done before it arrived;
    # -> RUNNING: it could not be delivered; -> RETRY_WAIT / FAILED: the agent failed on its own meanwhile
    _S.INTERRUPTING: frozenset(
        {
            _S.CANCELLED,
            _S.SUCCEEDED,
            _S.RUNNING,
            _S.RETRY_WAIT,
            _S.FAILED,
            _S.CANCELLING,
            _S.TIMING_OUT,
            _S.STOPPING,
            _S.RETURNED,
        }
    ),
    # CANCELLING -> RETURNED: a cancel under way at a restart whose role left roles.yaml
    _S.CANCELLING: frozenset({_S.CANCELLED, _S.RETURNED, _S.FAILED}),
    # a cancel during a timeout's ladder wins: the person's decision is what is remembered
    _S.TIMING_OUT: frozenset({_S.TIMED_OUT, _S.RETRY_WAIT, _S.CANCELLING, _S.STOPPING, _S.RETURNED, _S.FAILED}),
    _S.STOPPING: frozenset({_S.RETURNED, _S.FAILED}),
    _S.RETRY_WAIT: frozenset({_S.STARTING, _S.CANCELLED, _S.RETURNED, _S.FAILED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
    _S.TIMED_OUT: frozenset(),
    _S.RETURNED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A bug: the supervisor tried a transition the table does not allow."""


def check_transition(current: RunState, new: RunState) -> None:
    """Raise ``IllegalTransition`` unless ``current -> new`` is in the table."""
    if new not in ALLOWED[current]:
        raise IllegalTransition(f"run state {current.value} -> {new.value} is not allowed")
