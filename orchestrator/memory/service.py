"""The memory operations behind the CLI: input checks, the caps, the secret filter and the access scope.

Every check runs before anything is stored, so a refused call leaves the
database as it was. Who calls is given (``Caller``; the CLI has it from the
kernel, ``control.permission``, never from the environment): an agent sees its
own role and ``team``; naming another role needs the curator role (it writes
every role's summaries) or ``authorize`` to let it (the CLI asks the
orchestrator: a role with ``may: [memory]``); a person names any role.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from orchestrator.core.calendar import TEAM
from orchestrator.core.errors import MemoryRefusedError, SecretRefusedError, UsageError
from orchestrator.memory import rules
from orchestrator.memory.db import MemoryDB

if TYPE_CHECKING:
    from orchestrator.config.memory import MemorySettings


@dataclass(frozen=True)
class Caller:
    """Who calls: an agent's role and run, or a person (``agent`` false)."""

    role: str | None
    run_id: str | None
    agent: bool = True

    @property
    def in_agent(self) -> bool:
        return self.agent

    @property
    def who(self) -> str:
        return f"{self.role or 'an agent'} (run {self.run_id or '?'})" if self.agent else "cli"


PERSON = Caller(None, None, agent=False)


def _refuse(caller: Caller, verb: str, role: str) -> None:
    raise MemoryRefusedError(
        f"memory {verb}: an agent of {caller.role} may use only its own memory and team's, not {role}'s "
        "(other roles need the curator role, or `may: [memory]` in roles.yaml)"
    )


