"""The agent boundary as the supervisor sees it: one handle per attempt, and one verdict at its end.

``Run.agent`` holds an ``AgentHandle`` once the attempt's agent is started (or
adopted at a restart). The supervisor reads it (pid, backend, what it is doing,
its figures), asks it for an interrupt, a tell or a stop, and learns its end
once, as an ``AttemptVerdict`` in ``RunExited``. The one implementation is
``orchestrator.agents.handle.Agent``, whose variations (how its end is read,
the Claude CLI's failure wording, the SDK session it follows, Ray's transport)
are strategies it is given; the replay tests pass a fake. What a kind of agent
can do is its ``Capabilities``, which its backend (``orchestrator.agents.backends``)
declares and the core asks instead of its name. Nothing here imports anything
above ``core``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

Log = Callable[[str], None]


@dataclass(frozen=True)
class UsageLimit:
    """The account hit a usage or rate limit: the attempt never got to work, and the account waits for its reset.

    ``kind``: ``five_hour``, ``weekly``, ``rate_limit``, ...; ``resets_at``: epoch seconds when known;
    ``detail``: one line for a person."""

    kind: str  # e.g. "five_hour", "weekly", "rate_limit"
    resets_at: float | None  # epoch seconds when known
    detail: str


@dataclass(frozen=True)
class LastWords:
    """What an agent last did and said, read once at its end for the journal and the note of a run that died:
    its last tool use (``Tool: argument``), the last line of its last text, and its final result's text."""

    tool: str | None = None
    text: str | None = None
    result: str | None = None


@dataclass(frozen=True)
class Capabilities:
    """What one kind of agent can do, as its backend declares it; the core asks these, never the backend's name.

    ``session``: it runs a session with an id, reported with its figures; ``resume``: a retry can carry on that
    session (``retry_resumes``); ``tell``: it takes a follow-up message (into its live session, or kept for the
    next turn of a program that runs one turn a process); ``interrupt``: its turn can be ended on
    request; ``cost``: it reports what it cost in dollars; ``tokens``: it reports the tokens it used (dollars or
    not); ``usage_limits``: it recognises an account's usage limit and its reset; ``defers``: a permission hook
    can defer its tool call to a person, ending its run, and its end says which call (``DeferredCall``); ``instead``:
    what a person can change to get a ``tell`` it lacks, when its backend knows better than ``backend: sdk``."""

    session: bool = False
    resume: bool = False
    tell: bool = False
    interrupt: bool = False
    cost: bool = False
    tokens: bool = False
    usage_limits: bool = False
    defers: bool = False
    instead: str | None = None


@dataclass(frozen=True)
class DeferredCall:
    """A tool call the agent's permission hook deferred to a person, ending its run until an answer comes: the
    call's ``id``, the tool's ``name`` and its ``input``, as the agent reported them."""

    id: str
    name: str
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Judgement:
    """How an agent's own output says its attempt went, read at its end by its backend's reader: ``failed``
    whatever its exit status, with one ``reason`` (``permanent``: no retry can help); ``usage_limit``: the limit
    it ran into; ``warnings``: lines for a person when it succeeded with something to say (tool calls refused
    under ``on_denied: warn``); ``deferred``: the tool call its run ended on, waiting for a person. The default is
    no judgement: the exit status decides."""

    failed: bool = False
    reason: str | None = None
    permanent: bool = False
    warnings: tuple[str, ...] = ()
    usage_limit: UsageLimit | None = None
    last_words: LastWords | None = None
    deferred: DeferredCall | None = None


@dataclass(frozen=True)
class AttemptVerdict:
    """How one attempt's agent ended, decided once, when it ended.

    ``returncode``: its exit status, or minus the signal that ended it; ``interrupted``: its session's turn
    was interrupted on request (and no tell came after); ``budget_exceeded``: its per-run budget stopped it;
    ``permanent_failure``: no retry can help (not logged in, a rejected key, ...); ``session_id``: the SDK
    session it ran; ``failure_reason``: one line for a person, when it knows better than its exit status;
    ``agent_failed``: the agent itself reported a failure (Claude's result), whatever its exit status;
    ``warnings``: lines for a person about an attempt that succeeded (tool calls refused under ``on_denied: warn``);
    ``usage_limit``: the usage or rate limit it ran into; ``last_words``: what it last did and said, when its
    output can tell (None: only its log's last lines can); ``deferred``: the tool call it ended on, deferred to a
    person (a question, an approval); ``ended_at``: when its agent ended (epoch seconds), when that was before its
    end was told (an end its wrapper kept while no orchestrator was there to hear it)."""

    returncode: int
    interrupted: bool = False
    budget_exceeded: bool = False
    permanent_failure: bool = False
    session_id: str | None = None
    failure_reason: str | None = None
    agent_failed: bool = False
    warnings: tuple[str, ...] = ()
    usage_limit: UsageLimit | None = None
    last_words: LastWords | None = None
    deferred: DeferredCall | None = None
    ended_at: float | None = None

    @property
    def succeeded(self) -> bool:
        """Exit 0, and the agent did not report a failure."""
        return self.returncode == 0 and not self.agent_failed


