"""What one backend supplies: the protocol every kind of agent implements, and what it tells ``doctor``.

A backend is a strategy: the supervisor, continuity, the dashboard and ``doctor`` find it for a role in the
registry (``agents.backends.backend_for``) and ask it what it can do, never what it is called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from orchestrator.agents import procs
from orchestrator.agents.handle import Agent, OnExit
from orchestrator.agents.spec import LaunchSpec
from orchestrator.config import Config, Role
from orchestrator.core.agent import Capabilities


@dataclass(frozen=True)
class Answer:
    """One finding of a backend's own check for ``doctor`` (its login): ``ok``, ``warn`` or ``fail``, one line of
    detail, and what to do (empty when ok)."""

    status: Literal["ok", "warn", "fail"]
    detail: str
    fix: str = ""


Version = Callable[[str, str], str]  # (the program's path, the key that names it) -> its version line; ConfigError
Login = Callable[[str, dict[str, str]], Answer]  # (the program's path, the agent's environment) -> its login


@dataclass(frozen=True)
class Program:
    """The program a role's agent runs, as ``doctor`` checks it.

    ``key``: the role's key that names it (``command``, ``cli_path``); ``name``: how a person calls it;
    ``on_path``: the doctor looks the role's ``command`` up on every PATH agents start with, else the backend found
    it itself (``path``, None when there is none; ``found_by``: how); ``version``: asks it its version (each place
    it was found); ``login``: asks whether it can log in; ``verdict``: what decides its end, said when it has no
    login to check."""

    key: str
    name: str
    on_path: bool = True
    path: str | None = None
    found_by: str = ""
    version: Version | None = None
    login: Login | None = None
    verdict: str = "its exit status is the verdict"


class Backend(Protocol):
    """One kind of agent: its checks, its start, its adoption after a restart, the reading of its end (the
    ``Reader`` or ``Follower`` its ``Agent`` is given), its default stall timeout and its capabilities."""

    name: str  # the registry's name for it, for a person: ``command``, ``claude``, ``sdk``

    def capabilities(self, role: Role) -> Capabilities:
        """What its agents can do for this role (a setting of the role may change it: Claude's output format)."""
        ...

    def stall_default(self, role: Role) -> float | None:
        """How long an attempt may write nothing before it is stopped as stalled, when the role does not say;
        None: never (a program that may rightly be silent until it ends)."""
        ...

    def check(self, config: Config, role: Role) -> None:
        """The start-up checks of ``up`` (and ``doctor``); raises ``ConfigError`` as ``file: key: what to do``."""
        ...

    def program(self, config: Config, role: Role) -> Program:
        """The program its agent runs, for ``doctor``."""
        ...

    async def start(self, spec: LaunchSpec, on_exit: OnExit, keeper: Path | None) -> Agent:
        """Start one attempt's agent (under the ``keeper`` binary when there is one); ``on_exit`` is called with
        its verdict, once. Raises ``SpawnError`` (one line) when it cannot be started."""
        ...

    def adopt(self, spec: LaunchSpec, ref: procs.ProcRef, keeper_pid: int | None) -> Agent:
        """A live agent of an orchestrator that died (``keeper_pid``: its keeper, None when none is left); its end
        is learnt once ``watch`` is called."""
        ...

    def recorded(self, spec: LaunchSpec, pid: int | None) -> Agent:
        """An attempt whose agent ended while the orchestrator was down (``pid``: its group, when what it left
        may be swept), read from what its keeper and its files recorded."""
        ...
