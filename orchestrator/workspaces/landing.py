"""The git work of one landing, blocking (a worker thread runs it): rebase a workspace's branch onto the target,
run the role's ``check`` in the workspace, then fast-forward the target, and the project root's working tree when
the target is checked out there.

Nothing changes on the target unless every step passed: a conflict or a failed check undoes the rebase (the branch
back where it was), and a root with uncommitted changes to tracked files is refused before anything is touched;
a landing killed half-way (``interrupted``) is undone at the next start the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.agents import proc_table
from orchestrator.workspaces import git

BASE_KEY = "orchestratorbase"  # branch.<branch>.orchestratorbase: the base a workspace was made from
LANDING_MARK = "ORCHESTRATOR_LANDING"  # in a check's environment: the landing it checks
TAIL_LINES = 8  # of a failed check's output, in the answer and the memo
TAIL_CHARS = 600
POLL = 0.1  # how often a running check looks whether the orchestrator is ending


@dataclass(frozen=True)
class Plan:
    """One landing to do: workspace ``name`` (its ``folder``, on ``branch``) into ``into`` (None: its base)."""

    root: Path
    name: str
    folder: Path
    branch: str
    into: str | None
    check: tuple[str, ...] = ()
    check_timeout: float = 1800.0
    identity: dict[str, str] = field(default_factory=dict)
    start: str | None = None  # the branch's commit as recorded when the landing began (``where``)


@dataclass(frozen=True)
class Result:
    """How a landing ended: ``landed``, ``conflict``, ``check failed`` or ``refused``; ``reason`` is one line."""

    outcome: str
    reason: str
    into: str
    files: tuple[str, ...] = ()
    tail: str = ""
    commit: str | None = None
    previous: str | None = None

    @property
    def landed(self) -> bool:
        return self.outcome == "landed"


class Refused(Exception):
    """The landing cannot be tried; the message is its one line."""


def base_of(root: Path, branch: str) -> str | None:
    """The base recorded for a workspace's ``branch`` when it was made, or None."""
    return git.git(root, "config", f"branch.{branch}.{BASE_KEY}", check=False) or None


def target_of(plan: Plan) -> str:
    """The branch ``plan`` lands into: the one it names, else its workspace's base."""
    return plan.into or base_of(plan.root, plan.branch) or git.current_branch(plan.root) or "main"


def where(plan: Plan) -> tuple[str, str | None]:
    """(the target, the branch's commit) as a landing begins, recorded before it rebases, so that a landing the
    orchestrator's end interrupts can be put back; the commit is None when there is no branch to land."""
    try:
        return target_of(plan), git.commit_of(plan.root, f"refs/heads/{plan.branch}")
    except (git.GitError, OSError):
        return plan.into or "?", None


def land(plan: Plan, stopping: threading.Event | None = None) -> Result:
    """Land ``plan``; a ``Result`` whatever happened (a git failure is a refusal with git's words)."""
    into = target_of(plan)
    try:
        return _land(plan, into, stopping or threading.Event())
    except (Refused, git.GitError, OSError) as exc:
        return Result("refused", str(exc), into)


def _land(plan: Plan, into: str, stopping: threading.Event) -> Result:
    root, folder = plan.root, plan.folder
    target = f"refs/heads/{into}"
    old = git.commit_of(root, target)
    if old is None:
        raise Refused(f"landing {plan.name}: there is no branch {into!r} in {root}; name one with --into BRANCH")
    if not (folder / ".git").exists():
        raise Refused(f"landing {plan.name}: its folder {folder} is gone; nothing to land from")
    if git.current_branch(folder) != plan.branch:
        raise Refused(f"landing {plan.name}: its folder {folder} is not on {plan.branch}; put it back and land again")
    at_root = _checked_out(root, target)
    if at_root:
        _clean_root(root, plan.name, into)
    if git.changed(folder):
        raise Refused(f"landing {plan.name}: {folder} has uncommitted changes; commit them on {plan.branch} first")
    before = git.git(folder, "rev-parse", "HEAD")
    if plan.start is not None and before != plan.start:
        raise Refused(f"landing {plan.name}: {plan.branch} moved as the landing began; land again")
    if _is_ancestor(root, before, old):
        raise Refused(f"landing {plan.name}: nothing to land, {plan.branch} has no commit that {into} lacks")
    rebased = subprocess.run(  # noqa: S603 - an argv list
        ["git", "rebase", "--quiet", old],  # noqa: S607
        cwd=folder,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_EDITOR": "true", **plan.identity},
        capture_output=True,
        text=True,
        check=False,
    )
    if rebased.returncode != 0:
        files = tuple(git.git(folder, "diff", "--name-only", "--diff-filter=U", check=False).splitlines())
        git.git(folder, "rebase", "--abort", check=False)
        git.reset(folder, before)
        if not files:
            words = git.account(rebased.stderr or rebased.stdout) or "?"
            raise Refused(f"landing {plan.name}: git rebase {into} failed: {words}")
        return Result(
            "conflict",
            f"landing {plan.name} into {into}: {plan.branch} conflicts with {into} in {', '.join(files)}; nothing "
            f"changed on {into}",
            into,
            files=files,
            previous=old,
        )
    if plan.check:
        try:
            failed = _check(plan, into, stopping)
        except Refused:
            git.reset(folder, before)
            raise
        if failed is not None:
            git.reset(folder, before)
            return Result("check failed", failed[0], into, tail=failed[1], previous=old)
    new = git.git(folder, "rev-parse", "HEAD")
    git.reset(folder, new)  # what the check left behind (not ignored) goes: the next run starts clean
    try:
        if at_root:
            _clean_root(root, plan.name, into)  # again: a person may have edited it while the check ran
            _no_untracked_in_the_way(root, plan.name, old, new)
            git.git(root, "merge", "--ff-only", "--quiet", new)
        else:
            git.git(root, "update-ref", target, new, old)  # only if the target is still where it was
    except (Refused, git.GitError):
        git.reset(folder, before)
        raise
    count = git.git(root, "rev-list", "--count", f"{old}..{new}")
    return Result(
        "landed",
        f"landed {plan.branch} into {into}: {count} commit(s), {into} now at {new[:10]}",
        into,
        commit=new,
        previous=old,
    )


