"""Context files: a role's persona, goals and state, read at every start and never skipped.

A role's ``context`` lists files relative to the project root; their contents,
in order, become ``$context``. At start-up a missing, unreadable or oversized
set is a configuration error; at run time the same problem holds the role.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.config import Config, Role
from orchestrator.core.errors import ConfigError


class ContextProblem(Exception):
    """The role's context cannot be given in full; the message says why, for a person."""


def context_paths(config: Config, role: Role) -> list[Path]:
    """The role's context files as absolute paths, in their configured order."""
    return [config.root / name for name in role.context]


def read_context(config: Config, role: Role) -> str:
    """``$context``: every context file's text in order, a blank line between; raises ``ContextProblem``."""
    parts: list[str] = []
    sizes: list[tuple[str, int]] = []
    for name, path in zip(role.context, context_paths(config, role), strict=True):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ContextProblem(f"context file {name} is missing") from None
        except IsADirectoryError:
            raise ContextProblem(f"context file {name} is a directory") from None
        except OSError as exc:
            raise ContextProblem(f"context file {name} cannot be read: {exc.strerror or exc}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ContextProblem(f"context file {name} is not UTF-8") from None
        sizes.append((name, len(data)))
        parts.append(text.rstrip("\n"))
    total = sum(size for _, size in sizes)
    if total > role.context_max_bytes:
        listed = ", ".join(f"{name} ({size} bytes)" for name, size in sizes)
        raise ContextProblem(
            f"context files are {total} bytes together, over context_max_bytes {role.context_max_bytes}: {listed}"
        )
    return "\n\n".join(parts) + "\n" if parts else ""


def check_context(config: Config) -> None:
    """Start-up check of every role's context files; raises ``ConfigError`` naming the file and key."""
    for role in config.roles.values():
        try:
            read_context(config, role)
        except ContextProblem as exc:
            raise ConfigError(
                f"{config.path}: roles.{role.name}.context: {exc}; create it, fix the list, or raise context_max_bytes"
            ) from None
