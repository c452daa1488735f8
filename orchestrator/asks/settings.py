"""What a Claude CLI role is given so ``orchestrator ask`` and its ``approve:`` rules wait for a person: a
``PreToolUse`` hook in ``--settings``, merged into the role's own ``--settings`` (a file or a JSON text in its
``command``), which the CLI itself merges with the user's and the project's settings files.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from orchestrator.agents.backends import capabilities
from orchestrator.agents.spec import SpawnError
from orchestrator.asks.rules import tools_of
from orchestrator.config import Role

HOOK_MODULE = "orchestrator.asks.hook"


def hooked(role: Role) -> bool:
    """Whether the role's agents take the hook: a deferred call ends their run, and their end says which (the
    Claude CLI with stream-json, as its backend declares)."""
    return capabilities(role).defers


def own_settings(role: Role, cwd: Path) -> dict[str, Any]:
    """The settings the role's ``command`` gives with ``--settings`` (a JSON text or a file), or none."""
    argv = role.command
    value = None
    for i, word in enumerate(argv):
        if word == "--settings" and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith("--settings="):
            value = word.split("=", 1)[1]
    if value is None:
        return {}
    try:
        text = value if value.lstrip().startswith("{") else (cwd / value).read_text(encoding="utf-8")
        settings = json.loads(text)
    except (OSError, ValueError) as exc:
        raise SpawnError(f"roles.{role.name}.command: --settings {value!r} cannot be read as JSON: {exc}") from None
    if not isinstance(settings, dict):
        raise SpawnError(f"roles.{role.name}.command: --settings {value!r} is not a JSON object")
    return settings


def settings_text(role: Role, cwd: Path) -> str:
    """The ``--settings`` JSON of an attempt: the role's own, with the hook added to its ``PreToolUse`` hooks."""
    settings = own_settings(role, cwd)
    hooks = settings.setdefault("hooks", {})
    tools = sorted({"Bash"}.union(*(tools_of(rule) for rule in role.approve)))
    command = f"{shlex.quote(sys.executable)} -m {HOOK_MODULE}"
    hooks.setdefault("PreToolUse", []).append(
        {"matcher": "|".join(tools), "hooks": [{"type": "command", "command": command}]}
    )
    return json.dumps(settings)
