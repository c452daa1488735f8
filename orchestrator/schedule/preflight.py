"""Preflight before every run: a role with ``preflight`` commands starts no run until they have passed lately.

A ``Holds`` check, called before each scheduling pass. When a role with preflight commands has work that could
start now (a queued memo or a due retry, and a free slot) and no success within ``preflight_reuse`` (default
60 s; 0 checks before every run), the commands run off the loop (``probes.run_probes``, through the wakes'
``probe_runner``, the one boundary the replay tests replace) and the role is held meanwhile, quietly (no log
line); the outcome comes back as ``PreflightDone``.

- A success is remembered for ``preflight_reuse``, and the hold is lifted: the memo starts at once.
- A failure keeps the role held with the command and its last line of stderr (``status`` shows it), its memos
  unclaimed in the inbox; one log line, one notice to the ``notify`` role. At the next tick
  (``rescan_interval``) the commands run again if work still waits; a success releases the role and a second
  notice says so.

A wake's own signals and preflight (``wakes``) report here too (``observed``): a wake that passed is not checked
a second time before its run, and a wake whose preflight failed holds the role's runs as well.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.core.clock import Timer
from orchestrator.schedule.probes import Probe, ProbeResult

if TYPE_CHECKING:
    from orchestrator.config import Role
    from orchestrator.schedule.wakes import Wakes
    from orchestrator.supervisor.loop import Supervisor

SOURCE = "preflight"  # the name of this module's holds in ``status``


@dataclass(frozen=True)
class PreflightDone:
    """The preflight commands a run was waiting for have all ended."""

    role: str
    results: list[ProbeResult] = field(compare=False)


@dataclass(frozen=True)
class PreflightRecheck:
    """A tick has passed since a role's preflight failed: run it again if work still waits."""

    role: str


def preflight_probes(role: Role) -> list[Probe]:
    """The role's preflight commands as probes (argv, no shell, 30 s each)."""
    return [Probe("preflight", " ".join(argv), tuple(argv), 30.0) for argv in role.preflight]


class PreflightGate:
    """Holds each role with preflight commands until they have passed within its ``preflight_reuse``."""

    def __init__(self, sup: Supervisor, wakes: Wakes) -> None:
        self.sup = sup
        self.wakes = wakes
        self.roles = {name: role for name, role in sup.config.roles.items() if role.preflight}
        self.recheck_after = max(0.05, sup.config.rescan_interval)
        self.passed_until: dict[str, float] = {}  # monotonic time until which the last success is reused
        # a success admits the work waiting at the next scheduling pass even when it is reused for no time at
        # all (``preflight_reuse: 0``); ``check`` runs once before each pass, so the token lasts one pass
        self.admitted: set[str] = set()
        self.checking: set[str] = set()
        self.failing: dict[str, str] = {}
        self.told: set[str] = set()  # roles whose notify role was told of a failure, to be told of the recovery
        self.timers: dict[str, Timer] = {}
        self._post: Callable[[Any], None] = sup.post  # this module's own events, through the loop
        sup.handlers[PreflightDone] = self._on_done
        sup.handlers[PreflightRecheck] = self._on_recheck
        if self.roles:
            sup.holds.checks.append(self.check)

    # ------------------------------------------------------------------ before each scheduling pass
    def check(self) -> None:
        """Start the commands for each role whose waiting work needs them; hold it while they run."""
        if self.sup.ending:
            return
        for name in self.roles:
            if name in self.admitted:
                self.admitted.discard(name)
                continue
            if name in self.checking or name in self.timers or self._passed(name) or not self._work_waits(name):
                continue
            if name in self.wakes.probing:  # a wake's checks are running: their preflight answers for this run
                if name not in self.failing:
                    self.sup.holds.hold(name, SOURCE, "preflight: waiting for the wake's checks", quiet=True)
                continue
            self._start(name)

    def _passed(self, name: str) -> bool:
        return self.sup.clock.monotonic() < self.passed_until.get(name, float("-inf"))

    def _work_waits(self, name: str) -> bool:
        """Work of the role that could start now but for this gate."""
        role = self.roles[name]
        lc = self.sup.lc
        queued = bool(self.sup.intake.queues[name]) and not (
            role.batch and any(run.role.name == name for run in lc.runs.values())
        )
        return (bool(lc.retry_ready[name]) or queued) and lc.slots.free(name)

    def _start(self, name: str) -> None:
        self.checking.add(name)
        probes = preflight_probes(self.roles[name])
        if name not in self.failing:
            what = "; ".join(p.name for p in probes)
            self.sup.holds.hold(name, SOURCE, f"preflight: checking {what}", quiet=True)
        task = asyncio.ensure_future(self._run(name, probes))
        self.wakes.tasks.add(task)  # cancelled with the wakes' tasks when the orchestrator ends
        task.add_done_callback(self.wakes.tasks.discard)

    async def _run(self, name: str, probes: list[Probe]) -> None:
        try:
            results = list(await self.wakes.probe_runner(probes, self.sup.config.root))
        except Exception as exc:  # noqa: BLE001 - reported as a failed check, never lost
            self.sup.console.error(f"internal error running the preflight of {name}:\n{traceback.format_exc()}")
            results = [ProbeResult(probes[0], False, problem=f"internal error: {exc}")]
        self._post(PreflightDone(name, results))

    # ------------------------------------------------------------------ outcomes
    def _on_done(self, event: PreflightDone) -> None:
        self.checking.discard(event.role)
        self._outcome(event.role, event.results, tell=True)

    def observed(self, name: str, results: list[ProbeResult]) -> None:
        """A wake's checks ended: their preflight results count as this role's latest (the wake tells people)."""
        if name in self.roles:
            self._outcome(name, results, tell=False)

    def _outcome(self, name: str, results: list[ProbeResult], tell: bool) -> None:
        failures = [r for r in results if r.probe.kind == "preflight" and not r.ok]
        if failures:
            self._failed(name, failures[0].describe, tell)
            return
        self.passed_until[name] = self.sup.clock.monotonic() + self.roles[name].preflight_reuse
        self.admitted.add(name)
        timer = self.timers.pop(name, None)
        if timer is not None:
            timer.cancel()
        was_failing = self.failing.pop(name, None) is not None
        self.sup.holds.release(name, SOURCE, quiet=not was_failing)
        if name in self.told:
            self.told.discard(name)
            self.wakes.writer.notice(
                name,
                f"Recovered: runs of {name}",
                f"The preflight of role **{name}** passes again; its memos start.",
            )
        self.wakes.holding.preflight_recovered(name)

    def _failed(self, name: str, reason: str, tell: bool) -> None:
        self.passed_until.pop(name, None)
        self.admitted.discard(name)
        self.failing[name] = reason
        if self.sup.holds.hold(name, SOURCE, reason) and tell and name not in self.told:
            self.told.add(name)
            self.wakes.writer.notice(
                name,
                f"Held: runs of {name}",
                f"The runs of role **{name}** are held: {reason}\n"
                "Its memos wait in the inbox, unclaimed; the preflight runs again at every tick while they wait.",
            )
        if name not in self.timers:
            self.timers[name] = self.sup.clock.call_later(
                self.recheck_after, lambda: self._post(PreflightRecheck(name))
            )

    def _on_recheck(self, event: PreflightRecheck) -> None:
        """One tick after a failure: again, if work waits; else the next memo to arrive starts the check."""
        name = event.role
        self.timers.pop(name, None)
        if name in self.failing and name not in self.checking and not self.sup.ending and self._work_waits(name):
            self._start(name)
