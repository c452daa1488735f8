"""The ``codex`` backend: OpenAI's Codex CLI, ``codex exec --json`` with the prompt on its standard input.

It is the command backend with Codex's reading (``codex_events.CodexOutput``: the verdict from its events, not its
exit status), its role keys as arguments (``model``, ``sandbox``, ``config``, ``profile``), a retry that resumes
its thread (``codex exec resume``), a tell kept for the end of a turn and carried on in the same thread (``NextTurn``), and its checks: the CLI found and recent enough, and credentials it can use
(``codex login status``, an API key, or the ``env_key`` of the model provider the role selects). A ``command``
role whose program is ``codex`` with ``exec --json`` is read the same way; without ``--json`` its exit status
is its verdict.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from orchestrator.agents import procs, told
from orchestrator.agents.backends.base import Program
from orchestrator.agents.backends.codex_events import CodexOutput
from orchestrator.agents.backends.codex_program import Choice, check_version, login
from orchestrator.agents.backends.codex_rollout import codex_home
from orchestrator.agents.backends.command import check_program
from orchestrator.agents.command import (
    adopt_command,
    earlier_processes,
    launch_command,
    recorded_command,
    start_command,
)
from orchestrator.agents.handle import Agent, OnExit, Reader, Transport
from orchestrator.agents.keeper import locate as locate_keeper
from orchestrator.agents.local import record_path
from orchestrator.agents.spec import LaunchSpec, resolve_command, role_folder
from orchestrator.config import Config, Role
from orchestrator.core.agent import Capabilities
from orchestrator.core.errors import ConfigError

STALL_DEFAULT = 600.0  # --json writes an event at every item
JSON = Capabilities(session=True, resume=True, tell=True, tokens=True, usage_limits=True)
EPHEMERAL = Capabilities(  # --ephemeral keeps no thread: nothing to resume or tell
    tokens=True, usage_limits=True, instead="drop --ephemeral from its command: Codex then takes a tell after its turn"
)
PLAIN = Capabilities(instead="add --json to its command: Codex then takes a tell after its turn")
_PROVIDER = re.compile(r"^model_provider\s*=\s*\"?([\w.-]+)\"?$")
_ENV_KEY = re.compile(r"env_key\s*=\s*\"([A-Za-z_][A-Za-z0-9_]*)\"")


def command_of(role: Role) -> list[str]:
    """The role's ``codex exec`` command (``CODEX_COMMAND`` unless it sets one) with its keys as arguments; a key
    its command already gives is left out (``conflict`` refuses one it gives otherwise). A role with the default
    command has a ``sandbox`` (``DEFAULT_SANDBOX`` unless it names one). The prompt's ``-`` stays last."""
    argv = list(role.command)
    tail = [argv.pop()] if argv and argv[-1] == "-" else []
    if role.model and not _gives(argv, "-m", "--model"):
        argv += ["--model", role.model]
    if role.sandbox and not _gives(argv, "-s", "--sandbox"):
        argv += ["--sandbox", role.sandbox]
    if role.profile and not _gives(argv, "-p", "--profile"):
        argv += ["--profile", role.profile]
    for key, value in role.config.items():
        argv += ["-c", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    return argv + tail


def _gives(argv: list[str], *flags: str) -> bool:
    return _given(argv, *flags) is not None


def _given(argv: list[str], *flags: str) -> str | None:
    """The value ``argv`` gives one of ``flags`` (``-m X``, ``--model X``, ``--model=X``); None when it gives none."""
    for index, arg in enumerate(argv):
        if arg in flags:
            return argv[index + 1] if index + 1 < len(argv) else ""
        for flag in flags:
            if flag.startswith("--") and arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


def conflict(role: Role) -> str | None:
    """A key of the role that its own command gives another value (so one of the two would be ignored: a sandbox
    that fails open, a model priced as another), said for a person; None when there is none."""
    for key, value, flags in (("sandbox", role.sandbox, ("-s", "--sandbox")), ("model", role.model, ("-m", "--model"))):
        given = _given(list(role.command), *flags)
        if value and given is not None and given != value:
            return f"{key}: {value} is not what its command gives ({flags[-1]} {given}); remove one of the two"
    return None


def reads_json(role: Role) -> bool:
    """Whether its agent writes Codex's JSON events (``codex exec --json``)."""
    argv = command_of(role)
    return "exec" in argv and "--json" in argv


def keeps_thread(role: Role) -> bool:
    """Whether Codex keeps the agent's thread to resume (``--ephemeral`` keeps none: no tell, no resumed retry)."""
    return "--ephemeral" not in command_of(role)


def resumed(argv: list[str], thread_id: str) -> list[str]:
    """``argv`` carrying on thread ``thread_id``: ``codex exec [its options] resume <thread> -``."""
    argv = list(argv)
    tail = [argv.pop()] if argv and argv[-1] == "-" else ["-"]
    return [*argv, "resume", thread_id, *tail]


def model_of(role: Role) -> str | None:
    """The model a role's agent asks for: its ``model``, else its command's ``-m``/``--model``."""
    if role.model:
        return role.model
    argv = role.command
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag in ("-m", "--model"):
            return value
    for arg in argv:
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
    return None


def choice_of(role: Role) -> Choice:
    """What the role picks over Codex's own ``config.toml``: a model provider (``model_provider`` through ``-c`` or
    ``config``) and a profile (``profile``, or its command's ``-p``)."""
    overrides = [b for a, b in zip(role.command, role.command[1:], strict=False) if a in ("-c", "--config")]
    overrides += [f"{k}={v}" for k, v in role.config.items()]
    provider = next((m.group(1) for o in overrides if (m := _PROVIDER.match(o.strip()))), None)
    return Choice(provider, role.profile or _given(list(role.command), "-p", "--profile") or None)


def provider_key(role: Role) -> str | None:
    """The variable the ``env_key`` of the model provider the role's command or ``config`` selects names."""
    overrides = [b for a, b in zip(role.command, role.command[1:], strict=False) if a in ("-c", "--config")]
    overrides += [f"{k}={v}" for k, v in role.config.items()]
    chosen = next((m.group(1) for o in overrides if (m := _PROVIDER.match(o.strip()))), None)
    if chosen is None:
        return None
    for override in overrides:
        if override.startswith(f"model_providers.{chosen}"):
            found = _ENV_KEY.search(override)
            if found:
                return found.group(1)
    return None


class CodexBackend:
    """OpenAI's Codex CLI as a role's program."""

    name = "codex"

    def capabilities(self, role: Role) -> Capabilities:
        if not reads_json(role):
            return PLAIN
        return JSON if keeps_thread(role) else EPHEMERAL

    def stall_default(self, role: Role) -> float | None:
        return STALL_DEFAULT if reads_json(role) else None

    def check(self, config: Config, role: Role) -> None:
        if config.executor.kind == "ray":  # the Ray spawner starts the role's command as written, read by its status
            raise ConfigError(
                f"{config.path}: roles.{role.name}: a codex role is not yet supported with `executor: ray` (its "
                "model, sandbox, thread and reading would be lost on the worker); use the local executor"
            )
        problem = conflict(role)
        if problem:
            raise ConfigError(f"{config.path}: roles.{role.name}.{problem}")
        check_price(config, role)
        role = _with_command(role)
        check_program(config, role)
        if Path(role.command[0]).name != "codex":
            return  # another program stands in for it (ORCHESTRATOR_SPAWN_CMD): only found, not asked
        path = resolve_command(role.command, role_folder(config.root, role.cwd))
        assert path is not None  # checked above
        check_version(path, f"{config.path}: roles.{role.name}.command")
        answer = login(path, {**os.environ, **role.env}, provider_key(role), choice_of(role))
        if answer.status == "fail":
            raise ConfigError(f"{config.path}: roles.{role.name}: {answer.detail}; {answer.fix}")

    def program(self, config: Config, role: Role) -> Program:
        key, choice = provider_key(role), choice_of(role)
        return Program(
            "command",
            command_of(role)[0],
            version=check_version,
            login=lambda cli, env: login(cli, env, key, choice),
        )

    async def start(self, spec: LaunchSpec, on_exit: OnExit, keeper: Path | None) -> Agent:
        caps = self.capabilities(spec.role)
        if not caps.tokens:
            return await start_command(_spec(spec), on_exit, keeper, capabilities=caps)
        followup = NextTurn(spec, keeper)
        return await start_command(_spec(spec), on_exit, keeper, capabilities=caps, reading=_reading, followup=followup)

    def adopt(self, spec: LaunchSpec, ref: procs.ProcRef, keeper_pid: int | None) -> Agent:
        caps = self.capabilities(spec.role)
        if not caps.tokens:
            return adopt_command(_spec(spec), ref, keeper_pid, capabilities=caps)
        # a tell to it is carried on as a next turn, like the first start's: in the environment the live turn
        # was started with (its marks, its memos), which the record does not keep; without it, no tell
        env = procs.environ(ref.pid)
        followup = None if env is None else NextTurn(dataclasses.replace(spec, env=env, adopted=False), locate_keeper())
        agent = adopt_command(_spec(spec), ref, keeper_pid, capabilities=caps, reading=_taken_back, followup=followup)
        agent.told = told.read(spec)  # told before the restart: carried on at its turn's end (or said lost)
        return agent

    def recorded(self, spec: LaunchSpec, pid: int | None) -> Agent:
        spec = _spec(spec)
        caps = self.capabilities(spec.role)
        agent = recorded_command(spec, capabilities=caps, reading=_taken_back if caps.tokens else None)
        agent.told = told.read(spec)  # its turn ended while we were down: what was told to it is said lost
        return agent


def _reading(spec: LaunchSpec, offset: int, **more: Any) -> CodexOutput:
    """The reader of an attempt's events from ``offset`` of its log, priced by its role's model, with the Codex home
    whose rollout says what a turn that did not complete spent; ``more``: the reader's other settings."""
    price = spec.role.token_price(model_of(spec.role))
    kept = keeps_thread(spec.role)
    return CodexOutput(spec.log_path, offset, price=price, thread_kept=kept, rollouts=codex_home(spec.env), **more)


def _taken_back(spec: LaunchSpec, offset: int) -> CodexOutput:
    """An attempt taken back at a restart: its running turn's output, counted after the turns its earlier processes
    completed (told turns; its usage is already the thread's total), which its end reads off the loop."""
    return _reading(spec, offset, before=lambda: earlier_processes(spec))


def resume_spec(spec: LaunchSpec, thread_id: str, prompt: str) -> LaunchSpec:
    """``spec`` (a codex role's, as the launcher gave it) carrying on thread ``thread_id`` with ``prompt`` on its
    standard input: ``codex exec [its options] resume <thread> -``. A tell's next turn uses it, and so can an answer
    to a question the agent asked."""
    return _spec(dataclasses.replace(spec, resume=thread_id, prompt=prompt))


class NextTurn:
    """A tell kept during a ``codex exec --json`` turn, carried on once that turn's process has exited: the same
    attempt goes on with ``codex exec resume <thread>`` and the told text as the prompt (``handle.FollowUp``)."""

    def __init__(self, spec: LaunchSpec, keeper: Path | None) -> None:
        self.spec = spec  # as the launcher gave it: its role's own command, before its keys are added
        self.keeper = keeper

    def keep(self, texts: list[str]) -> None:
        told.write(self.spec, texts)

    async def next_turn(self, agent: Agent, session_id: str, text: str) -> tuple[Transport, Reader | None]:
        earlier = dict(agent.result)  # Codex's usage is the thread's running total: the next turn's carries it on

        def reading(spec: LaunchSpec, offset: int) -> CodexOutput:
            return _reading(spec, offset, earlier=earlier)

        if self.keeper is not None:  # the ended turn's exit record: a restart must not take it for this turn's end
            with contextlib.suppress(FileNotFoundError):
                record_path(self.spec).unlink()
        # the tells go with this turn's prompt: a restart once it runs must not give them again
        told.write(self.spec, [])
        process, reader, writing = await launch_command(
            resume_spec(self.spec, session_id, text), self.keeper, reading=reading
        )
        agent.keep(writing)
        return process, reader


def check_price(config: Config, role: Role) -> None:
    """A budget counts a codex role's estimated cost, so its model needs a price in ``prices``."""
    if not (role.backend == "codex" or reads_json(role)):
        return
    if role.budget.per_run_usd:  # nothing would stop a run at it: fail closed rather than promise it
        raise ConfigError(
            f"{config.path}: roles.{role.name}.budget.per_run_usd: Codex reports no spend while it runs, so nothing "
            "can stop a run at a per-run budget; remove it and use budget.per_day_usd (counted from `prices`)"
        )
    if not (role.budget.per_day_usd or config.budget.per_day_usd):
        return
    model = model_of(role)
    if model is None:
        raise ConfigError(
            f"{config.path}: roles.{role.name}.model: a budget counts this role's cost, estimated from `prices`, "
            "but the role names no model (`model`, or -m in its command); set one, and its price under `prices`"
        )
    if role.token_price(model) is None:
        raise ConfigError(
            f"{config.path}: prices: a budget counts role {role.name}'s cost, but model {model!r} has no price; "
            f"add `prices: {{{model}: {{input: USD, cached_input: USD, output: USD}}}}` (dollars per million tokens)"
        )


def _with_command(role: Role) -> Role:
    """The role with its whole ``codex`` command (its keys as arguments) as its ``command``."""
    return role.model_copy(update={"command": command_of(role)})


def _spec(spec: LaunchSpec) -> LaunchSpec:
    """The spec whose role runs its whole command, resuming its thread when the retry carries it on; the
    agent finds the ``orchestrator`` program by ORCHESTRATOR_BIN (Codex's ``bash -lc`` may reset PATH)."""
    role = _with_command(spec.role)
    if spec.resume and reads_json(spec.role):
        role = role.model_copy(update={"command": resumed(role.command, spec.resume)})
    env = dict(spec.env)
    if "ORCHESTRATOR_BIN" not in env and our_program() is not None:
        env["ORCHESTRATOR_BIN"] = str(our_program())
    return dataclasses.replace(spec, role=role, env=env)


@functools.cache
def our_program() -> Path | None:
    """The ``orchestrator`` program beside the interpreter that runs us (a venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "orchestrator"
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("orchestrator")
    return Path(found) if found else None
