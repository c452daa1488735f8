"""``orchestrator diff MEMO [--attempt N] [--stat]``: what one attempt of a memo's runs changed in its workspace,
the latest by default, also for an attempt whose work was set aside."""

from __future__ import annotations

from pathlib import Path

from orchestrator.core.errors import OrchestratorError, UnknownMemoError
from orchestrator.store import Store
from orchestrator.workspaces import git, records


def attempts_of(root: Path, memo: str) -> list[records.AttemptWork]:
    """Every attempt, in a workspace, of the runs that held ``memo`` (file name, with or without ``.md``, or id)."""
    path = root / ".orchestrator" / "state.db"
    if not path.exists():
        raise UnknownMemoError(f"no run has held a memo {memo!r} in {root}; see `orchestrator history`")
    store = Store(path, readonly=True)
    try:
        base = memo.rsplit("/", 1)[-1]
        run_ids = [
            row[0]
            for row in store.db.execute(
                "SELECT run_id FROM runs WHERE EXISTS (SELECT 1 FROM json_each(runs.memos) WHERE value IN (?, ?)) "
                "OR EXISTS (SELECT 1 FROM json_each(runs.memo_ids) WHERE value = ?) ORDER BY run_id",
                (base, base + ".md", memo),
            )
        ]
        if not run_ids:
            raise UnknownMemoError(f"no run has held a memo {memo!r} in {root}; see `orchestrator history`")
        has_table = store.db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'workspace_attempts'"
        ).fetchone()
        found = records.of_runs(store.db, run_ids) if has_table else []
    finally:
        store.close()
    if not found:
        raise OrchestratorError(f"no run of {memo} worked in a workspace (its role has `workspace: {{mode: shared}}`)")
    return found


def diff_of(root: Path, memo: str, attempt: int | None = None, stat: bool = False) -> str:
    """The patch (or ``stat``) of ``memo``'s attempt ``attempt`` (its latest when None)."""
    found = attempts_of(root, memo)
    if attempt is None:
        work = found[-1]
    else:
        chosen = [w for w in found if w.attempt == attempt]
        if not chosen:
            numbers = ", ".join(str(w.attempt) for w in found)
            raise UnknownMemoError(f"{memo} has no attempt {attempt} in a workspace; its attempts: {numbers}")
        work = chosen[-1]
    try:
        return changes(root, work, "--stat" if stat else "--patch")
    except (git.GitError, OSError) as exc:
        raise OrchestratorError(
            f"{memo}: cannot read attempt {work.attempt}'s changes in workspace {work.name} ({work.folder}): {exc}"
        ) from None


def changes(root: Path, work: records.AttemptWork, how: str) -> str:
    """``git diff how`` (``--patch``, ``--stat``, ``--name-status``) of an attempt's changes: its commit's once
    settled; while it is at work or waits for a person, those so far in its folder, new files included (a snapshot,
    its folder, index and branch untouched); "" when it left none."""
    if work.outcome in (None, "waiting"):
        folder = Path(work.folder)
        return git.git(folder, "diff", how, work.start, git.snapshot(folder))
    if work.commit_id is None:
        return ""
    return git.git(root, "diff", how, work.start, work.commit_id)
