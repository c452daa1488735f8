"""Daily budgets: which roles (or the whole team, key ``"*"``) have spent their day's money.

The rule (``blocks``) is a pure function of the caps, the figures spent and the
day, tested without a database or a clock; ``Budgets`` gathers the figures.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, tzinfo

from orchestrator.config import Config, RoleRun
from orchestrator.config.schedule import zone as team_zone
from orchestrator.console import Console
from orchestrator.core.team_events import TeamEvent
from orchestrator.store import Store

TEAM = "*"
TOLD = "budget_told"  # the store's meta: the blocks already announced, ``{key: day}`` (a restart does not tell again)


def day_start(now: datetime, zone: tzinfo | None = None) -> datetime:
    """Midnight of ``now``'s day in ``zone`` (the team's ``timezone``; None: ``now``'s own), in that zone: daily
    budgets count from here."""
    here = now.astimezone(zone) if zone is not None else now
    return here.replace(hour=0, minute=0, second=0, microsecond=0, fold=0)  # the first, where the clocks go back


def counted_since(now: datetime, zone: tzinfo | None) -> str:
    """Where today's spend begins for the daily budgets: midnight in ``zone`` (the team's), an instant the store
    compares with each run's by instant."""
    return day_start(now, zone).isoformat(timespec="milliseconds")


def blocks(
    now: datetime,
    role_caps: dict[str, float],
    team_cap: float | None,
    spent_by_role: dict[str, float],
    team_spent: float,
    estimated: frozenset[str] = frozenset(),
    zone: tzinfo | None = None,
) -> dict[str, str]:
    """Why each blocked role (or ``"*"`` for the team) may start nothing new today (in ``zone``), keyed by role;
    ``estimated``: the roles (and ``"*"``) whose spend is in part an estimate from `prices`, marked ``~`` as
    everywhere."""
    tomorrow = (day_start(now, zone).date() + timedelta(days=1)).isoformat()
    out: dict[str, str] = {}

    def said(key: str, spent: float) -> str:
        return f"~${spent:.2f} (estimated in part from `prices`)" if key in estimated else f"${spent:.2f}"

    if team_cap:
        if team_spent >= team_cap:
            out[TEAM] = (
                f"the team spent {said(TEAM, team_spent)} of its ${team_cap:.2f} daily budget; "
                f"new runs wait until {tomorrow}"
            )
    for name, cap in role_caps.items():
        spent = spent_by_role.get(name, 0.0)
        if spent >= cap:
            out[name] = (
                f"role {name} spent {said(name, spent)} of its ${cap:.2f} daily budget; new runs wait until {tomorrow}"
            )
    return out


def blocked_roles(current: dict[str, str], roles: list[str]) -> list[str]:
    """The roles that may not start new runs under ``current`` blocks."""
    if TEAM in current:
        return list(roles)
    return [name for name in roles if name in current]


class Budgets:
    """The daily budgets in force: recomputed from the store's figures and the live runs, each change logged once."""

    def __init__(
        self, config: Config, store: Store, console: Console, tell: Callable[[TeamEvent], None] = lambda _e: None
    ) -> None:
        self.config = config
        self.tell = tell  # a cap reached is a team event (notifications)
        self.store = store
        self.console = console
        self.current: dict[str, str] = {}
        self.told: dict[str, str] = _read_told(store.meta(TOLD))
        self.inherited: dict[tuple[int, str], float] = {}  # (live run, its session) -> what earlier runs spent of it

    def refresh(self, now: datetime, runs: Iterable[RoleRun]) -> None:
        """Recompute which daily budgets are spent (costs reported, or estimated from `prices`; finished and
        running)."""
        caps = {name: r.budget.per_day_usd for name, r in self.config.roles.items() if r.budget.per_day_usd}
        team_cap = self.config.budget.per_day_usd
        if not caps and not team_cap:
            self._told({})
            return
        zone = team_zone(self.config.timezone)
        since = counted_since(now, zone)
        running = _running_costs(runs, self._inherited(runs))
        spent = {name: self.store.spent_since(since, name) + running.get(name, 0.0) for name in caps}
        team = self.store.spent_since(since) + sum(running.values()) if team_cap else 0.0
        over = [name for name in caps if spent[name] >= caps[name]] + ([TEAM] if team_cap and team >= team_cap else [])
        estimated = frozenset(k for k in over if self.store.estimated_since(since, None if k == TEAM else k))
        new = blocks(now, caps, team_cap, spent, team, estimated, zone)
        day = day_start(now, zone).date().isoformat()
        for key, why in new.items():
            if self.current.get(key) is None:
                self.console.line(f"budget: {why}", role=None if key == TEAM else key)
                if self.told.get(key) != day:  # once a day: the start after a restart logs it, tells no one again
                    self.tell(TeamEvent("budget", role=None if key == TEAM else key, reason=why))
        self._told(dict.fromkeys(new, day))
        for key in self.current.keys() - new.keys():
            self.console.line(
                "budget: new day or budget raised; starting runs again", role=None if key == TEAM else key
            )
        self.current = new

    def _told(self, told: dict[str, str]) -> None:
        if told != self.told:
            self.told = told
            self.store.set_meta(TOLD, json.dumps(told, sort_keys=True) if told else None)

    def _inherited(self, runs: Iterable[RoleRun]) -> dict[tuple[int, str], float]:
        """What earlier runs spent of each live run's session (a question's session, resumed with its answer,
        reports their part in its running totals again), read once per run and session."""
        live = {(run.run_id, run.agent.session_id) for run in runs if run.agent is not None and run.agent.session_id}
        kept = {key: spent for key, spent in self.inherited.items() if key in live}
        for run_id, session in live - kept.keys():
            kept[run_id, session] = self.store.session_spent(session, run_id).get("cost_usd") or 0.0
        self.inherited = kept
        return kept

    def blocked(self) -> list[str]:
        return blocked_roles(self.current, list(self.config.roles))

    def why_over(self, role: str) -> str | None:
        """Why ``role`` is over its budget (or every role, over the team's), or None."""
        if role not in self.blocked():
            return None
        return self.current.get(role) or self.current.get("*", "")


def _running_costs(runs: Iterable[RoleRun], inherited: dict[tuple[int, str], float]) -> dict[str, float]:
    """What each role's live sessions spent beyond what is already on record for their runs, and beyond what
    earlier runs spent of their session (``inherited``)."""
    out: dict[str, float] = {}
    for run in runs:
        agent = run.agent
        if agent is not None and agent.cost_usd and run.state.live:
            # nothing once its exit recorded its figures (the run is still live then), else beyond the session it resumed
            key = agent.session_id or f"attempt-{run.attempt}"
            recorded = run.sessions.get(key) or run.sessions.get(run.resumed_from or "") or {}
            earlier = inherited.get((run.run_id, agent.session_id), 0.0) if agent.session_id else 0.0
            live = max(0.0, agent.cost_usd - (recorded.get("cost_usd") or 0.0) - earlier)
            out[run.role.name] = out.get(run.role.name, 0.0) + live
    return out


def _read_told(value: str | None) -> dict[str, str]:
    """The blocks announced on record (nothing from a database before them, or a value that is not one)."""
    try:
        told = json.loads(value) if value else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in told.items()} if isinstance(told, dict) else {}
