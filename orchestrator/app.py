"""``orchestrator up``: start-up checks, the one-per-root lock, then the supervisor."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Sequence
from pathlib import Path

from orchestrator.agents import backends, keeper
from orchestrator.agents.spec import ARG_MAX_SINGLE, role_folder
from orchestrator.asks.checks import check_asks
from orchestrator.config import Config, Role, load_config
from orchestrator.console import Console
from orchestrator.continuity.context import check_context
from orchestrator.core.errors import AlreadyRunningError, ConfigError, OrchestratorError
from orchestrator.notify.checks import require_channels
from orchestrator.ops.doctor import Host, start_checks
from orchestrator.ops.executor_switch import check_executor
from orchestrator.prompts import load_template
from orchestrator.supervisor.extension import ExtensionFactory
from orchestrator.workspaces.checks import check_workspaces


def preflight(config: Config) -> None:
    """Every check that must pass before any memo is touched; raises ``ConfigError`` naming what is wrong."""
    check_recovery(config)
    check_web(config)
    require_channels(config)
    check_context(config)
    check_workspaces(config)
    check_asks(config)
    for role in config.roles.values():
        load_template(config.root / role.prompt)
        cwd = role_folder(config.root, role.cwd)
        if not cwd.is_dir():
            raise ConfigError(f"{config.path}: roles.{role.name}.cwd: folder {cwd} does not exist")
        backends.check(config, role)  # its program, and what its kind of agent needs
        check_sizes(config, role)


def check_sizes(config: Config, role: Role) -> None:
    """A role's own ``env`` value or ``command`` argument that Linux cannot pass to a program, or all of them
    with this environment, is the configuration's fault, found at start: at run time it would look like the
    orchestrator's (an internal error that returns the memos and tries again, for ever)."""
    sizes = [(f"env.{key}", len(f"{key}={value}".encode())) for key, value in role.env.items()]
    sizes += [(f"command[{i}]", len(arg.encode())) for i, arg in enumerate(role.command)]
    for key, size in sizes:
        if size >= ARG_MAX_SINGLE:
            raise ConfigError(
                f"{config.path}: roles.{role.name}.{key}: expected at most {ARG_MAX_SINGLE - 1} bytes (the longest "
                f"string Linux passes to a program), got {size}; put long text in a file and pass its path"
            )
    inherited = sum(len(key) + len(value) + 10 for key, value in os.environb.items())  # bytes: any may not be UTF-8
    total = inherited + sum(size + 9 for _, size in sizes)  # each string also costs its pointer and its NUL
    room = os.sysconf("SC_ARG_MAX") - ARG_MAX_SINGLE // 2  # what the orchestrator adds: its marks, the memo list
    if total > room:
        raise ConfigError(
            f"{config.path}: roles.{role.name}.env: expected the role's command and environment with this one to "
            f"fit in {room} bytes (what Linux passes to a program, less the orchestrator's own variables), got "
            f"{total}; put long values in files and pass their paths"
        )


def with_web(config: Config, address: str) -> Config:
    """``up --web [HOST:]PORT`` in force over the file's ``web:``."""
    from orchestrator.config.web import parse_address

    try:
        return config.model_copy(update={"web": parse_address(address, config.web)})
    except ValueError as exc:
        text = exc.errors()[0]["msg"] if hasattr(exc, "errors") else str(exc)
        raise ConfigError(f"orchestrator up --web {address}: {text.removeprefix('Value error, ')}") from None


def check_web(config: Config) -> None:
    """Fail closed: a dashboard asked for (``web:``) needs its server's packages; without them ``up`` says so
    at once rather than run without the dashboard it promised."""
    if config.web is None:
        return
    import importlib.util

    missing = [name for name in ("starlette", "uvicorn", "prometheus_client") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            f"{config.path}: web: the dashboard needs {', '.join(missing)}, not installed here; "
            "`pip install orchestrator` again (they are its dependencies), or remove `web:` to run without it"
        )


def check_recovery(config: Config) -> None:
    """Fail closed: ``recovery: adopt`` promises that a crash repeats no run, and only the keeper's exit records
    keep that promise; without a usable keeper ``up`` refuses to start rather than break it silently."""
    if config.recovery != "adopt" or config.executor.kind != "local":
        return
    found = keeper.find()
    if found.binary is None:
        raise ConfigError(
            f"{config.path}: recovery: adopt needs the keeper, and {found.problem}: without it, every run under way "
            f"when the orchestrator crashes would be run again; {found.remedy}, or set `recovery: restart` in "
            "roles.yaml to accept those reruns"
        )


@contextlib.contextmanager
def root_lock(config: Config):  # type: ignore[no-untyped-def]
    """Hold the project root: a second orchestrator is refused, naming the first one's pid."""
    state = config.state_dir
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o700)
    # flock, as the filelock package does on Linux, without its import (20 ms of every start)
    lock = os.open(state / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    pid_file = state / "pid"
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        try:
            pid = pid_file.read_text().strip()
        except OSError:
            pid = "unknown"
        raise AlreadyRunningError(f"an orchestrator is already running for {config.root} (pid {pid})") from None
    try:
        pid_file.write_text(f"{os.getpid()}\n")
        yield
    finally:
        with contextlib.suppress(OSError):
            pid_file.unlink()
        os.close(lock)  # the lock goes with its descriptor


def run_up(
    root: Path,
    *,
    until_idle: bool = False,
    plain: bool = False,
    host: Host | None = None,
    web: str | None = None,
    more: Sequence[ExtensionFactory] = (),
    rerun_unfinished: bool = False,
) -> int:
    """``host``: what the start checks read of the machine (``ops.doctor.Host``; tests give their own);
    ``web``: ``up --web [HOST:]PORT``, over the file's ``web:``; ``more``: features plugged in after the team's
    (``compose.build_supervisor``; a test's own extension); ``rerun_unfinished``: ``up --rerun-unfinished``, a start
    under another executor than the last one although runs it started are under way (``ops.executor_switch``)."""
    from orchestrator.compose import build_supervisor

    config = load_config(root)
    if web is not None:
        config = with_web(config, web)
    preflight(config)
    warnings = start_checks(config, host)
    with root_lock(config):
        switch = check_executor(config, rerun_unfinished)  # under the lock: no other start reads or writes it
        console = Console(config.state_dir / "orchestrator.log", live=False if plain else None)
        for finding in warnings:
            console.line(f"warning: {finding.text}")
        for line in switch.lines:
            console.line(line)
        more = (*more, switch.record) if switch.record else more
        supervisor = build_supervisor(config, console, until_idle=until_idle, more=more)
        try:
            code = asyncio.run(supervisor.serve())
        except OSError as exc:  # say the inotify instance limit, or a file system without sockets
            console.close()
            raise OrchestratorError(
                f"cannot watch or serve {config.root}: {exc.strerror or exc}"
                + (f" ({exc.filename})" if getattr(exc, "filename", None) else "")
                + "; memos already claimed go back to their inbox at the next start"
            ) from None
        console.line(f"orchestrator exits with status {code}")
        console.close()  # its log file, for a caller that goes on (a test running ``up`` in its own process)
        return code
