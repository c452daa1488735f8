"""The ``command`` backend: a role's program started for one attempt, adopted at a restart, or found ended.

The prompt goes to the agent's stdin (or is its last argument, ``prompt_via:
arg``), its output to the run's log; a Claude CLI agent is given the
``claude_cli.LogExplainer``, so its failure reason is what it said, and one writing stream-json the
``claude_cli.StreamReader``, so its figures are recorded and its result decides its end.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from orchestrator.agents import procs
from orchestrator.agents.claude_cli import LogExplainer, StreamReader, cap_arguments, is_claude_command, streams_json
from orchestrator.agents.handle import Agent, OnExit
from orchestrator.agents.local import LocalProcess
from orchestrator.agents.spawn import Launch, start_process
from orchestrator.agents.spec import ARG_MAX_SINGLE, LaunchSpec, SpawnError, resolve_command, role_folder


async def start_command(spec: LaunchSpec, on_exit: OnExit, keeper: Path | None) -> Agent:
    """Start a ``command`` role's agent (under the ``keeper`` binary when there is one); ``on_exit`` is called
    with its verdict when it ends."""
    role = spec.role
    cwd = role_folder(spec.root, role.cwd)
    argv = [*role.command, *cap_arguments(role, spec.extra.get("per_run_usd", role.budget.per_run_usd))]
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
    offset = _output_offset(spec.log_path, header) if is_claude_command(argv) else 0
    explainer = LogExplainer(spec.log_path, offset) if is_claude_command(argv) else None
    reader = None
    if streams_json(role):
        transcript = spec.root / ".orchestrator" / "runs" / str(spec.run_id) / "transcript.jsonl"
        reader = StreamReader(spec.log_path, offset, transcript, role.on_denied)
    stdin = prompt if role.prompt_via == "stdin" else None
    started = await start_process(Launch(spec, executable, argv, spec.env, cwd, header, stdin), keeper)
    agent = Agent(spec, LocalProcess(spec, started.pid, started.ref, started.end), explainer=explainer, reader=reader)
    agent.keep(started.writing)
    agent.watch(on_exit)
    return agent


def _output_offset(log: Path, header: str) -> int:
    """Where this attempt's output will start in the run's log: after what is there and the header."""
    try:
        return os.stat(log).st_size + len(header.encode())
    except FileNotFoundError:
        return len(header.encode())


def adopt_command(spec: LaunchSpec, ref: procs.ProcRef, keeper_pid: int | None) -> Agent:
    """A live agent of an orchestrator that died, watched again once ``watch`` is called."""
    return Agent(spec, LocalProcess.adopted(spec, ref, keeper_pid), **_taken_back(spec))


def recorded_command(spec: LaunchSpec) -> Agent:
    """An attempt whose agent ended while the orchestrator was down: what its keeper's record says."""
    return Agent(spec, LocalProcess.recorded(spec, None), **_taken_back(spec))


def _taken_back(spec: LaunchSpec) -> dict[str, Any]:
    """A Claude CLI agent taken back after a restart is explained, and its stream read, from its own output in
    the run's log: from the end of its attempt's header line on."""
    role = spec.role
    if not is_claude_command(role.command):
        return {}
    offset = attempt_offset(spec.log_path, f"\n=== run {spec.run_id} attempt {spec.attempt}: ")
    parts: dict[str, Any] = {"explainer": LogExplainer(spec.log_path, offset)}
    if streams_json(role):
        transcript = spec.root / ".orchestrator" / "runs" / str(spec.run_id) / "transcript.jsonl"
        parts["reader"] = StreamReader(spec.log_path, offset, transcript, role.on_denied)
    return parts


def attempt_offset(log: Path, header: str) -> int:
    """Where the output after the last ``header`` line of the log starts (0 when it is not there)."""
    try:
        data = log.read_bytes()
    except OSError:
        return 0
    at = data.rfind(header.encode())
    if at < 0:
        return 0
    end = data.find(b"\n", at + 1)
    return len(data) if end < 0 else end + 1
