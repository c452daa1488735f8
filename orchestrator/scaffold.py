"""``orchestrator init``: a default team's roles.yaml, prompts and memo folders; never overwrites a file."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from orchestrator.intake.memo import INBOX

DEFAULT_ROLES = ("project-manager", "planner", "builder", "reviewer")


def init_project(target: Path) -> tuple[list[Path], list[Path]]:
    """Create what is missing under ``target``; returns (created, kept) paths."""
    created: list[Path] = []
    kept: list[Path] = []
    templates = resources.files("orchestrator") / "templates"
    files = {Path("roles.yaml"): templates / "roles.yaml"}
    for role in DEFAULT_ROLES:
        files[Path("prompts") / f"{role}.md"] = templates / "prompts" / f"{role}.md"
    for rel, source in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "x", encoding="utf-8") as handle:  # "x": never overwrite, even in a race
                handle.write(source.read_text(encoding="utf-8"))
            created.append(path)
        except FileExistsError:
            kept.append(path)
    for role in DEFAULT_ROLES:
        inbox = target / "memo" / role / INBOX
        if not inbox.is_dir():
            inbox.mkdir(parents=True)
            created.append(inbox)
    return created, kept
