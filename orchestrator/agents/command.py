"""The ``command`` backend: a role's program started for one attempt, adopted at a restart, or found ended.

A Claude CLI agent is given a ``claude_cli.ClaudeOutput`` that reads its own part of the run's log, since the CLI
writes its errors and its stream-json events there.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.agents import procs
from orchestrator.agents.claude_cli import ClaudeOutput, cap_arguments, streams_json
from orchestrator.agents.handle import Agent, OnExit
from orchestrator.agents.local import LocalProcess
from orchestrator.agents.spawn import Launch, start_process
from orchestrator.agents.spec import (
    ARG_MAX_SINGLE,
    LaunchSpec,
    SpawnError,
    is_claude_command,
    resolve_command,
    transcript_path,
)


async def start_command(spec: LaunchSpec, on_exit: OnExit, keeper: Path | None) -> Agent:
    """Start a ``command`` role's agent, under the ``keeper`` binary when there is one; ``on_exit`` is called with
    its verdict when it ends."""
    role = spec.role
    cwd = spec.cwd
    argv = [*role.command, *cap_arguments(role, role.budget.per_run_usd), *spec.args]
    prompt = spec.prompt.encode("utf-8")
    if role.prompt_via == "arg":
        if len(prompt) >= ARG_MAX_SINGLE:
            raise SpawnError(
                f"the prompt is {len(prompt)} bytes, too long for one command-line argument "
                f"(the limit is {ARG_MAX_SINGLE}); use `prompt_via: stdin` for role {role.name}"
            )
        argv.append(spec.prompt)
    executable = resolve_command(argv, cwd)
    if executable is None:
        where = "is not an executable file" if os.sep in argv[0] else "not found on PATH"
        raise SpawnError(f"command {argv[0]!r} {where} (role {role.name})")
    header = f"\n=== run {spec.run_id} attempt {spec.attempt}: {' '.join(argv[:8])}\n"
    reader = None
    if is_claude_command(argv):  # its output starts after what the log holds now and the header
        try:
            offset = os.stat(spec.log_path).st_size + len(header.encode())
        except FileNotFoundError:
            offset = len(header.encode())
        reader = _claude_output(spec, offset)
    stdin = prompt if role.prompt_via == "stdin" else None
    process, writing = await start_process(Launch(spec, executable, argv, spec.env, cwd, header, stdin), keeper)
    agent = Agent(spec, process, reader=reader)
    agent.keep(writing)
    agent.watch(on_exit)
    return agent


def adopt_command(spec: LaunchSpec, ref: procs.ProcRef, keeper_pid: int | None) -> Agent:
    """A live agent of an orchestrator that died, watched again once ``watch`` is called."""
    return Agent(spec, LocalProcess.adopted(spec, ref, keeper_pid), reader=_taken_back(spec))


def recorded_command(spec: LaunchSpec) -> Agent:
    """An attempt whose agent ended while the orchestrator was down: what its keeper's record says."""
    return Agent(spec, LocalProcess.recorded(spec, None), reader=_taken_back(spec))


def _claude_output(spec: LaunchSpec, offset: int) -> ClaudeOutput:
    transcript = transcript_path(spec) if streams_json(spec.role) else None
    return ClaudeOutput(spec.log_path, offset, transcript, spec.role.on_denied)


def _taken_back(spec: LaunchSpec) -> ClaudeOutput | None:
    """A Claude CLI agent taken back after a restart is read from its own output in the run's log: from the end
    of the last header line of its attempt on (all of the log when that is not there)."""
    if not is_claude_command(spec.role.command):
        return None
    header = f"\n=== run {spec.run_id} attempt {spec.attempt}: ".encode()
    try:
        data = spec.log_path.read_bytes()
    except OSError:
        data = b""
    at = data.rfind(header)
    end = data.find(b"\n", at + 1) if at >= 0 else -1
    return _claude_output(spec, 0 if at < 0 else len(data) if end < 0 else end + 1)
