"""What an extension's ``decide_end`` may say of an attempt's end before the default rules decide it, and carrying it
out.

An attempt that ended by itself (the orchestrator was not stopping it, and it was not an interrupt a person asked
for) is shown to each extension's ``decide_end`` in turn; the first answer other than ``DEFAULT`` decides:

- ``Default``: the rules of ``outcomes`` (archive, retry, pause for a usage limit, fail);
- ``Fail(reason, retry=False)``: a failed attempt with the extension's reason; with ``retry`` the role's retry
  policy may run it again, else it fails for good (its memos in ``failed/``, the ``notify`` role told);
- ``Park(reason)``: the run's work is set aside for a person: it ends ``returned`` with its memos in ``held/`` and
  the reason beside them, its attempts kept, until ``orchestrator release`` puts them back in the inbox. No new
  state: the record says ``returned``, the reason says ``parked: ...``. ``folder`` sets it aside elsewhere
  (``waiting/``: a question for a person, which the feature that parked it puts back), ``uses_attempt=False``
  gives the attempt back (a run that asked did not fail), ``then`` says what brings it back.

A hook that raises is a bug: logged with its traceback, and taken as ``DEFAULT`` (the run must end).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import RoleRun
from orchestrator.console import Console
from orchestrator.core.agent import AttemptVerdict
from orchestrator.core.states import RunState
from orchestrator.intake.memo import HELD
from orchestrator.supervisor.lifecycle import Lifecycle


@dataclass(frozen=True)
class Default:
    """The default rules decide."""


@dataclass(frozen=True)
class Fail:
    """The attempt failed, for ``reason``; ``retry``: the role's retry policy may run it again."""

    reason: str
    retry: bool = False


@dataclass(frozen=True)
class Park:
    """The run's work waits for a person: ``returned``, its memos in ``folder`` with ``reason``, attempts kept
    (``uses_attempt=False``: all but this one); ``then``: what runs it again, for the line."""

    reason: str
    folder: str = HELD
    uses_attempt: bool = True
    then: str = "`orchestrator release` runs it again"


EndDecision = Default | Fail | Park
DEFAULT = Default()
DecideEnd = Callable[[RoleRun, AttemptVerdict], EndDecision]


def decide(hooks: list[DecideEnd], run: RoleRun, verdict: AttemptVerdict, console: Console) -> EndDecision:
    """The first decision other than ``DEFAULT`` among ``hooks``, asked in order; ``DEFAULT`` when none has one."""
    for hook in hooks:
        try:
            decision = hook(run, verdict)
            if not isinstance(decision, Default | Fail | Park):
                raise TypeError(f"decide_end returned {decision!r:.80}, not an EndDecision")
        except Exception:  # noqa: BLE001 - a bug in a feature: loud, and the default rules still end the run
            name = getattr(hook, "__qualname__", repr(hook))
            console.error(f"internal error in {name} for run {run.run_id}:\n{traceback.format_exc()}")
            continue
        if not isinstance(decision, Default):
            return decision
    return DEFAULT


def park(lc: Lifecycle, console: Console, run: RoleRun, decision: Park, code: int) -> None:
    """End ``run`` parked: its attempt on record as ``parked``, its memos into the decision's folder with the
    reason."""
    folder = decision.folder
    reason = f"parked: {decision.reason}" if folder == HELD else f"{folder}: {decision.reason}"
    lc.end_attempt(run, "parked" if folder == HELD else folder, decision.reason, code)
    text = f"held: {decision.reason}\n" if folder == HELD else None  # another folder's feature writes its own note
    used = None if decision.uses_attempt else run.attempt - 1

    def say(moved: list[Path]) -> None:
        names = ", ".join(path.name for path in moved) or run.label
        console.line(
            f"parked {names} in {folder}/: {decision.reason} (run {run.run_id}); {decision.then}", role=run.role.name
        )

    lc.finish(
        run,
        RunState.RETURNED,
        reason=reason,
        exit_code=code,
        folder=folder,
        reason_text=text,
        announce=False,
        attempts_used=used,
        then=say,
    )