@dataclass
class Memory:
    """The operations for one project: its database, its settings and its roles."""

    db: MemoryDB
    settings: MemorySettings
    roles: Sequence[str]
    caller: Caller
    # lets an agent name another role, or raises (the CLI asks the orchestrator); by default only the curator may
    authorize: Callable[[Caller, str, str], None] = _refuse

    # ------------------------------------------------------------ scope
    def _check_role(self, role: str, verb: str) -> None:
        if role != TEAM and role not in self.roles:
            raise UsageError(f"memory {verb}: unknown role {role!r}; known: {', '.join([*self.roles, TEAM])}")

    def _may_name(self, role: str, verb: str) -> None:
        if not self.caller.in_agent or role in (self.caller.role, TEAM):
            return
        if self.settings.curator and self.caller.role == self.settings.curator:
            return
        self.authorize(self.caller, verb, role)

    def scope(self, role: str | None, verb: str) -> list[str] | None:
        """The roles a read covers: one named role, the agent's own plus team, or every role (None)."""
        if role is not None:
            self._check_role(role, verb)
            self._may_name(role, verb)
            return [role]
        if self.caller.in_agent:
            return [r for r in (self.caller.role, TEAM) if r]
        return None

    def _entry(self, entry_id: int, verb: str) -> dict[str, Any]:
        entry = self.db.get(entry_id)
        if entry is None:
            raise UsageError(f"memory {verb}: no entry #{entry_id}")
        self._may_name(entry["role"], verb)
        return entry

    # ------------------------------------------------------------ checks
    def check_text(self, text: str, verb: str) -> str:
        """Refuse empty text, text over ``entry_max_bytes`` and text holding a secret."""
        if not text.strip():
            raise UsageError(f"memory {verb}: empty text; give the memory as an argument or on standard input")
        size = len(text.encode("utf-8"))
        if size > self.settings.entry_max_bytes:
            raise MemoryRefusedError(
                f"memory {verb}: the entry is {size} bytes, over memory.entry_max_bytes "
                f"{self.settings.entry_max_bytes}; nothing stored: split it or say it shorter"
            )
        from orchestrator.memory.secrets import find_secret  # its patterns are compiled only for a write

        kind = find_secret(text)
        if kind is not None:
            raise SecretRefusedError(
                f"memory {verb}: refused: the text holds a secret ({kind}); nothing was stored. "
                "Remember where the secret is kept, never the secret itself"
            )
        return text.strip("\n")

    # ------------------------------------------------------------ verbs
    def add(
        self,
        text: str,
        *,
        now: datetime,
        role: str | None = None,
        layer: str | None = None,
        importance: int = 3,
        category: str = "other",
        source: str = "agent",
        period: str | None = None,
        summarises: Sequence[int] = (),
        tags: Sequence[str] = (),
        remember: bool = False,
    ) -> dict[str, Any]:
        """Check and store one entry; returns it with its id."""
        role = role or self.caller.role
        if role is None:
            raise UsageError("memory add: which role? give --role ROLE (or team); agents need not, they have one")
        self._check_role(role, "add")
        if not 1 <= importance <= 10:
            raise UsageError(f"memory add: --importance {importance} is outside 1-10")
        if category not in rules.CATEGORIES:
            raise UsageError(f"memory add: unknown category {category!r}; one of {', '.join(rules.CATEGORIES)}")
        if source not in rules.SOURCES:
            raise UsageError(f"memory add: unknown source {source!r}; one of {', '.join(rules.SOURCES)}")
        if layer is not None and layer not in rules.LAYERS:
            raise UsageError(f"memory add: unknown layer {layer!r}; one of {', '.join(rules.LAYERS)}")
        if remember and layer not in (None, "core"):
            raise UsageError(f"memory add: --remember means core; it contradicts --layer {layer}")
        self._may_name(role, "add")
        effective = rules.effective_importance(importance, source)
        layer = "core" if remember else (layer or rules.layer_for(effective))
        problem = rules.period_problem(layer, period)
        if problem:
            raise UsageError(f"memory add: {problem}")
        text = self.check_text(text, "add")
        entry = {
            "role": role,
            "layer": layer,
            "period": period or rules.period_for(layer, now.date()),
            "text": text,
            "category": category,
            "importance": effective,
            "source": source,
            "tags": list(tags),
            "summarises": list(dict.fromkeys(summarises)),
            "created_at": now.isoformat(timespec="milliseconds"),
            "run_id": self.caller.run_id,
        }
        entry["id"] = self.db.add(entry, self.settings.core_max)
        return entry

    def search(self, query: str, *, role: str | None = None, **filters: Any) -> list[dict[str, Any]]:
        return self.db.search(query, self.scope(role, "search"), **filters)

    def list(self, *, role: str | None = None, **filters: Any) -> list[dict[str, Any]]:
        return self.db.entries(self.scope(role, "list"), **filters)

    def show(self, entry_id: int) -> dict[str, Any]:
        return self._entry(entry_id, "show")

    def forget(self, entry_id: int, why: str, now: datetime, source: str = "agent") -> dict[str, Any]:
        if not why.strip():
            raise UsageError("memory forget: say why with --why TEXT; the reason is kept with the tombstone")
        self._entry(entry_id, "forget")
        self.db.forget(entry_id, why.strip(), self.caller.who, now.isoformat(timespec="milliseconds"))
        return self._entry(entry_id, "forget")

    def replace(self, entry_id: int, text: str, why: str, now: datetime, source: str = "agent") -> dict[str, Any]:
        if not why.strip():
            raise UsageError("memory replace: say why with --why TEXT; the growth log keeps the trigger")
        self._entry(entry_id, "replace")
        text = self.check_text(text, "replace")
        growth = self.db.replace(entry_id, text, why.strip(), self.caller.who, now.isoformat(timespec="milliseconds"))
        return {**self._entry(entry_id, "replace"), "growth_id": growth}

    def approve(self, entry_id: int, now: datetime, source: str = "agent") -> dict[str, Any]:
        if self.caller.in_agent and source not in ("supervisor", "owner"):
            raise MemoryRefusedError("memory replace --approve: only the supervisor or owner approves a change")
        self._entry(entry_id, "replace --approve")
        growth = self.db.approve(entry_id, self.caller.who, now.isoformat(timespec="milliseconds"))
        return {"id": entry_id, "growth_id": growth, "approved": True}

    def stats(self, *, role: str | None = None, today: datetime) -> dict[str, Any]:
        out = self.db.stats(self.scope(role, "stats"))
        _, waiting = self.db.retention(
            today.date(), self.settings.daily_days, self.settings.weekly_days, "", apply=False
        )
        out["waiting_for_summary"] = waiting
        out["core_max"] = self.settings.core_max
        return out
