"""The doctor's checks of each role: its command (found on every PATH that starts it, and Claude Code when it
should be), its login, its memo folders, its prompt and its context files.

The PATHs are those an agent of this root is started with: this shell's (a manual ``up``), the running
orchestrator's (read from ``/proc``) and the installed service's (its unit's ``Environment=PATH=``); a
program missing from any of them fails, naming which.

The login is asked of the CLI itself: ``claude auth status --json`` reads the local credentials (tried with
2.1.332 under strace: a JSON object with ``loggedIn``, exit 1 when it is false; logged out or with an API key
it connects nowhere, with a claude.ai login it looks the account up). Non-essential traffic is off for it.
The ``--json`` also keeps a CLI too old to have ``auth`` from taking the words for a prompt: it refuses the
unknown option. Whatever else it answers, or silence past ``AUTH_SECONDS``, is a ``warn``: the doctor cannot
tell.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.agents import claude_cli
from orchestrator.agents.claude_errors import one_line
from orchestrator.agents.spec import resolve_command, role_folder
from orchestrator.config import SPAWN_CMD_ENV, Config, Role
from orchestrator.continuity.context import ContextProblem, read_context
from orchestrator.core.errors import ConfigError
from orchestrator.intake.memo import FOLDERS, HELD
from orchestrator.ops import unit
from orchestrator.ops.doctor.findings import Finding, fail, from_message, ok, warn
from orchestrator.ops.doctor.host import Host
from orchestrator.prompts import load_template

AUTH_SECONDS = 10.0
MEMO_FOLDERS = (*FOLDERS, HELD)
QUIET_CLI = {"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
PROBE_NAME = ".orchestrator-doctor-{pid}.tmp"  # hidden and .tmp: never taken for a memo


@dataclass
class Checkup:
    """What the checks of one root share: its configuration, the machine, the PATHs agents start with, and the
    answers already had (one ``auth status`` per CLI and environment)."""

    config: Config
    host: Host
    paths: list[tuple[str, str]] = field(default_factory=list)  # (whose, PATH)
    logins: dict[tuple[str, ...], Finding] = field(default_factory=dict)
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
    command, cli = check_command(checkup, role)
    found = [command]
    if cli is not None:
        found.append(check_login(checkup, role, cli))
    found.append(check_folders(checkup.config, role, checkup.probed))
    found.append(check_prompt(checkup.config, role))
    if role.context:
        found.append(check_context(checkup.config, role))
    return found


# ---------------------------------------------------------------- the command
def check_command(checkup: Checkup, role: Role) -> tuple[Finding, str | None]:
    """The role's program on every PATH, and for a Claude role the CLI's ``--version``; with it, the CLI's path
    when the role runs Claude Code (for the login check)."""
    config = checkup.config
    cwd = role_folder(config.root, role.cwd)
    if not os.path.isdir(cwd):
        detail = f"{config.path}: roles.{role.name}.cwd: folder {cwd} does not exist"
        return fail("command", detail, "create it or fix the role's `cwd`", role.name), None
    claude = role.backend == "sdk" or claude_cli.is_claude_command(role.command)
    key = f"{config.path}: roles.{role.name}.{'cli_path' if role.backend == 'sdk' else 'command'}"
    try:
        if role.backend == "sdk":
            cli = claude_cli.sdk_cli_path(role, config.root)
            resolved = {cli: ["cli_path" if role.cli_path else "the sdk's own choice"]} if cli else {}
        else:
            missing, resolved = _resolve_everywhere(checkup, role, cwd)
            if missing is not None:
                return missing, None
        claude_cli.check_role(config, role)  # as `up`: the CLI this shell finds answers --version; no bypass as root
        versions = {path: claude_cli.check_version(path, key) for path in resolved} if claude else {}
    except ConfigError as exc:
        return from_message("command", str(exc), "fix the role's `command` or `cli_path`", role.name), None
    shown = "; ".join(
        f"{path} ({', '.join(whose)})" + (f": {versions[path]}" if claude else "") for path, whose in resolved.items()
    )
    name = "the sdk's CLI" if role.backend == "sdk" else role.command[0]
    if os.environ.get(SPAWN_CMD_ENV, "").strip():
        name += f" ({SPAWN_CMD_ENV})"
    if not claude:
        return ok("command", f"{name} -> {shown}; not Claude Code: its exit status is the verdict", role.name), None
    return ok("command", f"{name} -> {shown}", role.name), next(iter(resolved))


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
def check_login(checkup: Checkup, role: Role, cli: str) -> Finding:
    """The Claude CLI of the role has credentials: an API key in its environment, or what ``auth status`` says."""
    env = {**os.environ, **role.env}
    if env.get("ANTHROPIC_API_KEY"):
        return ok("login", "ANTHROPIC_API_KEY is set: the CLI uses it (auth status not asked)", role.name)
    key = (cli, env.get("HOME", ""), env.get("CLAUDE_CONFIG_DIR", ""), json.dumps(sorted(role.env.items())))
    if key not in checkup.logins:
        checkup.logins[key] = auth_status(cli, env)
    found = checkup.logins[key]
    return Finding(found.check, found.status, found.detail, found.fix, role.name)


def auth_status(cli: str, env: dict[str, str]) -> Finding:
    """What ``<cli> auth status --json`` says of the login, as a finding (its role filled in by the caller)."""
    asked = f"`{shlex.quote(cli)} auth status`"
    login_fix = (
        f"run `{shlex.quote(cli)} auth login` as the user the orchestrator runs as, or set ANTHROPIC_API_KEY "
        "in the role's `env` or the orchestrator's environment"
    )
    cannot_tell = f"run {asked} yourself (a CLI older than `claude auth` cannot answer it)"
    try:
        done = subprocess.run(
            [cli, "auth", "status", "--json"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=AUTH_SECONDS,
            stdin=subprocess.DEVNULL,
            env={**env, **QUIET_CLI},
        )
    except subprocess.TimeoutExpired:
        return warn("login", f"cannot tell: {asked} did not answer within {AUTH_SECONDS:g}s", cannot_tell)
    except OSError as exc:
        return warn("login", f"cannot tell: {asked} cannot run ({exc.strerror or exc})", cannot_tell)
    answer: object = None
    with contextlib.suppress(ValueError):
        answer = json.loads(done.stdout)
    if not isinstance(answer, dict) or not isinstance(answer.get("loggedIn"), bool):
        said = one_line(done.stdout.strip() or done.stderr.strip() or "nothing", 160)
        return warn("login", f"cannot tell: {asked} exited {done.returncode} and said {said}", cannot_tell)
    method = answer.get("authMethod")
    if answer["loggedIn"]:
        plan = answer.get("subscriptionType")
        how = ", ".join(str(part) for part in (method, plan) if part)
        return ok("login", "logged in" + (f" ({how})" if how else ""))
    provider = answer.get("apiProvider")
    if provider not in (None, "firstParty"):
        return warn(
            "login",
            f"the CLI uses {provider}, whose credentials {asked} does not check",
            "make sure they are in the orchestrator's environment (try one `claude -p` by hand)",
        )
    return fail("login", f"not logged in ({asked} says loggedIn: false)", login_fix)


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
    said += [f"{', '.join(missing)} made at start"] if missing else []
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
