"""Shell completion through argcomplete: the shells' scripts, and the values it offers from the project root.

At each TAB the shell runs ``orchestrator`` again with argcomplete's variables set; ``cli.main`` then builds
the parser, adds the completers below and answers before anything else is imported, so a completion costs a
Python start and a look at the root: role names from ``roles.yaml`` (``--role``, ``--to``, a role argument),
memo names (file names without ``.md``) from the folders a command's memo can be in.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

SHELLS = ("bash", "zsh", "fish")
EVERY_FOLDER = ("inbox", "active", "held", "archive", "failed", "cancelled")
MEMO_FOLDERS: dict[str, tuple[str, ...]] = {
    "cancel": ("inbox", "active", "held"),
    "interrupt": ("active",),
    "tell": ("active",),
    "release": ("held",),
    "trace": EVERY_FOLDER,
    "logs": EVERY_FOLDER,
}
ROLE_DESTS = ("role", "to")


def script(shell: str) -> str:
    """The completion script of ``shell`` for the ``orchestrator`` command."""
    import argcomplete

    return argcomplete.shellcode(["orchestrator"], shell=shell)


def attach(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give the parser's role and memo arguments their completers (every sub-command, nested ones too)."""
    _attach(parser, command=None)
    return parser


def _attach(parser: argparse.ArgumentParser, command: str | None) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                _attach(sub, command or name)
        elif action.dest in ROLE_DESTS:
            action.completer = RoleNames()  # type: ignore[attr-defined]
        elif action.dest == "memo":
            action.completer = MemoNames(MEMO_FOLDERS.get(command or "", EVERY_FOLDER))  # type: ignore[attr-defined]


def _root(parsed_args: argparse.Namespace | None) -> Path:
    root = getattr(parsed_args, "root", None)
    return Path(root) if root else Path.cwd()


class RoleNames:
    """The roles of ``roles.yaml`` under the root being completed; nothing when it cannot be read."""

    def __call__(self, prefix: str, parsed_args: argparse.Namespace | None = None, **_: Any) -> list[str]:
        return [name for name in role_names(_root(parsed_args)) if name.startswith(prefix)]


class MemoNames:
    """Memo names in the given folders of every role under the root being completed."""

    def __init__(self, folders: tuple[str, ...]) -> None:
        self.folders = folders

    def __call__(self, prefix: str, parsed_args: argparse.Namespace | None = None, **_: Any) -> list[str]:
        return [name for name in memo_names(_root(parsed_args), self.folders) if name.startswith(prefix)]


def role_names(root: Path) -> list[str]:
    """The keys under ``roles:`` of ``<root>/roles.yaml``, unvalidated (completion must not need pydantic)."""
    import yaml

    try:
        data = yaml.load((root / "roles.yaml").read_text(encoding="utf-8"), Loader=_loader(yaml))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []
    roles = data.get("roles") if isinstance(data, dict) else None
    return [str(name) for name in roles] if isinstance(roles, dict) else []


def memo_names(root: Path, folders: tuple[str, ...]) -> list[str]:
    """File names without ``.md`` of the memos in ``memo/<role>/<folder>/``, for each folder given."""
    names: set[str] = set()
    try:
        roles = [entry.path for entry in os.scandir(root / "memo") if entry.is_dir()]
    except OSError:
        return []
    for role in roles:
        for folder in folders:
            try:
                with os.scandir(os.path.join(role, folder)) as entries:
                    names.update(
                        entry.name[:-3]
                        for entry in entries
                        if entry.name.endswith(".md") and not entry.name.startswith(".")
                    )
            except OSError:
                continue
    return sorted(names)


def _loader(yaml: Any) -> Any:
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)
