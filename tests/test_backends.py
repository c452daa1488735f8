"""Backends as strategies: the registry picks one per role, the core asks it what it can do, and a backend built
from docs/backends.md runs.

The toy backend is the ``python`` block of docs/backends.md, imported as it is written; its ``toy-agent`` is a
small Python script started for real under the real keeper, by the real ``up`` in this process (the registry is
this process's), and through the spawner for the attempts ``up`` cannot show without waiting (a usage limit).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import re
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from conftest import FAKE_CLAUDE, LOUD, Project
from orchestrator.agents import keeper
from orchestrator.agents.backends import backend_for, capabilities, register, stall_seconds, unregister
from orchestrator.agents.backends.command import CommandBackend
from orchestrator.agents.spawner import ProcessSpawner
from orchestrator.agents.spec import LaunchSpec, agent_environment
from orchestrator.app import run_up
from orchestrator.config import Config, Role
from orchestrator.core.agent import AttemptVerdict, Capabilities
from orchestrator.core.errors import ConfigError
from orchestrator.core.events import CancelRequested, TellRequested
from orchestrator.ops.doctor import Host, roles
from replay import Replay

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "backends.md"
DEADLINE = 20.0
TOY_AGENT = """\
import json, sys, time
prompt = sys.stdin.read()
print(json.dumps({"type": "thread", "id": "thread-7"}), flush=True)
if "[limit]" in prompt:
    print(json.dumps({"type": "limit", "resets_at": RESETS}), flush=True)
    sys.exit(1)
