"""The per-attempt keeper (``keeper.c``, compiled by ``setup.py``, never here): finding it, its argv, its records.

A C program: it adds well under a millisecond to a start (bench/RESULTS.md), where a shell wrapper cannot tell an exit
status from a signal nor keep its stdin off the agent's prompt pipe, and a fork of the orchestrator copies a 40 MB
process with threads. See docs/operations.md, The keeper.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.agents.posix_child import fd_ready

BINARY = Path(__file__).with_name("orchestrator-keeper")
MARGIN = 1.0  # seconds past timeout + grace before the keeper acts on its own: a live orchestrator acts first
MARKS = ("ORCHESTRATOR_RUN_ID", "ORCHESTRATOR_ROOT", "ORCHESTRATOR_ATTEMPT")
SELF_CHECK_TIMEOUT = 5.0
SWITCH = "ORCHESTRATOR_KEEPER"  # "off": no keeper, as if it were missing (the benchmark's comparison)


NO_COMPILER = "(the package was built without a C compiler, or it was removed since)"
REINSTALL = (
    "install the orchestrator again with a C compiler present (e.g. `apt-get install gcc`, then the same "
    "`pip install`, `pipx install` or `make`)"
)


@dataclass(frozen=True)
class Found:
    """The keeper this process uses: its binary, or None with why there is none and the way to get one (phrases,
    for one line)."""

    binary: Path | None
    problem: str = ""
    remedy: str = REINSTALL


@functools.cache
def find() -> Found:
    """The packaged keeper when it is there and passes its self-check; looked for once per process."""
    if os.environ.get(SWITCH, "on") == "off":
        return Found(None, f"{SWITCH}=off is set", f"unset {SWITCH}")
    if not BINARY.is_file():
        return Found(None, f"there is no keeper binary at {BINARY} {NO_COMPILER}")
    if not os.access(BINARY, os.X_OK):
        return Found(None, f"the keeper {BINARY} is not executable")
    problem = self_check(BINARY)
    return Found(None, problem) if problem else Found(BINARY)


def locate() -> Path | None:
    """The keeper binary to start agents under, or None (see ``find``)."""
    return find().binary


@dataclass(frozen=True)
class RecoveryMode:
    """What a crash of the orchestrator costs in this configuration, for the start-up line and ``status``."""

    recovery: str  # "adopt" or "restart", as configured
    keeper: Path | None
    executor: str = "local"

    @property
    def line(self) -> str:
        if self.executor != "local":
            if self.recovery == "adopt":
                return f"recovery: adopt (executor {self.executor}: runs on the cluster are re-attached at a restart)"
            return f"recovery: restart (executor {self.executor}: runs left on the cluster are halted and repeated)"
        if self.keeper is None:
            return f"recovery: {self.recovery} (no keeper: runs are repeated after a crash)"
        if self.recovery == "adopt":
            return f"recovery: adopt (keeper {self.keeper})"
        return f"recovery: restart (keeper {self.keeper}; runs are repeated after a crash)"

    def to_json(self) -> dict[str, str | None]:
        return {
            "mode": self.recovery,
            "keeper": None if self.keeper is None else str(self.keeper),
            "executor": self.executor,
            "summary": self.line,
        }


def recovery_mode(recovery: str, executor: str) -> RecoveryMode:
    """The mode in force: the configured ``recovery`` and the keeper found (none looked for off this machine)."""
    return RecoveryMode(recovery, locate() if executor == "local" else None, executor)


def self_check(binary: Path) -> str | None:
    """Run ``binary`` once as a keeper of itself (its usage error is the agent); None when it ran and recorded
    the exit, else what went wrong. A few milliseconds: it catches a binary for another machine or C library."""
    with tempfile.TemporaryDirectory(prefix="orchestrator-keeper-check-") as folder:
        record = Path(folder) / "check.exit"
        argv = keeper_argv(binary, record, 0.0, 0.0, -1) + [str(binary)]
        try:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=SELF_CHECK_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            return f"the keeper {binary} did not finish its self-check within {SELF_CHECK_TIMEOUT:g}s"
        except OSError as exc:
            return f"the keeper {binary} cannot be started ({exc.strerror or exc})"
        if read_exit(record) is None:
            said = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
            detail = f"exit status {done.returncode}" + (f": {said[-1]}" if said else "")
            return f"the keeper {binary} fails its self-check ({detail})"
    return None


def exit_path(state_dir: Path, run_id: int, attempt: int) -> Path:
    """Where the keeper of this attempt leaves its agent's exit status."""
    return state_dir / "runs" / str(run_id) / f"{attempt}.exit"


