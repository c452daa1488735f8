"""The workspaces scenario (issue 35): what a worktree per conversation costs, in the feature's own git calls.

- **making a workspace** for a repository of 10,000 files (``startup_memos`` files in the smoke run): the calls the
  feature makes for a new workspace on its worker thread (``git.ensure_worktree``: a prune, then ``git worktree
  add -b``; ``git.exclude``; the base recorded in the branch's config; its HEAD read), beside ``git worktree add
  -b`` alone, alternated, in the same repository. Target: <= 1 s.
- **the end of an attempt** with 100 changed files (50 edited, 50 new): ``git.commit_all`` (a success) and
  ``git.set_aside`` (any other end: a snapshot through its own index, a ref, the reset), beside ``git add --all``
  and ``git commit`` alone. Target: <= 0.5 s each.

Both run the feature's functions in this process on real repositories; where they run in ``up`` is the
feature's: the making on a worker thread (``asyncio.to_thread`` in ``prepare``), and the end too: the awaitable its
``before_finish`` returns, while the run settles (``supervisor/settling.py``), so neither holds the loop
(``tests/test_off_loop.py`` runs the real loop through such ends with asyncio's slow-callback report at 50 ms).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from bench.common import Outcome, Row
from bench.harness import Stats

REPEATS = 5
CHANGED = 100
IDENTITY = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}


def _git(folder: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True, env={**os.environ, **IDENTITY})


def _repository(root: Path, files: int) -> None:
    """A repository on ``main`` with ``files`` small files in 100 folders, committed."""
    root.mkdir(parents=True)
    for i in range(files):
        folder = root / f"d{i % 100:03d}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i:05d}.txt").write_text(f"file {i}\n" * 4, encoding="utf-8")
    (root / ".gitignore").write_text(".orchestrator/\n", encoding="utf-8")
    _git(root, "init", "--quiet", "--initial-branch=main")
    _git(root, "add", "--all")
    _git(root, "commit", "--quiet", "-m", "the project")


def _seconds(call: object) -> float:
    start = time.perf_counter()
    call()  # type: ignore[operator]
    return time.perf_counter() - start


def _change(folder: Path, round_: int, files: int) -> None:
    """100 changed files: 50 edited (fewer in a smaller repository), the rest new."""
    edited = min(CHANGED // 2, files)
    for i in range(edited):
        (folder / f"d{i % 100:03d}" / f"f{i:05d}.txt").write_text(f"edited {round_}\n", encoding="utf-8")
    for i in range(CHANGED - edited):
        (folder / f"new{round_}-{i}.txt").write_text("new\n", encoding="utf-8")


def workspaces(ctx):  # type: ignore[no-untyped-def]
    from orchestrator.workspaces import git

    out = Outcome("workspaces")
    files = ctx.sizes.startup_memos
    root = ctx.scratch / "workspaces-repo"
    ctx.say(f"workspaces: a repository of {files} files, {REPEATS} workspaces made and {REPEATS} bare worktrees")
    _repository(root, files)
    made, bare = [], []
    for i in range(REPEATS):
        folder = root / ".orchestrator-workspaces" / f"w{i}"
        branch = f"orchestrator/w{i}"

        def make(folder: Path = folder, branch: str = branch) -> None:
            git.ensure_worktree(root, folder, branch, "main")
            git.exclude(root, root / ".orchestrator-workspaces")
            git.git(root, "config", f"branch.{branch}.orchestratorbase", "main")
            git.git(folder, "rev-parse", "HEAD")

        made.append(_seconds(make))
        plain = ctx.scratch / f"workspaces-bare-{i}"
        bare.append(
            _seconds(
                lambda plain=plain, i=i: _git(root, "worktree", "add", "--quiet", "-b", f"b{i}", str(plain), "main")
            )
        )
    making, alone = Stats.of(made), Stats.of(bare)
    out.details.append(f"making a workspace: {making.line('s', 3)}; `git worktree add` alone: {alone.line('s', 3)}")
    out.rows.append(
        Row(
            "workspaces",
            f"making a workspace, repository of {files:,} files, p50 (n={REPEATS})",
            making.p50,
            "s",
            alone.p50,
            "`git worktree add -b` alone",
            "<= 1 s",
            making.p50 <= 1.0,
            3,
        )
    )
    folder = root / ".orchestrator-workspaces" / "w0"
    identity = git.identity(root) or IDENTITY
    commits, asides, plain_commits = [], [], []
    for i in range(REPEATS):
        _change(folder, 3 * i, files)
        commits.append(_seconds(lambda: git.commit_all(folder, "builder: bench (memo m, run 1)", identity)))
        start = git.git(folder, "rev-parse", "HEAD")
        _change(folder, 3 * i + 1, files)
        asides.append(
            _seconds(
                lambda start=start, i=i: git.set_aside(
                    folder, start, f"refs/orchestrator/attempts/w0/{i}-1", "bench", identity
                )
            )
        )
        _change(folder, 3 * i + 2, files)
        plain_commits.append(
            _seconds(lambda: (_git(folder, "add", "--all"), _git(folder, "commit", "--quiet", "-m", "plain")))
        )
    commit, aside, plain = Stats.of(commits), Stats.of(asides), Stats.of(plain_commits)
    out.details.append(
        f"{CHANGED} changed files: commit {commit.line('s', 3)}; set aside {aside.line('s', 3)}; "
        f"`git add --all && git commit` alone {plain.line('s', 3)}"
    )
    for figure, stats in (("commit", commit), ("set-aside", aside)):
        out.rows.append(
            Row(
                "workspaces",
                f"end-of-attempt {figure} of {CHANGED} changed files, {files:,}-file repository, p50 (n={REPEATS})",
                stats.p50,
                "s",
                plain.p50,
                "`git add --all && git commit` alone",
                "<= 0.5 s",
                stats.p50 <= 0.5,
                3,
            )
        )
    out.notes.append(
        "workspaces: the making and the end of an attempt both run on a worker thread (prepare; the awaitable "
        "before_finish returns, awaited before the memo moves), never on the loop"
    )
    shutil.rmtree(root, ignore_errors=True)
    return out