print("working on it")
print(json.dumps({"type": "usage", "input": 120, "output": 34}), flush=True)
"""
RESETS = 1_900_000_000.0


def doc_module() -> str:
    """The one ``python`` block of docs/backends.md."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, f"docs/backends.md should show one backend module, has {len(blocks)} python blocks"
    return blocks[0]


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[ModuleType]:
    """The doc's backend, imported (so registered) for one test, and forgotten after it."""
    path = tmp_path / "toy_backend.py"
    path.write_text(doc_module(), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("toy_backend", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    unregister(backend_for(toy_role(tmp_path)))


def toy_program(root: Path) -> Path:
    """The stand-in ``toy-agent``: an executable Python script, named as the backend knows it."""
    program = root / "bin" / "toy-agent"
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(f"#!{sys.executable}\n" + TOY_AGENT.replace("RESETS", repr(RESETS)), encoding="utf-8")
    program.chmod(0o755)
    return program


def toy_role(root: Path) -> Role:
    return Role(name="builder", prompt="prompts/builder.md", command=[str(root / "bin" / "toy-agent")])


def launch(root: Path, prompt: str, attempt: int = 1) -> LaunchSpec:
    role = toy_role(root)
    memo = root / "memo" / "builder" / "active" / "a.md"
    return LaunchSpec(
        run_id=5,
        attempt=attempt,
        role=role,
        root=root,
        prompt=prompt,
        memo_paths=[memo],
        log_path=root / ".orchestrator" / "logs" / "5-builder.log",
        cwd=root,
        env=agent_environment(role, root, 5, attempt, [memo]),
    )


def start(root: Path, spec: LaunchSpec) -> AttemptVerdict:
    async def main() -> AttemptVerdict:
        ended: asyncio.Future[AttemptVerdict] = asyncio.get_running_loop().create_future()
        await ProcessSpawner(root, keeper.locate()).start(spec, lambda _a, verdict: ended.set_result(verdict))
        return await asyncio.wait_for(ended, DEADLINE)

    return asyncio.run(main())


def test_the_registry_picks_each_roles_backend_by_its_name_or_its_program() -> None:
    claude = Role(name="a", prompt="p.md", command=["/opt/bin/claude", "-p", "--output-format", "stream-json"])
    text = Role(name="b", prompt="p.md", command=["claude", "-p"])
    plain = Role(name="c", prompt="p.md", command=["my-agent"])
    sdk = Role(name="d", prompt="p.md", backend="sdk")
    assert [backend_for(r).name for r in (claude, text, plain, sdk)] == ["claude", "claude", "command", "sdk"]
    assert capabilities(plain) == Capabilities()
    assert capabilities(claude).cost and not capabilities(text).cost and not capabilities(claude).tell
    assert capabilities(sdk).tell and capabilities(sdk).interrupt and capabilities(sdk).resume
    assert [stall_seconds(r) for r in (claude, text, plain, sdk)] == [600.0, None, None, 600.0]
    quiet = plain.model_copy(update={"stall_timeout": 30.0})
    off = claude.model_copy(update={"stall_timeout": 0.0})
    assert (stall_seconds(quiet), stall_seconds(off)) == (30.0, None)  # the role's own setting comes first


@pytest.mark.full  # a real orchestrator, in this process: the registry is this process's
def test_the_backend_of_the_doc_runs_memos_through_up_with_its_figures(tmp_path: Path, toy: ModuleType) -> None:
    toy_program(tmp_path)
    role = toy_role(tmp_path)
    assert backend_for(role).name == "toy" and stall_seconds(role) == 300.0
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "builder.md").write_text("do $memo_path\n", encoding="utf-8")
    team = {"roles": {"builder": {"prompt": "prompts/builder.md", "command": role.command, "grace": "2s"}}}
    (tmp_path / "roles.yaml").write_text(yaml.safe_dump(team), encoding="utf-8")
    inbox = tmp_path / "memo" / "builder" / "inbox"
    inbox.mkdir(parents=True)
    (inbox / "B-001-first.md").write_text("---\nid: B-001\n---\nbuild it\n", encoding="utf-8")

    started = time.monotonic()
    assert run_up(tmp_path, until_idle=True, plain=True) == 0
    assert time.monotonic() - started < DEADLINE

    assert (tmp_path / "memo" / "builder" / "archive" / "B-001-first.md").exists()
    with sqlite3.connect(tmp_path / ".orchestrator" / "state.db") as db:
        db.row_factory = sqlite3.Row
        (row,) = db.execute("SELECT state, session_id, input_tokens, output_tokens, cost_usd FROM runs").fetchall()
    assert dict(row) == {
        "state": "succeeded",
        "session_id": "thread-7",
        "input_tokens": 120,
        "output_tokens": 34,
        "cost_usd": None,
    }
    (journal,) = (tmp_path / "memo" / "builder" / "journal").glob("*.md")
    entry = journal.read_text(encoding="utf-8")
    assert "- tokens: 120 in, 34 out" in entry and "Cost" not in entry  # it reports tokens, not dollars
    said = (tmp_path / ".orchestrator" / "orchestrator.log").read_text(encoding="utf-8")
    assert not [line for line in said.splitlines() if any(loud in line for loud in LOUD)], said


def test_the_backend_of_the_doc_reads_a_usage_limit_and_an_attempt_taken_back(tmp_path: Path, toy: ModuleType) -> None:
    toy_program(tmp_path)
    verdict = start(tmp_path, launch(tmp_path, "[limit] build it"))
    assert verdict.returncode == 1 and not verdict.succeeded and verdict.session_id == "thread-7"
    assert verdict.usage_limit is not None and verdict.usage_limit.resets_at == RESETS
    assert verdict.failure_reason == "rate limited until its reset"

    # the orchestrator was down when the next attempt ended: its output in the log is read back the same way
    spec = launch(tmp_path, "", attempt=2)
    with open(spec.log_path, "a", encoding="utf-8") as log:
        log.write("\n=== run 5 attempt 2: toy-agent\n" + json.dumps({"type": "thread", "id": "thread-8"}) + "\n")
    taken_back = backend_for(spec.role).recorded(spec, None)
    assert taken_back.capabilities == toy.CAN
    found = taken_back.conclude(0)
    assert found.succeeded and found.session_id == "thread-8" and found.usage_limit is None


def test_the_backend_of_the_doc_is_checked_at_start_and_by_the_doctor(tmp_path: Path, toy: ModuleType) -> None:
    role = toy_role(tmp_path)  # no toy-agent written
    config = Config(root=tmp_path, path=tmp_path / "roles.yaml", roles={role.name: role})
    with pytest.raises(ConfigError) as refused:
        backend_for(role).check(config, role)
    assert str(refused.value).startswith(f"{tmp_path / 'roles.yaml'}: roles.builder.command: ")
    assert "is not an executable file" in str(refused.value)
    program = toy_program(tmp_path)
    backend_for(role).check(config, role)
    found, login = roles.check_command(roles.Checkup(config, Host()), role)
    assert login is None  # it has no login to check
    assert (found.status, found.detail) == (
        "ok",
        f"{program} -> {program} (this shell); its events and its exit status are the verdict",
    )


class Talker(CommandBackend):
    """A ``command`` role's program that takes a tell and an interrupt: what the supervisor asks, not a name."""

    name = "talker"

    def capabilities(self, role: Role) -> Capabilities:
        return Capabilities(tell=True, interrupt=True)


def test_the_supervisor_asks_a_backend_what_it_can_do_not_its_name(tmp_path: Path) -> None:
    talker = Talker()
    register(talker, named=False, programs=("talker",))

    async def scenario() -> None:
        r = Replay(tmp_path, {"builder": {"command": ["talker"]}})  # backend: command, by its name
        await r.drop("builder", "T-1.md")
        told = await r.request(TellRequested, memo="T-1", text="and the tests")
        assert (await asyncio.wait_for(told, DEADLINE))["state"] == "running"
        assert r.agent("T-1").told == ["and the tests"]
        await r.request(CancelRequested, memo="T-1")
        assert r.spawner.stops == [(r.agent("T-1").spec.run_id, 2.0, True)]  # its turn is ended first
        r.close()

    try:
        asyncio.run(scenario())
    finally:
        unregister(talker)


def test_a_claude_session_resumed_by_a_later_run_keeps_the_clis_cap_as_it_is(tmp_path: Path) -> None:
    """The CLI's ``--max-budget-usd`` counts only what its own process spends, not the running total a resumed
    session reports: what the asking run spent (``carried_usd``) must not be added to it, or the answered run could
    spend that much more."""
    claude = tmp_path / "bin" / "claude"
    claude.parent.mkdir(parents=True)
    claude.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$0.argv"\n', encoding="utf-8")
    claude.chmod(0o755)
    plain = Role(name="builder", prompt="p.md", command=[str(claude), "-p"], budget={"per_run_usd": 0.1})
    tighter = plain.model_copy(update={"max_budget_usd": 0.05})
    given = launch(tmp_path, "go on")
    for role, carried, cap in ((plain, 0.0, "0.1"), (plain, 0.2, "0.1"), (tighter, 0.2, "0.05")):
        start(tmp_path, dataclasses.replace(given, role=role, carried_usd=carried))
        argv = (tmp_path / "bin" / "claude.argv").read_text().splitlines()
        assert argv[argv.index("--max-budget-usd") + 1] == cap, argv


def test_a_claude_command_that_gives_itself_a_looser_budget_cap_is_refused(tmp_path: Path) -> None:
    """Found by a user-view review: the command's own --max-budget-usd 5 was left as it was, so the role's
    budget.per_run_usd of 0.5 was never passed to the CLI, and nothing said so."""
    from orchestrator.agents.claude_cli import check_role
    from orchestrator.config import Config
    from orchestrator.core.errors import ConfigError

    def check(command: list[str], **settings: object) -> None:
        role = Role(name="c", prompt="p.md", command=command, **settings)
        check_role(Config(root=tmp_path, path=tmp_path / "roles.yaml", roles={"c": role}), role)

    with pytest.raises(
        ConfigError, match=r"roles.yaml: roles.c.command: --max-budget-usd 5 is over the role's cap of 0.5"
    ):
        check(["claude", "-p", "--max-budget-usd", "5"], budget={"per_run_usd": 0.5})
    with pytest.raises(ConfigError, match=r"--max-budget-usd 2 is over the role's cap of 1 "):
        check(["claude", "-p", "--max-budget-usd=2"], max_budget_usd=1.0)
    check(["claude", "-p", "--max-budget-usd", "0.3"], budget={"per_run_usd": 0.5})  # tighter
    check(["claude", "-p", "--max-budget-usd", "5"])  # no cap of the role's to loosen


def test_a_budget_nothing_counts_is_refused(project: Project, tmp_path: Path) -> None:
    """Found by a review: a role whose agent reports no spend (a plain command, claude without stream-json) had its
    budget.per_run_usd or per_day_usd taken and never kept (its runs counted $0), silently; the team's per_day_usd
    still counts its other roles, and a role turns a budget from defaults off."""
    run_cap = "roles.builder.budget.per_run_usd (its own, or from defaults): a plain command reports no spend"
    day_cap = "roles.builder.budget.per_day_usd (its own, or from defaults): this role's agent reports no spend"
    claude = tmp_path / "bin" / "claude"  # the fake Claude Code CLI, named as the registry knows it
    claude.parent.mkdir()
    claude.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_CLAUDE}" "$@"\n', encoding="utf-8")
    claude.chmod(0o755)
    for settings, top, said in (
        ({"budget": {"per_run_usd": 0.5}}, {}, run_cap),
        ({"budget": {"per_day_usd": 5}}, {}, day_cap),
        ({}, {"defaults": {"budget": {"per_day_usd": 5}}}, day_cap),
        ({"command": [str(claude), "-p"], "budget": {"per_day_usd": 5}}, {}, day_cap),
    ):
        project.configure({"builder": settings}, **top)
        for command in (("config", "check"), ("doctor",)):
            done = project.cli(*command)
            assert done.returncode != 0 and said in done.stdout + done.stderr, (command, settings, done)
    for settings, top in (
        ({}, {"budget": {"per_day_usd": 5}}),  # the team's
        ({"budget": {"per_day_usd": "off"}}, {"defaults": {"budget": {"per_day_usd": 5}}}),
        (
            {"command": [str(claude), "-p", "--output-format", "stream-json", "--verbose"]},
            {"defaults": {"budget": {"per_day_usd": 5}}},
        ),
    ):
        project.configure({"builder": settings}, **top)
        done = project.cli("config", "check")
        assert done.returncode == 0, (settings, done.stderr)
    project.configure({"builder": {"budget": {"per_day_usd": 5, "per_run_usd": 1}}})  # a dry run: its stand-in
    dry = project.cli("config", "check", ORCHESTRATOR_SPAWN_CMD="true")
    assert dry.returncode == 0, dry.stderr
