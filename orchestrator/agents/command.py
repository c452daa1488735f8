"""A role's program as a local agent: started for one attempt, adopted at a restart, or found ended.

What differs between the backends that run a program here (``command``, ``claude``) is handed in by the backend
(``agents/backends/``): the arguments it adds and the ``Reader`` of its output (``reading``), which reads its own
part of the run's log, since a CLI writes its errors and its events there.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.agents import procs
from orchestrator.agents.handle import Agent, FollowUp, OnExit, Reader
from orchestrator.agents.local import LocalProcess
from orchestrator.agents.spawn import Launch, start_process
from orchestrator.agents.spec import ARG_MAX_SINGLE, LaunchSpec, SpawnError, resolve_command
from orchestrator.core.agent import Capabilities

Reading = Callable[[LaunchSpec, int], Reader]  # (the spec, where this attempt's output starts in the log) -> reader


async def start_command(
    spec: LaunchSpec,
    on_exit: OnExit,
    keeper: Path | None,
    *,
    capabilities: Capabilities,
    arguments: Sequence[str] = (),
    reading: Reading | None = None,
    followup: FollowUp | None = None,
) -> Agent:
    """Start a role's program (its ``command``, ``arguments``, then the spec's ``args``) under the ``keeper`` binary
    when there is one; ``on_exit`` is called with its verdict when it ends, read by ``reading``'s reader if any
    (``followup``: how a tell kept during its turn is carried on, as the same attempt)."""
    process, reader, writing = await launch_command(spec, keeper, arguments=arguments, reading=reading)
    agent = Agent(spec, process, capabilities=capabilities, reader=reader, followup=followup)
    agent.keep(writing)
    agent.watch(on_exit)
    return agent


async def launch_command(
    spec: LaunchSpec, keeper: Path | None, *, arguments: Sequence[str] = (), reading: Reading | None = None
) -> tuple[LocalProcess, Reader | None, asyncio.Future[None] | None]:
    """One process of a role's program, started: its transport, the reader of its output (from where it starts in
    the run's log) and the write of its prompt when that is still under way. ``SpawnError`` when it cannot start."""
    role = spec.role
    cwd = spec.cwd
    argv = [*role.command, *arguments, *spec.args]
    shown = [word.replace("\n", "\\n") for word in argv[:8]]  # the log header is one line, whatever the words
    prompt = spec.prompt.encode("utf-8")
    if role.prompt_via == "arg" and spec.prompt:  # an empty prompt is none: a resumed session goes on as it was
        if len(prompt) >= ARG_MAX_SINGLE:
            raise SpawnError(
                f"the prompt is {len(prompt)} bytes, too long for one command-line argument "
                f"(the limit is {ARG_MAX_SINGLE}); use `prompt_via: stdin` for role {role.name}"
            )
        argv.append(spec.prompt)
        shown = [*shown, f"<the prompt, {len(prompt)} bytes>"][:8]  # not written in the log: named by its size
    executable = resolve_command(argv, cwd)
    if executable is None:
        where = "is not an executable file" if os.sep in argv[0] else "not found on PATH"
        raise SpawnError(f"command {argv[0]!r} {where} (role {role.name})")
    header = f"{attempt_header(spec)}{' '.join(shown)}\n"
    reader = None
    if reading is not None:  # its output starts after what the log holds now and the header
        try:
            offset = os.stat(spec.log_path).st_size + len(header.encode())
        except FileNotFoundError:
            offset = len(header.encode())
        reader = reading(spec, offset)
    stdin = prompt if role.prompt_via == "stdin" else None
    process, writing = await start_process(Launch(spec, executable, argv, spec.env, cwd, header, stdin), keeper)
    return process, reader, writing


def adopt_command(
    spec: LaunchSpec,
    ref: procs.ProcRef,
    keeper_pid: int | None,
    *,
    capabilities: Capabilities,
    reading: Reading | None = None,
    followup: FollowUp | None = None,
) -> Agent:
    """A live agent of an orchestrator that died, watched again once ``watch`` is called."""
    process = LocalProcess.adopted(spec, ref, keeper_pid)
    return Agent(spec, process, capabilities=capabilities, reader=_taken_back(spec, reading), followup=followup)


def recorded_command(spec: LaunchSpec, *, capabilities: Capabilities, reading: Reading | None = None) -> Agent:
    """An attempt whose agent ended while the orchestrator was down: what its keeper's record says."""
    process = LocalProcess.recorded(spec, None)
    return Agent(spec, process, capabilities=capabilities, reader=_taken_back(spec, reading))


def attempt_header(spec: LaunchSpec) -> str:
    """How each process of this attempt begins its part of the run's log (its command line follows)."""
    return f"\n=== run {spec.run_id} attempt {spec.attempt}: "


def earlier_processes(spec: LaunchSpec) -> str:
    """What this attempt's processes before its last one wrote in the run's log (a program that runs one process a
    turn: the turns before the running one), or "" when it has had only one."""
    header = attempt_header(spec).encode()
    try:
        data = spec.log_path.read_bytes()
    except OSError:
        return ""
    first, last = data.find(header), data.rfind(header)
    return data[first:last].decode("utf-8", "replace") if 0 <= first < last else ""


def _taken_back(spec: LaunchSpec, reading: Reading | None) -> Reader | None:
    """An agent taken back after a restart is read from its own output in the run's log: from the end of the last
    header line of its attempt on (all of the log when that is not there)."""
    if reading is None:
        return None
    header = attempt_header(spec).encode()
    try:
        data = spec.log_path.read_bytes()
    except OSError:
        data = b""
    at = data.rfind(header)
    end = data.find(b"\n", at + 1) if at >= 0 else -1
    return reading(spec, 0 if at < 0 else len(data) if end < 0 else end + 1)
