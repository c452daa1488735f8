"""Moving a run's memos to the folder of its end (a failed memo's reason file first), and the memo index told."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.config import Config, RoleRun
from orchestrator.console import Console
from orchestrator.core.clock import Clock
from orchestrator.core.run import MemoRef
from orchestrator.intake import memo_index, notices
from orchestrator.intake.memo import FAILED, move_memo
from orchestrator.store import Store


class MemoMoves:
    """The one place a run's memos are moved at its end."""

    def __init__(self, config: Config, store: Store, console: Console, clock: Clock) -> None:
        self.config = config
        self.store = store
        self.console = console
        self.clock = clock

    def move(self, run: RoleRun, folder: str, reason_text: str | None) -> list[tuple[str, str]]:
        """Move every memo of the run into ``folder``; a memo that cannot go there goes to failed/ instead.

        Returns (old name, new name) of each memo moved.
        """
        target = self.config.role_dir(run.role.name) / folder
        before = reason_writer(reason_text) if reason_text is not None else None
        renamed: list[tuple[str, str]] = []
        for memo in run.memos:
            if memo.path.parent == target:
                continue  # already there (a rejected memo recorded after its move)
            old, src = memo.name, memo.path
            try:
                memo.path = move_memo(memo.path, target, before)
            except FileNotFoundError:
                self.console.line(
                    f"{memo.path} disappeared from {memo.path.parent.name}/ while its run was going", role=run.role.name
                )
                continue
            except OSError as exc:
                memo.path = self._to_failed(run, memo, folder, exc)
            if memo.path != src:
                memo_index.moved(self.store.db, src, memo.path, self.clock.now().timestamp())
            memo.name = memo.path.name
            renamed.append((old, memo.name))
        return renamed

    def _to_failed(self, run: RoleRun, memo: MemoRef, folder: str, exc: OSError) -> Path:
        why = f"it could not be moved to {folder}/: {exc.strerror or exc}"
        self.console.error(f"internal error: run {run.run_id}: {memo.name}: {why}")
        if folder == FAILED:
            return memo.path
        try:
            return move_memo(
                memo.path,
                self.config.role_dir(run.role.name) / FAILED,
                reason_writer(f"failed: {why}\n"),
            )
        except OSError as again:
            self.console.error(f"internal error: run {run.run_id}: {memo.name} stays in {memo.path.parent}: {again}")
            return memo.path


def reason_writer(text: str) -> Callable[[Path], None]:
    """Writes a failed memo's reason file beside where it is about to appear."""

    def write(path: Path) -> None:
        notices.write_reason(path, text)

    return write
