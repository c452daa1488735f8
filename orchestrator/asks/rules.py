"""Which tool calls wait for a person: ``orchestrator ask`` itself, and calls that match a role's ``approve:`` rule.

Standard library only: the ``PreToolUse`` hook (``asks/hook.py``) imports it at every tool call. Rules are
written as Claude Code writes permission rules: ``Tool`` (any call), ``Bash(git push:*)`` (a command that starts
with ``git push``), ``Bash(make deploy)`` (that command, ``*`` matching anything), ``Write(migrations/**)`` (a path
glob, relative to the agent's folder: ``**`` crosses folders, ``*`` does not).
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

ASK = ("orchestrator", "ask")
_PATH_KEYS = ("file_path", "notebook_path", "path")
_TEXT_KEYS = ("command", "url", "pattern", "query", "prompt")


def ask_words(command: str) -> list[str] | None:
    """The words after ``orchestrator ask`` when ``command`` is that call (``…/orchestrator ask`` too), else None."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    if len(words) >= 2 and os.path.basename(words[0]) == ASK[0] and words[1] == ASK[1]:
        return words[2:]
    return None


def question_of(command: str) -> str | None:
    """The question an ``orchestrator ask`` command asks, or None when it is not one."""
    words = ask_words(command)
    return None if words is None else " ".join(words).strip()


def is_ask(tool: str, given: dict[str, Any]) -> bool:
    """Whether a tool call is the agent running ``orchestrator ask``."""
    command = given.get("command")
    return tool == "Bash" and isinstance(command, str) and ask_words(command) is not None


def _glob(pattern: str, *, paths: bool) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*" if paths else ".*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]" if paths else ".")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def matches(rule: str, tool: str, given: dict[str, Any], cwd: str) -> bool:
    """Whether the call of ``tool`` with ``given`` input (made in ``cwd``) is one ``rule`` names."""
    name, _, rest = rule.partition("(")
    if name != tool:
        return False
    if not rest:
        return True
    spec = rest[:-1] if rest.endswith(")") else rest
    for key in _PATH_KEYS:
        value = given.get(key)
        if isinstance(value, str):
            relative = os.path.relpath(value, cwd) if os.path.isabs(value) and not spec.startswith("/") else value
            return bool(_glob(spec.removeprefix("./"), paths=True).match(relative))
    text = next((given[k] for k in _TEXT_KEYS if isinstance(given.get(k), str)), None)
    if text is None:
        return False
    text = text.strip()
    if spec.endswith(":*"):
        prefix = spec[:-2]
        return text == prefix or text.startswith(prefix + " ") or text.startswith(prefix)
    return bool(_glob(spec, paths=False).match(text))


def approval_needed(rules: list[str], tool: str, given: dict[str, Any], cwd: str) -> str | None:
    """The first of ``rules`` the call matches, or None."""
    return next((rule for rule in rules if matches(rule, tool, given, cwd)), None)


def describe(tool: str, given: dict[str, Any]) -> str:
    """A tool call in one line for a person: ``Bash: git push origin main``."""
    text = next((given[k] for k in (*_TEXT_KEYS, *_PATH_KEYS) if isinstance(given.get(k), str)), None)
    shown = text if text is not None else ", ".join(f"{k}={v!r:.60}" for k, v in given.items())
    shown = " ".join(shown.split())
    return f"{tool}: {shown[:300]}"
