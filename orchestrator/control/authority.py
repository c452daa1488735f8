"""What an agent may do: the grant each command needs, each role's grants, and the one decision.

Agents read text from outside (memos, the signals a wake carries), so what they
ask for carries an agent's authority, never a person's. Who asks is decided from
the kernel (``callers``); this module decides what that caller may do. A person
may do everything. An agent gets, by default::

    grant    default  covers
    send     any      `send` (a memo is its sender's own)
    memory   own      `memory ...` of its own role and `team` (every role for the `memory.curator` role)
    cancel   own      `cancel`, `interrupt` and `tell` of work its own role sent (the memo's `from`, or a
                      memo its role sent further up the memo's `reply_to` chain)
    wake     own      `wake` of its own role
    task     own      `task add` for its own role
    handoff  own      `handoff` of its own role (reading it)
    stop     none     `stop`, `stop --force`
    release  none     `release`
    land     none     `land` (a workspace's branch into its base: a project manager may, after a review)

``may: [stop]`` in a role's settings raises a grant to ``any`` (every role's
work), ``may: [-send]`` lowers it to ``none``. Some commands need ``any`` whatever
they touch: ``cancel --role``, ``cancel --all``, ``handoff --restore``, ``task
drop``. Reads (``status``, ``history``, ``journal``, ``trace``, ``schedule``,
``task list``) are open to every caller. Pure: no I/O. The grant names and
``check_may`` live in ``config.grants``, below ``config``, which validates ``may:`` with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.core.calendar import TEAM
from orchestrator.core.grants import DEFAULTS, Level

# every command a caller is checked for: the grant it needs, and whether the grant's ``own`` level is enough
COMMANDS: dict[str, tuple[str, bool]] = {
    "stop": ("stop", False),
    "stop --force": ("stop", False),
    "cancel": ("cancel", True),
    "cancel --role": ("cancel", False),
    "cancel --all": ("cancel", False),
    "interrupt": ("cancel", True),
    "tell": ("cancel", True),
    "wake": ("wake", True),
    "release": ("release", False),
    "handoff": ("handoff", True),
    "handoff --restore": ("handoff", False),
    "task add": ("task", True),
    "task drop": ("task", False),
    "send": ("send", True),
    **{f"memory {verb}": ("memory", True) for verb in ("add", "search", "list", "show", "forget", "replace", "stats")},
}

# what "own" means for a grant, in a refusal's words
_NOT_OWN = {
    "cancel": "work its own role did not send",
    "memory": "another role's memory",
    "wake": "another role",
    "task": "another role",
    "handoff": "another role",
    "ask": "another run",
}


def grants(may: Iterable[str], *, curator: bool = False) -> dict[str, Level]:
    """A role's grants: the defaults, then ``may:`` (the `memory.curator` role reaches every role's memory)."""
    out = dict(DEFAULTS)
    if curator:
        out["memory"] = Level.ANY
    for item in may:
        if item.startswith("-"):
            out[item[1:]] = Level.NONE
        else:
            out[item] = Level.ANY
    return out


@dataclass(frozen=True)
class Caller:
    """Who asks: a person, or an agent of run ``run_id`` of ``role``.

    An agent with no run (``run_id`` None) is a process the orchestrator started that belongs to no run it
    knows (an agent caught between its start and its record, a preflight command): it has an agent's
    authority and no role of its own.
    """

    agent: bool
    run_id: int | None = None
    role: str | None = None

    def describe(self) -> str:
        if not self.agent:
            return "a person"
        if self.run_id is None:
            return "an agent of no run on record (a process the orchestrator started)"
        return f"an agent of run {self.run_id} ({self.role})"

    def to_wire(self) -> dict[str, Any]:
        return {"agent": self.agent, "run_id": self.run_id, "role": self.role}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Caller:
        run_id, role = data.get("run_id"), data.get("role")
        return cls(
            bool(data.get("agent", True)),  # an answer that does not say is not a person's
            run_id if isinstance(run_id, int) else None,
            role if isinstance(role, str) else None,
        )


PERSON = Caller(agent=False)


def touches_own(caller: Caller, command: str, role: str | None) -> bool:
    """Whether a command naming ``role`` (None: the caller's own part) touches only the caller's own role's part
    (for memory, ``team`` is every role's own too)."""
    if caller.role is None:
        return False
    if role is None or role == caller.role:
        return True
    return command.startswith("memory ") and role == TEAM


def refusal(
    caller: Caller, held: Mapping[str, Level], command: str, own: bool, rule: tuple[str, bool] | None = None
) -> str | None:
    """Why ``caller`` may not run ``orchestrator COMMAND`` (one line), or None when it may.

    ``held``: the caller's role's grants (``grants``); ``own``: whether what the command touches is the
    caller's own role's (its work, its memory, itself); ``rule``: the grant a feature's command needs and whether
    its ``own`` level is enough (else ``COMMANDS`` says).
    """
    if not caller.agent:
        return None
    grant, own_enough = rule or COMMANDS[command]
    level = held.get(grant, Level.NONE)
    if level is Level.ANY or (level is Level.OWN and own_enough and own and caller.role is not None):
        return None
    who = caller.describe()
    if level is Level.NONE and DEFAULTS[grant] is not Level.NONE:
        return (
            f"refused: role {caller.role} may not use `orchestrator {command}` (`may: [-{grant}]` in roles.yaml), "
            f"and this is {who}"
        )
    what = f"`orchestrator {command}`"
    if level is Level.OWN and own_enough:
        what += f" of {_NOT_OWN.get(grant, 'another role')}"
    return (
        f"refused: {what} is for people, and this is {who}; nothing was changed "
        f"(a role may be allowed it with `may: [{grant}]` in roles.yaml)"
    )