def interrupted(root: Path, name: str, folder: Path, branch: str, into: str, start: str) -> Result:
    """A landing the orchestrator's end interrupted (killed while its rebase stopped, or while its check ran),
    undone at the next start: a rebase in progress aborted and the workspace back on ``branch`` at ``start``, what
    the check left removed; or, when ``into`` was fast-forwarded already, found ``landed``.

    A workspace the landing had not moved yet is left as it is: what is in it may predate the landing (its checks
    had not run), and the next start there sets it aside like anything found in a workspace."""
    stopped = stop_left_checks(name, folder)
    result = _put_back(root, name, folder, branch, into, start)
    if not stopped:
        return result
    said = f"; its check, still running, was stopped (pid {', '.join(map(str, stopped))})"
    return dataclasses.replace(result, reason=result.reason + said)


def _put_back(root: Path, name: str, folder: Path, branch: str, into: str, start: str) -> Result:
    head = f"landing {name} into {into} was under way when the orchestrator ended"
    if not (folder / ".git").exists():
        return Result("refused", f"{head}; its folder {folder} is gone, nothing to put back", into)
    try:
        aborted = git.succeeds(folder, "rebase", "--abort")  # exit 0 only when a rebase was in progress
        now = git.commit_of(root, f"refs/heads/{branch}")
        landed = git.commit_of(root, f"refs/heads/{into}")
        if now is not None and landed is not None and _is_ancestor(root, now, landed):  # (a rebase with nothing to
            # move leaves the branch at ``start``: the target holding it is what says the landing went through)
            return Result("landed", f"landed {branch} into {into} as the orchestrator ended", into, commit=landed)
        on_branch = git.current_branch(folder) == branch
        if not aborted and on_branch and now == start:
            return Result("refused", f"{head}, before it changed anything; land it again", into)
        kept, ref = _keep(
            root, name, folder, start
        )  # whatever is there now (the rebase, the check's files, a person's work)
        if not on_branch:
            git.git(folder, "checkout", "--quiet", "--force", branch)
        git.reset(folder, start)
    except (git.GitError, OSError) as exc:
        return Result(
            "refused",
            f"{head}; it could not be put back ({exc}): in {folder} run `git rebase --abort`, `git checkout {branch}` "
            f"and `git reset --hard {start[:10]}`",
            into,
        )
    where = f" (what was there kept as {ref})" if kept else ""
    return Result(
        "refused", f"{head}: its rebase undone, {branch} put back at {start[:10]}{where}; land it again", into
    )


def _keep(root: Path, name: str, folder: Path, start: str) -> tuple[bool, str]:
    """The workspace as it is (its HEAD and what no commit holds) kept as one commit under a ref, touching nothing,
    unless it is the branch at ``start`` and nothing more; (whether it was kept, the ref)."""
    head = git.git(folder, "rev-parse", "HEAD")
    tree = git.snapshot(folder)
    ref = f"refs/orchestrator/landings/{name}/{head[:10]}"
    if head == start and tree == git.git(folder, "rev-parse", "HEAD^{tree}"):
        return False, ref
    message = f"landing {name}: the workspace as the restart found it"
    commit = git.git(folder, "commit-tree", tree, "-p", head, "-m", message, env=git.identity(root))
    git.git(folder, "update-ref", ref, commit)
    return True, ref


