"""What every backend needs to start one attempt: its ``LaunchSpec``, its environment, its program and its log.

An agent starts from an argv list, never a shell, in a new session, so a Ctrl-C in the orchestrator's terminal does
not reach it and the kill ladder can signal its whole group.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from orchestrator.agents import memo_list
from orchestrator.agents.proc_table import KEY_ENV
from orchestrator.config import Role

ARG_MAX_SINGLE = 128 * 1024  # Linux MAX_ARG_STRLEN: the longest single argument


# a start's errors that are the machine's, not the role's: arguments and environment too long, no descriptors,
# memory, processes or disk left, a read-only file system
NOT_THE_ROLES = frozenset(
    {errno.E2BIG, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.ENOSPC, errno.EDQUOT, errno.EROFS}
)


class SpawnError(Exception):
    """The agent could not be started; the message says why, for a person.

    ``internal``: for a reason of the orchestrator's making or the machine's (``NOT_THE_ROLES``), not of the
    role's configuration or its memo: the memos go back to the inbox instead of into ``failed/``."""

    def __init__(self, message: str, *, internal: bool = False) -> None:
        super().__init__(message)
        self.internal = internal


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one attempt of a run; every backend reads where and how from here, never from
    the role, so an extension's ``prepare`` can change it (``dataclasses.replace``) before the start.

    ``cwd``: the folder the agent starts in (the role's ``cwd`` under the root, unless ``prepare`` moved it);
    ``env``: its whole environment; ``resume``: the session an sdk attempt resumes (``retry_resumes``);
    ``args``: arguments added after the role's ``command`` (and the caps the orchestrator adds), before a prompt
    given as an argument (``command`` roles only: an sdk start refuses them); ``adopted``: the agent already runs
    (taken back at a restart), so what ``prepare`` returns changes nothing; ``carried_usd``: the running cost of the
    session the attempt resumes when an earlier run left it (a question's, answered), which its totals report
    again: a budget read from those totals counts on top of it."""

    run_id: int
    attempt: int
    role: Role
    root: Path
    prompt: str
    memo_paths: list[Path]
    log_path: Path
    cwd: Path
    env: dict[str, str]
    resume: str | None = None
    args: tuple[str, ...] = ()
    adopted: bool = False
    carried_usd: float = 0.0


def transcript_path(spec: LaunchSpec) -> Path:
    """The run's transcript (a Claude agent's events, one JSON object a line):
    ``.orchestrator/runs/<run_id>/transcript.jsonl``."""
    return spec.root / ".orchestrator" / "runs" / str(spec.run_id) / "transcript.jsonl"


def agent_environment(
    role: Role,
    root: Path,
    run_id: int,
    attempt: int,
    memo_paths: list[Path],
    seq: int | None = None,
    memos_file: Path | None = None,
) -> dict[str, str]:
    """The agent's environment: ours, the role's ``env``, then the ORCHESTRATOR_* variables. A batch's list file
    (``memos_file``, else the run's ``memos.txt``) is named here; the caller writes it."""
    env = dict(_role_environment(role))
    env.update(
        {
            "ORCHESTRATOR_ROLE": role.name,
            "ORCHESTRATOR_RUN_ID": str(run_id),
            "ORCHESTRATOR_ROOT": str(root),
            "ORCHESTRATOR_ATTEMPT": str(attempt),
            "ORCHESTRATOR_SEQ": str(seq or ""),
        }
    )
    for key in (*memo_list.MEMO_KEYS, KEY_ENV):  # ours, when we run inside an agent (a Ray agent's key too)
        env.pop(key, None)
    file = memos_file or memo_list.list_path(root / ".orchestrator", run_id)
    env.update(memo_list.memo_environment(role.batch, memo_paths, file))
    return env


@functools.cache
def role_folder(root: Path, cwd: str) -> Path:
    """The role's folder (``cwd`` under ``root``), symlinks resolved: once per folder, not at every start
    (resolving walks every component of the path with a system call)."""
    return (root / cwd).resolve()


def is_claude_command(command: list[str]) -> bool:
    """Whether a ``command`` role runs the Claude Code CLI (its program is named ``claude``)."""
    return bool(command) and Path(command[0]).name == "claude"


def retry_environment(role: Role) -> dict[str, str]:
    """The Claude CLI's own API retries, ``api_retries``: kept short, so the role's ``retry`` is the policy that
    counts (a role's ``env`` may still set the variable)."""
    return {"CLAUDE_CODE_MAX_RETRIES": str(role.api_retries)}


_role_envs: dict[int, tuple[Role, dict[str, str]]] = {}


def _role_environment(role: Role) -> dict[str, str]:
    """Ours and the role's ``env``, made once per role (callers copy it): our environment does not change while
    we run, and reading ``os.environ`` decodes every variable again, about 0.1 ms a start."""
    cached = _role_envs.get(id(role))
    if cached is not None and cached[0] is role:
        return cached[1]
    env = dict(os.environ)
    if role.backend == "sdk" or is_claude_command(role.command):
        env.update(retry_environment(role))
        if not role.background_tasks:  # -p kills background tasks at the end of the turn, their work lost
            env["CLAUDE_CODE_DISABLE_BACKGROUND_TASKS"] = "1"
    env.update(role.env)
    _role_envs[id(role)] = (role, env)
    return env


def resolve_command(argv: list[str], cwd: Path) -> str | None:
    """The executable's full path, or None when it cannot be found."""
    program = argv[0]
    if os.sep in program:
        candidate = program if os.path.isabs(program) else str(cwd / program)
        return candidate if os.access(candidate, os.X_OK) and os.path.isfile(candidate) else None
    return shutil.which(program)


def open_log(path: Path, header: str) -> int:
    """The run's log, opened for appending with ``header`` written; its folder is made when missing."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    os.write(fd, header.encode())
    return fd


def cannot_start(executable: str, argv: list[str], env: dict[str, str], code: int | None, text: str) -> SpawnError:
    """The one-line error for an exec of ``argv`` (``executable`` its program resolved) with ``env`` that failed
    with errno ``code``."""
    hint = ""
    if code == errno.ENOENT and os.path.isfile(executable):
        hint = " (the file exists: is the interpreter on its #! line missing?)"
    elif code == errno.E2BIG:
        hint = too_long_hint(argv, env)
    return SpawnError(f"cannot start {argv[0]!r}: {text}{hint}", internal=code in NOT_THE_ROLES)


def too_long_hint(argv: list[str], env: dict[str, str]) -> str:
    """What made a start ``Argument list too long``: the sizes, and the longest argument or variable."""
    sizes = [(len(os.fsencode(a)) + 1, f"argument {i}") for i, a in enumerate(argv)]
    sizes += [(len(os.fsencode(k)) + len(os.fsencode(v)) + 2, f"variable {k}") for k, v in env.items()]
    if not sizes:
        return ""
    largest = max(sizes)
    return (
        f" (its arguments and environment come to {sum(n for n, _ in sizes)} bytes; the longest is "
        f"{largest[1]}, {largest[0]} bytes; Linux takes at most {ARG_MAX_SINGLE} bytes in one)"
    )