@dataclass
class KillReport:
    """What a stop ended: the processes it found, how long it took, whether SIGKILL was needed, what survived."""

    pids: list[int] = field(default_factory=list)
    seconds: float = 0.0
    escalated: bool = False
    survivors: list[int] = field(default_factory=list)


def describe_exit(code: int) -> str:
    """An exit status for people: ``exit code 4``, ``killed by SIGKILL (not sent by the orchestrator)``."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (not sent by the orchestrator)"
    return f"exit code {code}"


class AgentHandle(Protocol):
    """One attempt's agent: where it runs, what it is doing, what it reported, and how to reach and stop it."""

    # set by the supervisor: called when the attempt goes on in a process of its own (a tell carried on to the
    # next turn), so that process's pid goes on record: a restart takes back that one, not the ended first
    on_turn: Callable[[AgentHandle], None] | None

    @property
    def backend(self) -> str:
        """Its role's ``backend`` (``command``, ``sdk``), for a person: what it can do is ``capabilities``."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What it can do (take a tell, an interrupt, report a session and its cost), as its backend declares."""
        ...

    @property
    def pid(self) -> int | None:
        """The agent's pid (a session leader, so its process group too); None when it is not known."""
        ...

    @property
    def create_time(self) -> float | None:
        """The agent's create time, which makes its pid unambiguous; None when it is not known."""
        ...

    @property
    def node(self) -> str | None:
        """The Ray node it runs on; None for a local agent."""
        ...

    @property
    def stop_slack(self) -> float:
        """Seconds its stop may take beyond the ladder's own (an interrupt's grace, then the kill's): the waits for
        the place it runs (a Ray wrapper's word, a task on its node); 0 for a local agent. A cancel's answer waits
        this much longer, so a stop that is still keeping its bounds is not reported as late."""
        ...

    @property
    def activity(self) -> str | None:
        """What its session is doing now (an SDK agent), for ``status`` and the live view."""
        ...

    @property
    def cost_usd(self) -> float | None:
        """What its session has cost so far, as it reported."""
        ...

    @property
    def result(self) -> dict[str, Any]:
        """Its session's latest figures: ``cost_usd``, ``input_tokens``, ``output_tokens``, ``num_turns``,
        ``session_id``, ``is_error``, ``subtype`` (empty when it reported none)."""
        ...

    @property
    def session_id(self) -> str | None:
        """The SDK session it runs, once known."""
        ...

    @property
    def verdict(self) -> AttemptVerdict | None:
        """How it ended; None while it runs."""
        ...

    async def interrupt(self, keep: bool = False) -> None:
        """End its session's current turn (with ``keep`` the session waits for a tell); ``OrchestratorError``
        when it cannot."""
        ...

    async def tell(self, text: str) -> str | None:
        """A follow-up message into its session; ``OrchestratorError`` when it cannot take one. Returns what
        becomes of it when it is not taken at once (a program agent's: "queued for the end of its turn")."""
        ...

    async def stop(self, grace: float, log: Log, interrupt_first: bool) -> KillReport:
        """Stop its whole tree (its session's turn first, when asked): SIGTERM, ``grace``, SIGKILL."""
        ...

    def left_behind(self) -> bool:
        """Whether it, now ended, left processes in its group."""
        ...

    def last_output(self) -> float | None:
        """When it last wrote output or sent an event (epoch seconds, the wall clock); None when it cannot be
        known or it is rightly silent (a session waiting for a tell): then it is not taken for stalled."""
        ...

    async def sweep(self, grace: float) -> KillReport:
        """Stop what it left behind once ended (only this attempt's: a retry must be spared)."""
        ...
