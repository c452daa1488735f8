"""The commands that act on files themselves ask here first whether their caller may.

``send``, ``release``, ``handoff``, ``task add|drop`` and ``memory`` write files
or the databases directly, with or without a running orchestrator, so the
control channel's gate never sees them. Each asks ``require`` before it acts:

- when an orchestrator runs, it answers (an ``authorize`` request): it
  identifies the caller by the kernel against its live runs, and a refusal is
  logged and told to the notify role as for every request it serves;
- when none runs, agents may still (under their keepers, until their timeout):
  the command checks its own process against the runs the database has as live,
  by the same rules; a refusal then is the one line only.

A refusal raises ``RefusedError`` (exit 13) before anything is changed.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.control import authority, callers
from orchestrator.control import client as control
from orchestrator.control.authority import Caller
from orchestrator.core.errors import NotRunningError, RefusedError


def require(root: Path, command: str, role: str | None = None) -> Caller:
    """Who runs ``orchestrator COMMAND`` here (a person, or an agent of which run), once it may touch ``role``'s
    part (None: its own); ``RefusedError`` when it may not."""
    try:
        result = control.call(root, "authorize", command=command, role=role)
    except NotRunningError:
        return _checked_here(root, command, role)
    return Caller.from_wire(result.get("caller") or {})


def _checked_here(root: Path, command: str, role: str | None) -> Caller:
    caller = callers.identify(os.getpid(), callers.live_runs_on_record(root), root)
    if not caller.agent:
        return caller
    from orchestrator.config import load_config  # pydantic and yaml: only for an agent whose orchestrator is down

    config = load_config(root)
    settings = config.roles.get(caller.role) if caller.role else None
    held = authority.grants(settings.may if settings else (), curator=caller.role == config.memory.curator)
    why = authority.refusal(caller, held, command, authority.touches_own(caller, command, role))
    if why is not None:
        raise RefusedError(why)
    return caller
