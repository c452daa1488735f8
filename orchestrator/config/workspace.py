"""The ``workspace:`` key of a role (or of ``defaults``): where its runs work, the project folder shared by every
run (``mode: shared``, the default) or a git worktree of their own (``mode: worktree``, orchestrator/workspaces).

Light on purpose (pydantic only): ``config`` imports it; the git work is the feature's.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from orchestrator.core.units import Duration, Strict

DEFAULT_ROOT = ".orchestrator-workspaces"  # beside .orchestrator/, whose files the agents may not edit


class WorkspaceSettings(Strict):
    """``workspace: {mode: worktree}``: each conversation (``key: conversation``, or each memo with ``key: memo``)
    works in a git worktree under ``root`` on a branch ``orchestrator/<key>`` made from ``base`` (default: the branch
    checked out at the project root). ``setup`` runs once in a new worktree (for at most ``setup_timeout``),
    ``copy`` names files copied into it from the project root (copied secrets reach the agent), ``ports`` the size
    of the block of ports each live workspace gets; ``check`` runs in the workspace before its branch lands
    (``orchestrator land``), for at most ``check_timeout``."""

    model_config = ConfigDict(extra="forbid", frozen=True)  # ``copy`` only: the field's own name is no key

    mode: Literal["shared", "worktree"] = "shared"
    key: Literal["conversation", "memo"] = "conversation"
    base: str | None = Field(None, min_length=1)
    root: str = Field(DEFAULT_ROOT, min_length=1)
    setup: list[str] = Field(default_factory=list)
    setup_timeout: Duration = Field(600.0, gt=0)
    copy_files: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list, alias="copy")
    ports: int | None = Field(None, ge=1, le=1000)
    check: list[str] = Field(default_factory=list)
    check_timeout: Duration = Field(1800.0, gt=0)

    @field_validator("copy_files")
    @classmethod
    def _inside_the_root(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if PurePosixPath(pattern).is_absolute() or ".." in PurePosixPath(pattern).parts:
                raise ValueError(
                    f"{pattern!r} is outside the project root; name a path or glob inside it, such as .env"
                )
        return patterns

    @property
    def isolated(self) -> bool:
        """Whether the role's runs work in worktrees of their own."""
        return self.mode == "worktree"


class WorkspaceKeys(Strict):
    """A role's key for the workspaces feature: where its runs work."""

    workspace: WorkspaceSettings = Field(default_factory=WorkspaceSettings)
