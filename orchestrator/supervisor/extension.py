"""The one port for features: an ``Extension`` takes part in the loop only through these hooks, and a ``Host``
is all of the supervisor it may use.

A feature (continuity, the schedule, memory, the loop breaker, node tracking, the daily retention pass) is a
class that subclasses ``Extension`` and overrides the hooks it needs; the composition root
(``orchestrator.compose``) lists the features and the supervisor wires each overridden hook into its one place
(a hook left as the base's no-op costs nothing: it is never called). An extension never receives the
supervisor: it gets a ``Host`` with the clock, the console, the holds, the shared store (for its own tables),
a way to post events to the loop and read-only views of the queues and the live runs. So no feature reaches
into the core, and nothing in the core imports a feature.

Every hook runs on the loop's thread; all but the awaited ones (``prepare``, ``open``, ``close``) run inside the
handling of one event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.agents.spec import LaunchSpec
from orchestrator.config import Config, Role, RoleRun
from orchestrator.console import Console
from orchestrator.control.authority import Caller
from orchestrator.control.protocol import FeatureRequest, Request
from orchestrator.core.agent import AttemptVerdict
from orchestrator.core.clock import Clock
from orchestrator.core.events import RunFinished
from orchestrator.core.run import MemoRef
from orchestrator.core.states import RunState
from orchestrator.core.team_events import TeamEvent
from orchestrator.store import Store
from orchestrator.supervisor.decisions import DEFAULT, EndDecision
from orchestrator.supervisor.feature_requests import Command
from orchestrator.supervisor.holds import Holds

Handler = Callable[[Any], None]
WAITS_PASSED = 100  # a role's later memos may pass at most this many of its queued memos that ``waits``


@dataclass(frozen=True)
class Host:
    """What an extension may use of the supervisor; built once by the supervisor, shared by every extension."""

    config: Config
    clock: Clock
    console: Console
    holds: Holds
    store: Store  # the shared connection: an extension queries its own tables (and reads the runs) through it
    post: Callable[[Any], None]  # hand an event to the loop; it reaches the handler the extension declared
    runs: Callable[[], Mapping[int, RoleRun]]  # the live runs, read-only
    queues: Callable[[], Mapping[str, Collection[Path]]]  # per role, the memos queued in its inbox, read-only
    ending: Callable[[], bool]  # the orchestrator is ending: nothing new should start
    retry_waiting: Callable[[str], bool]  # a run of the role waits for its retry, due now
    slot_free: Callable[[str], bool]  # a run of the role could start now as far as the limits go
    paused: Callable[[str], str | None]  # why the role's account is paused by a usage limit, or None
    over_budget: Callable[[str], str | None]  # why the role is over its budget, or None
    offer_memo: Callable[[str, Path], None]  # a memo the extension wrote into a role's inbox: queue it now
    put_back: Callable[[str, list[Path]], None]  # memos it moved back into a role's inbox: first in its queue
    fail_memo: Callable[[str, Path, str], None]  # a memo in no run (set aside): a run on record ends it in failed/
    started_at: str  # when this orchestrator started (ISO 8601)
    snapshot: Callable[[bool], dict[str, Any]]  # ``status --json``'s object (``True``: with the database's part)
    identify: Callable[[int], Caller]  # who a process is, as the gate sees it (an agent, or a person)
    admit: Callable[
        [Request | FeatureRequest, Caller], Request | FeatureRequest
    ]  # the gate's check of a control request; ``RefusedError`` if not
    require: Callable[[Caller, str, bool], None]  # the gate's check of a command acting on files itself
    tell: Callable[[TeamEvent], None]  # announce a team event (a held memo) to every extension's ``on_team_event``
    feature_requests: Callable[[], Mapping[str, type[FeatureRequest]]]  # the features' request models, by ``op``


class Extension:
    """A feature of ``orchestrator up``: override the hooks it needs; the others are never called.

    Hooks, each called on the loop's thread:

    - ``handlers``: the event types the feature owns (usually its own timer and worker events) and their handlers;
    - ``sections`` / ``notes``: placeholders it fills in a run's prompt, and notes for the prompt's very top
      (asked after every extension's sections);
    - ``check_memo``: before a memo is claimed; a reason holds the memo back (into ``held/``);
    - ``check_holds``: before each scheduling pass; it holds or releases roles through ``host.holds``;
    - ``waits``: asked of a queued memo before it is picked; a reason keeps it queued for now, and the role's later
      memos may start before it (a memo for a workspace another run works in), up to ``WAITS_PASSED`` of them: past
      those, the role's memos wait in order (a pass looks at no more);
    - ``before_finish``: a run is about to end (its memo not yet moved); it may return an awaitable (work that must
      not run on the loop: a workspace's commit), and the run settles until it is done (``supervisor.settling``);
      ``on_finished``: it has ended;
    - ``on_transition``: a run changed state (recorded already, in the transaction of the change: at a run's end,
      after its memos moved and before the end is committed, so what a feature writes of its own records here lands
      with the end, as the asks feature's forgetting does); it never changes the run;
    - ``on_team_event``: the core announced a ``TeamEvent`` (a pause, a held memo, a stall, a crash loop, ...);
    - ``agent_env``: variables it adds to an attempt's agent environment (asked once the attempt is on record);
      a convenience for the common case of ``prepare``, and synchronous, so a feature's variables are read while
      the event that starts the attempt is handled (the dashboard's ``TRACEPARENT`` of the run's span);
    - ``prepare`` (awaited): the ``LaunchSpec`` of every start (first attempt, retry, a resumed session), ``agent_env``
      already in it; it returns the spec to start with (``dataclasses.replace``: another ``cwd``, more ``env``,
      ``args``). It runs in the attempt's start task, outside an event's handling, so it may wait (make a
      folder, ask a program), and must not change the run. At a restart it is shown each run taken back
      (``spec.adopted``: its agent exists, or it waits for its retry, so what it returns is ignored; it may record
      what it sees);
      a ``SpawnError`` it raises fails the attempt with its words (``internal``: the memos go back to the inbox),
      any other error is logged as a bug and fails the attempt as a start's would; a run cancelled or stopped
      while it is prepared starts no agent;
    - ``decide_end``: an attempt that ended by itself, before the default rules: ``DEFAULT``, or a
      ``decisions.Fail`` or ``decisions.Park`` that redirects its end (the first one asked that decides wins);
    - ``requests``: the control requests it serves (``feature_requests.Command``: a model, its handler, who may
      send it), parsed, checked and answered with no change to the supervisor;
    - ``open`` / ``close`` (awaited): what it serves beside the loop, opened once the control channel listens and
      closed at shutdown (the dashboard's server);
    - ``start`` / ``stop``: the loop is serving (recovery done, the first scan made) / it is ending;
    - ``snapshot``: the top-level keys it adds to ``status`` (``full``: the database may be read, else the live
      view asks, several times a second).
    """

    def handlers(self) -> Mapping[type, Handler]:
        return {}

    def sections(self, run: RoleRun) -> dict[str, str]:
        return {}

    def notes(self, run: RoleRun) -> list[str]:
        return []

    def check_memo(self, role: Role, ref: MemoRef, text: str) -> str | None:
        return None

    def check_holds(self) -> None:
        return None

    def waits(self, role: Role, memo: Path) -> str | None:
        return None

    def before_finish(self, run: RoleRun, state: RunState, reason: str | None) -> Awaitable[Any] | None:
        return None

    def on_finished(self, event: RunFinished) -> None:
        return None

    def on_transition(self, run: RoleRun, old: RunState, new: RunState) -> None:
        return None

    def on_team_event(self, event: TeamEvent) -> None:
        return None

    def agent_env(self, run: RoleRun) -> dict[str, str]:
        return {}

    async def prepare(self, run: RoleRun, spec: LaunchSpec) -> LaunchSpec:
        return spec

    def decide_end(self, run: RoleRun, verdict: AttemptVerdict) -> EndDecision:
        return DEFAULT

    def requests(self) -> Sequence[Command[Any]]:
        return ()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None

    def snapshot(self, full: bool) -> dict[str, Any]:
        return {}


def overrides(extension: Extension, hook: str) -> bool:
    """True when ``extension`` has its own ``hook`` (the base's no-op is not wired)."""
    return getattr(type(extension), hook) is not getattr(Extension, hook)


ExtensionFactory = Callable[[Host], Extension]