def stop_left_checks(name: str, folder: Path) -> list[int]:
    """Kill the group of each check of landing ``name`` in ``folder`` still running (its orchestrator was killed: no
    one else would stop it, and it would go on writing in the workspace put back under it); their pids."""
    found = []
    for pid in proc_table.all_pids():
        env = proc_table.environ(pid)
        if env and env.get(LANDING_MARK) == name and env.get("ORCHESTRATOR_WORKSPACE") == str(folder):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
                found.append(pid)
    return found


def _is_ancestor(root: Path, older: str, newer: str) -> bool:
    done = subprocess.run(  # noqa: S603
        ["git", "merge-base", "--is-ancestor", older, newer],  # noqa: S607
        cwd=root,
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def _checked_out(root: Path, target: str) -> bool:
    """Whether ``target`` is checked out at the project root; ``Refused`` when another worktree has it."""
    top = git.top_level(root) or root
    path: Path | None = None
    for line in git.git(root, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = Path(line.removeprefix("worktree "))
        elif line == f"branch {target}" and path is not None:
            if path.resolve() == top.resolve():
                return True
            raise Refused(
                f"{target.removeprefix('refs/heads/')} is checked out in {path}; land into a branch that is checked "
                "out at the project root or nowhere"
            )
    return False


def _clean_root(root: Path, name: str, into: str) -> None:
    """``Refused`` when the root's tracked files have uncommitted changes: the landing would have to touch them."""
    dirty = git.git(root, "diff", "--name-only", "HEAD").splitlines()  # staged or not
    if dirty:
        shown = ", ".join(dirty[:3]) + (f" and {len(dirty) - 3} more" if len(dirty) > 3 else "")
        raise Refused(
            f"landing {name} into {into}: the project root has uncommitted changes ({shown}); commit or undo them, "
            "then land again"
        )


def _no_untracked_in_the_way(root: Path, name: str, old: str, new: str) -> None:
    """``Refused`` naming the untracked files of the root that the landing's new files would overwrite."""
    added = git.git(root, "diff", "--name-only", "--diff-filter=A", old, new).splitlines()
    there = [path for path in added if (root / path).exists()]
    if there:
        shown = ", ".join(there[:3]) + (f" and {len(there) - 3} more" if len(there) > 3 else "")
        raise Refused(
            f"landing {name}: untracked files in the project root are in the way ({shown}); move them away, then "
            "land again"
        )


def _check(plan: Plan, into: str, stopping: threading.Event) -> tuple[str, str] | None:
    """Run the check in the workspace: None when it passed, else (the one line, its output's tail); ``Refused`` when
    it cannot start."""
    words = " ".join(plan.check)
    env = {
        **os.environ,
        "ORCHESTRATOR_WORKSPACE": str(plan.folder),
        "ORCHESTRATOR_BRANCH": plan.branch,
        "ORCHESTRATOR_BASE": into,
        LANDING_MARK: plan.name,  # how a restart finds a check its killed orchestrator left running
    }
    try:
        child = subprocess.Popen(  # noqa: S603 - the role's argv, never a shell
            list(plan.check),
            cwd=plan.folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:  # the configuration's fault, not the branch's: refused, and no memo to the builder
        raise Refused(
            f"landing {plan.name}: the check `{words}` could not start: {exc.strerror or exc}; fix `check` in roles.yaml"
        ) from None
    deadline = time.monotonic() + plan.check_timeout
    output = ""
    why: str | None = None
    while True:
        try:
            output, _ = child.communicate(timeout=POLL)
            break
        except subprocess.TimeoutExpired:
            if stopping.is_set():
                why = "was stopped: the orchestrator is ending"
            elif time.monotonic() > deadline:
                why = f"took longer than {plan.check_timeout:g}s"
            else:
                continue
            _kill(child)
            output, _ = child.communicate()
            break
    tail = tail_of(output or "")
    if why is None and child.returncode == 0:
        return None
    if why is None:
        why = f"exited {child.returncode}"
    said = f": {' '.join(tail.splitlines()[-3:])}" if tail else ""
    return f"landing {plan.name}: the check `{words}` {why}{said}; nothing changed on {into}", tail


def _kill(child: subprocess.Popen[str]) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def tail_of(output: str) -> str:
    """The last lines of a command's output, cut to a size a memo and a line can hold."""
    lines = [line.rstrip() for line in output.strip().splitlines() if line.strip()]
    return "\n".join(lines[-TAIL_LINES:])[-TAIL_CHARS:]