@dataclass(frozen=True)
class ExitRecord:
    """An agent's end as its keeper saw it: the return code as asyncio gives it (negative: a signal)."""

    returncode: int
    timed_out: bool
    at: float | None = field(default=None, compare=False)  # when it was written (the agent's end), epoch seconds


def read_exit(path: Path) -> ExitRecord | None:
    """The keeper's record, or None when there is none (yet) or it cannot be read."""
    try:  # os-level: it is read at the end of every run, and pathlib's text layer cost more than the read
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data, at = os.read(fd, 256), os.fstat(fd).st_mtime
        finally:
            os.close(fd)
        words = data.decode("ascii").split()
        kind, number = words[0], int(words[1])
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None
    if kind not in ("exit", "signal"):
        return None
    return ExitRecord(number if kind == "exit" else -number, "timeout" in words[2:], at)


def keeper_argv(
    binary: Path,
    record: Path,
    kill_after: float,
    grace: float,
    status_fd: int,
    log: tuple[Path, str] | None = None,
    cwd: Path | None = None,
    pass_fds: tuple[int, ...] = (),
) -> list[str]:
    """The keeper's own arguments; the agent's argv follows them. ``log``: (path, header) for the keeper to open;
    ``cwd``: the folder the agent starts in (the keeper enters it); ``pass_fds``: descriptors the agent inherits
    (the keeper closes every other one above 2 but the status pipe)."""
    argv = [str(binary), str(record), f"{kill_after:.3f}", f"{grace:.3f}", str(status_fd)]
    if log is not None:
        argv += ["--log", str(log[0]), log[1]]
    if cwd is not None:
        argv += ["--cwd", str(cwd)]
    for fd in pass_fds:
        argv += ["--fd", str(fd)]
    return argv


def keeper_env(env: dict[str, str]) -> dict[str, str]:
    """The environment for the keeper: the run's marks under ``KEEPER_``, which it strips for the agent."""
    out = dict(env)
    for name in MARKS:
        if name in out:
            out["KEEPER_" + name] = out.pop(name)
    return out


@dataclass(frozen=True)
class Status:
    """What a start's status pipe said (None: not said): the agent's pid once it is exec'd, or the errno of its exec,
    of opening the run's log, or of entering its folder."""

    agent: int | None = None
    exec_errno: int | None = None
    log_errno: int | None = None
    cwd_errno: int | None = None


_STATUS_FIELDS = {"P": "agent", "E": "exec_errno", "L": "log_errno", "C": "cwd_errno"}


async def read_status(fd: int, data: bytearray) -> Status:
    """Read a start's status pipe to its end (every writer has closed it); what is read gathers in ``data``,
    so a caller cancelled meanwhile still has it."""
    os.set_blocking(fd, False)
    while True:
        try:
            chunk = os.read(fd, 256)
        except BlockingIOError:
            await fd_ready(fd)
            continue
        if not chunk:
            break
        data += chunk
    return parse_status(bytes(data))


def parse_status(data: bytes) -> Status:
    """A status pipe's whole text, read."""
    said: dict[str, int] = {}
    for line in data.decode("ascii", "replace").split():
        name = _STATUS_FIELDS.get(line[:1])
        if name is not None and line[1:].isdigit():
            said[name] = int(line[1:])
    return Status(**said)


def is_keeper(pid: int) -> bool:
    """Whether the live process ``pid`` is one of our keepers."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            first = handle.read().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(first) == BINARY.name.encode()
