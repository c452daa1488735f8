"""The doctor's checks of each role: its command (found on every PATH that starts it, and its backend's own
checks: Claude Code's version when it runs Claude Code), its login when its backend checks one, its memo
folders, its prompt and its context files.

The PATHs are those an agent of this root is started with: this shell's (a manual ``up``), the running
orchestrator's (read from ``/proc``) and the installed service's (its unit's ``Environment=PATH=``); a
program missing from any of them fails, naming which. What to check of the program (its version, its login)
the role's backend says (``agents/backends``); Claude's login check is ``agents/backends/claude``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.agents.backends import Answer, Program, backend_for, check
from orchestrator.agents.spec import resolve_command, role_folder
from orchestrator.config import SPAWN_CMD_ENV, Config, Role, dry_run
from orchestrator.continuity.context import ContextProblem, read_context
from orchestrator.core.errors import ConfigError
from orchestrator.intake.memo import FOLDERS, HELD
from orchestrator.ops import unit
from orchestrator.ops.doctor.findings import Finding, fail, from_message, ok
from orchestrator.ops.doctor.host import Host
from orchestrator.prompts import load_template

MEMO_FOLDERS = (*FOLDERS, HELD)
PROBE_NAME = ".orchestrator-doctor-{pid}.tmp"  # hidden and .tmp: never taken for a memo


@dataclass
class Checkup:
    """What the checks of one root share: its configuration, the machine, the PATHs agents start with, and the
    answers already had (one ``auth status`` per CLI and environment)."""

    config: Config
    host: Host
    paths: list[tuple[str, str]] = field(default_factory=list)  # (whose, PATH)
    logins: dict[tuple[str, ...], Answer] = field(default_factory=dict)
    probed: set[int] = field(default_factory=set)  # devices a write probe passed on


def agent_paths(config: Config, host: Host) -> list[tuple[str, str]]:
    """Each distinct PATH an agent of this root may be started with, and whose it is."""
    found = [("this shell", os.environ.get("PATH", os.defpath))]
    pid = host.running_orchestrator(config.state_dir)
    if pid is not None:
        running = host.environ_path(pid)
        if running is not None:
            found.append((f"the running orchestrator (pid {pid})", running))
    service = unit.installed_path(config.root)
    if service is not None:
        found.append((f"the service {unit.unit_name(config.root)}", service))
    distinct: dict[str, list[str]] = {}
    for whose, path in found:
        distinct.setdefault(path, []).append(whose)
    return [(" and ".join(whose), path) for path, whose in distinct.items()]


def check_role(checkup: Checkup, role: Role) -> list[Finding]:
    """Every check of one role, in the order a person fixes them."""
    command, program = check_command(checkup, role)
    found = [command]
    if program is not None:
        found.append(check_login(checkup, role, program))
    found.append(check_folders(checkup.config, role, checkup.probed))
    found.append(check_prompt(checkup.config, role))
    if role.context:
        found.append(check_context(checkup.config, role))
    return found


# ---------------------------------------------------------------- the command
def check_command(checkup: Checkup, role: Role) -> tuple[Finding, Program | None]:
    """The role's program on every PATH (or where its backend finds it) and the backend's start-up checks, with
    the program's version when the backend asks it; with it, the program when its backend checks a login."""
    config = checkup.config
    cwd = role_folder(config.root, role.cwd)
    if not os.path.isdir(cwd):
        detail = f"{config.path}: roles.{role.name}.cwd: folder {cwd} does not exist"
        return fail("command", detail, "create it or fix the role's `cwd`", role.name), None
    backend = backend_for(role)
    program = backend.program(config, role)
    key = f"{config.path}: roles.{role.name}.{program.key}"
    try:
        if program.on_path:
            missing, resolved = _resolve_everywhere(checkup, role, cwd)
            if missing is not None:
                return missing, None
        else:
            resolved = {program.path: [program.found_by]} if program.path else {}
        check(config, role)  # as `up` (for Claude Code: the CLI this shell finds answers --version)
        version = program.version
        versions = {path: version(path, key) for path in resolved} if version is not None else {}
    except ConfigError as exc:
        return from_message("command", str(exc), f"fix the role's `{program.key}`", role.name), None
    shown = "; ".join(
        f"{path} ({', '.join(whose)})" + (f": {versions[path]}" if path in versions else "")
        for path, whose in resolved.items()
    )
    name = program.name
    if dry_run():
        name += f" ({SPAWN_CMD_ENV})"
    if program.login is None:
        return ok("command", f"{name} -> {shown}; {program.verdict}", role.name), None
    return ok("command", f"{name} -> {shown}", role.name), replace(program, path=next(iter(resolved)))


def _resolve_everywhere(checkup: Checkup, role: Role, cwd: Path) -> tuple[Finding | None, dict[str, list[str]]]:
    """Where each PATH finds the role's program: {path: [whose PATH finds it there]}, or the failure of the
    first PATH that does not find it."""
    config = checkup.config
    program = role.command[0]
    resolved: dict[str, list[str]] = {}
    for whose, search in checkup.paths or [("this shell", os.environ.get("PATH", os.defpath))]:
        path = resolve_command(role.command, cwd) if os.sep in program else shutil.which(program, path=search)
        if path is None:
            return fail("command", missing_command(config, role, whose), _missing_fix(whose), role.name), {}
        resolved.setdefault(path, []).append(whose)
    return None, resolved


