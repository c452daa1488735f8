"""``orchestrator init``: a default team's roles.yaml, prompts and memo folders; never overwrites a file.

Beside roles.yaml goes ``roles.schema.json``, the JSON Schema of this version's roles.yaml, which the first
line of roles.yaml names for editors (``# yaml-language-server: $schema=./roles.schema.json``): offline, and
relative, so the project can move."""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from orchestrator.intake.memo import INBOX
from orchestrator.ops.configuration import schema_text

SCHEMA_NAME = "roles.schema.json"

DEFAULT_ROLES = ("project-manager", "planner", "builder", "reviewer")


def init_project(target: Path) -> tuple[list[Path], list[Path]]:
    """Create what is missing under ``target``; returns (created, kept) paths."""
    created: list[Path] = []
    kept: list[Path] = []
    templates = resources.files("orchestrator") / "templates"
    files = {Path("roles.yaml"): templates / "roles.yaml"}
    for role in DEFAULT_ROLES:
        files[Path("prompts") / f"{role}.md"] = templates / "prompts" / f"{role}.md"
    texts: dict[Path, Callable[[], str]] = {
        rel: functools.partial(source.read_text, encoding="utf-8") for rel, source in files.items()
    }
    texts[Path(SCHEMA_NAME)] = schema_text
    for rel, text in texts.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "x", encoding="utf-8") as handle:  # "x": never overwrite, even in a race
                handle.write(text())
            created.append(path)
        except FileExistsError:
            kept.append(path)
    for role in DEFAULT_ROLES:
        inbox = target / "memo" / role / INBOX
        if not inbox.is_dir():
            inbox.mkdir(parents=True)
            created.append(inbox)
    return created, kept
