"""Signals and preflight checks: commands run off the loop, each with a timeout, their outcome returned whole.

A command is an argv (never a shell), run from the project root in a process group of its own, so a timeout
kills whatever it started. Its trimmed standard output is its news; a non-zero exit, a timeout or a failure
to start is a failure, described by the command and its last line of stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from orchestrator.agents import procs

MAX_OUTPUT = 64 * 1024  # a signal's news is a summary; more than this is cut


@dataclass(frozen=True)
class Probe:
    """One command to run: ``kind`` is ``signal`` or ``preflight``, ``name`` the signal's name or the argv."""

    kind: str
    name: str
    argv: tuple[str, ...]
    timeout: float


@dataclass(frozen=True)
class ProbeResult:
    probe: Probe
    ok: bool
    output: str = ""
    problem: str = ""

    @property
    def describe(self) -> str:
        """The failure as one line: which command, what went wrong."""
        return f"{self.probe.kind} {' '.join(self.probe.argv)}: {self.problem}"


async def run_probe(probe: Probe, root: Path) -> ProbeResult:
    """Run one command; never raises for anything the command does."""
    try:
        with procs.spawning():  # asyncio reaps it: the orphan reaper must leave it, from its start on
            proc = await asyncio.create_subprocess_exec(
                *probe.argv,
                cwd=root,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            procs.spare(proc.pid)
    except OSError as exc:
        return ProbeResult(probe, False, problem=f"cannot start: {exc.strerror or exc}")
    try:
        return await _finish(probe, proc)
    finally:
        procs.unspare(proc.pid)


async def _finish(probe: Probe, proc: asyncio.subprocess.Process) -> ProbeResult:
    """The probe's outcome once it exited (killed at its timeout)."""
    try:
        out, err = await asyncio.wait_for(proc.communicate(), probe.timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        return ProbeResult(probe, False, problem=f"timed out after {probe.timeout:g}s")
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    text = out[:MAX_OUTPUT].decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        lines = [line for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
        last = lines[-1].strip() if lines else "no stderr"
        return ProbeResult(probe, False, output=text, problem=f"exit status {proc.returncode}: {last}")
    return ProbeResult(probe, True, output=text)


async def run_probes(probes: list[Probe], root: Path) -> list[ProbeResult]:
    """Every probe at once; results in the order given."""
    return list(await asyncio.gather(*(run_probe(p, root) for p in probes)))