def missing_command(config: Config, role: Role, whose: str = "this shell") -> str:
    """Why a role's program cannot be started, for a person (``up`` refuses with it too)."""
    program = role.command[0]
    if os.sep in program:
        where = "is not an executable file"
    else:
        where = "not found on PATH" if whose == "this shell" else f"not found on the PATH of {whose}"
    return f"{config.path}: roles.{role.name}.command: {program!r} {where}"


def _missing_fix(whose: str) -> str:
    fix = f"install it, fix the role's `command` (an absolute path works under any PATH), or set {SPAWN_CMD_ENV}"
    if whose.startswith("the service"):
        return fix + "; or install the service again from a shell whose PATH finds it (`orchestrator service install`)"
    if whose.startswith("the running"):
        return fix + "; or restart the orchestrator from a shell whose PATH finds it"
    return fix + " for a dry run"


# ---------------------------------------------------------------- the login
def check_login(checkup: Checkup, role: Role, program: Program) -> Finding:
    """What the role's program says of its login, asked once per program and role environment."""
    assert program.login is not None and program.path is not None  # check_command returns only such a program
    key = (program.path, json.dumps(sorted(role.env.items())))
    if key not in checkup.logins:
        checkup.logins[key] = program.login(program.path, {**os.environ, **role.env})
    found = checkup.logins[key]
    return Finding("login", found.status, found.detail, found.fix, role.name)


# ---------------------------------------------------------------- the memo folders
def check_folders(config: Config, role: Role, probed: set[int] | None = None) -> Finding:
    """The role's memo folders can be written (and the missing ones made): each that exists is a folder this
    user may write in, by ``access(2)``, and a file is written and removed on each file system, which finds
    what access cannot see (a server that squashes root, a full disk or quota). ``probed``: the devices
    already written on, shared by the checks of one run."""
    probed = set() if probed is None else probed
    folder = config.role_dir(role.name)
    missing = []
    for path in (folder, *(folder / name for name in MEMO_FOLDERS)):
        if path != folder and not os.path.lexists(path):
            missing.append(path.name)
            continue
        problem = writable_problem(path, probed)
        if problem:
            return fail("folders", *problem, role=role.name)
    there = [name for name in MEMO_FOLDERS if name not in missing]
    said = [f"{', '.join(there)} writable"] if there else []
    later = [name for name in missing if name == HELD]  # made by the first hold, as waiting/ by the first question
    said += [f"{', '.join(n for n in missing if n != HELD)} made at start"] if len(missing) > len(later) else []
    said += [f"{HELD} made when a memo is first held"] if later else []
    return ok("folders", f"{folder.relative_to(config.root)}/: {'; '.join(said)}", role.name)


def writable_problem(path: Path, probed: set[int] | None = None) -> tuple[str, str] | None:
    """Why this user cannot make or write files in ``path`` (or, when it is missing, make it), and what to do;
    None when it can. The write probe is skipped on a device in ``probed`` (and each one probed is added)."""
    access = "give this user write access to it (chown or chmod), or run the orchestrator as its owner"
    target = path
    while True:  # a missing folder is made by `up`: its nearest existing parent must be writable
        try:
            info = target.stat()
            break
        except (FileNotFoundError, NotADirectoryError):
            if target.is_symlink():
                return (
                    f"{target} is a broken symlink, not a folder",
                    "fix the link, or remove it (`up` makes the folder)",
                )
            if target.parent == target:
                return f"no folder of {path} exists", access
            target = target.parent
        except OSError as exc:
            return f"cannot look at {target}: {exc.strerror or exc}", access
    if not stat.S_ISDIR(info.st_mode):
        return f"{target} is a file, not a folder", "move it away (`up` makes the folder)"
    if not os.access(target, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
        return f"{target} is not writable by this user (uid {os.geteuid()})", access
    device = info.st_dev
    if probed is not None and device in probed:
        return None
    probe = target / PROBE_NAME.format(pid=os.getpid())
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.close(fd)
    except FileExistsError:
        pass  # a probe of this pid left behind: it was written once, and goes now
    except OSError as exc:
        return f"cannot write in {target}: {exc.strerror or exc}", access
    with contextlib.suppress(OSError):
        os.unlink(probe)
    if probed is not None:
        probed.add(device)
    return None


# ---------------------------------------------------------------- prompt and context
def check_prompt(config: Config, role: Role) -> Finding:
    """The role's prompt template reads and uses known placeholders only (as ``up`` checks)."""
    try:
        load_template(config.root / role.prompt)
    except ConfigError as exc:
        return from_message("prompt", str(exc), "make it a readable UTF-8 file, or fix the role's `prompt`", role.name)
    return ok("prompt", role.prompt, role.name)


def check_context(config: Config, role: Role) -> Finding:
    """Every context file of the role is there, readable, UTF-8, and within ``context_max_bytes`` together."""
    key = f"{config.path}: roles.{role.name}.context"
    try:
        text = read_context(config, role)
    except ContextProblem as exc:
        return fail("context", f"{key}: {exc}", "create it, fix the list, or raise context_max_bytes", role.name)
    size = len(text.encode("utf-8"))
    return ok(
        "context", f"{len(role.context)} files, {size} bytes of context_max_bytes {role.context_max_bytes}", role.name
    )
