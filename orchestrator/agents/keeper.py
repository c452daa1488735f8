"""The per-attempt keeper: a small C program between the orchestrator and each ``command`` agent.

It forks the agent into a session of its own, waits for it and writes its exit
status to ``.orchestrator/runs/<run_id>/<attempt>.exit`` before it exits, so the
status outlives an orchestrator that was killed meanwhile; past the role's
timeout (plus grace and a margin, so a live orchestrator always acts first) it
stops the agent itself. The binary is built from ``keeper.c`` by ``make`` (or on
first use, with ``cc``); without a compiler agents run without it, as before.

A C program, not ``/bin/sh`` or a forked Python: measured on the 2-core VM (see
bench/RESULTS.md), the keeper adds well under a millisecond to a start, where a
shell wrapper cannot tell an exit status from a signal nor keep its stdin off the
agent's prompt pipe, and a fork of the orchestrator copies a 40 MB process with
threads.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator.agents.posix_child import fd_ready

SOURCE = Path(__file__).with_name("keeper.c")
BINARY = Path(__file__).with_name("orchestrator-keeper")
MARGIN = 1.0  # seconds past timeout + grace before the keeper acts on its own
MARKS = ("ORCHESTRATOR_RUN_ID", "ORCHESTRATOR_ROOT", "ORCHESTRATOR_ATTEMPT")


def build(force: bool = False) -> Path | None:
    """The keeper binary, compiled now if it is missing or older than its source; None without a compiler."""
    try:
        if not force and BINARY.exists() and BINARY.stat().st_mtime >= SOURCE.stat().st_mtime:
            return BINARY
    except OSError:
        return None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    fd, tmp = tempfile.mkstemp(prefix=".keeper-", dir=BINARY.parent)
    os.close(fd)
    try:
        for flags in (["-static"], []):  # static when the C library allows it: no dynamic loader at each start
            done = subprocess.run(
                [compiler, "-O2", "-Wall", *flags, "-o", tmp, str(SOURCE)], capture_output=True, text=True, check=False
            )
            if done.returncode == 0:
                break
        else:
            return None
        os.chmod(tmp, 0o755)
        os.replace(tmp, BINARY)  # atomic: concurrent builds each install a whole binary
        return BINARY
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def exit_path(state_dir: Path, run_id: int, attempt: int) -> Path:
    """Where the keeper of this attempt leaves its agent's exit status."""
    return state_dir / "runs" / str(run_id) / f"{attempt}.exit"


@dataclass(frozen=True)
class ExitRecord:
    """An agent's end as its keeper saw it: the return code as asyncio gives it (negative: a signal)."""

    returncode: int
    timed_out: bool


def read_exit(path: Path) -> ExitRecord | None:
    """The keeper's record, or None when there is none (yet) or it cannot be read."""
    try:  # os-level: it is read at the end of every run, and pathlib's text layer cost more than the read
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, 256)
        finally:
            os.close(fd)
        words = data.decode("ascii").split()
        kind, number = words[0], int(words[1])
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None
    if kind not in ("exit", "signal"):
        return None
    return ExitRecord(number if kind == "exit" else -number, "timeout" in words[2:])


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
    """What a start's status pipe said, each an errno or a pid (None: not said).

    ``agent``: the agent's pid, once exec'd; ``exec_errno``: the agent's exec failed; ``log_errno``: the run's
    log could not be opened; ``cwd_errno``: the agent's folder could not be entered."""

    agent: int | None = None
    exec_errno: int | None = None
    log_errno: int | None = None
    cwd_errno: int | None = None


_STATUS_FIELDS = {"P": "agent", "E": "exec_errno", "L": "log_errno", "C": "cwd_errno"}


async def read_status(fd: int, into: bytearray | None = None) -> Status:
    """Read a start's status pipe to its end (every writer has closed it); what is read gathers in ``into``,
    so a caller cancelled meanwhile still has it."""
    data = bytearray() if into is None else into
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


def main() -> int:
    """``python -m orchestrator.agents.keeper``: build the binary (``make`` calls this)."""
    if build(force="--force" in sys.argv) is None:
        sys.exit("orchestrator: could not build the keeper (no C compiler?); agents run without it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
