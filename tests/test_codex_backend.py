"""The ``codex`` backend with a stand-in ``codex`` (a small Python script that answers as Codex 0.169 does): the
registry's choice, its command and role keys, its start-up checks and doctor lines, and attempts started through
the real spawner and judged from their events. The real CLI's tests are in tests/test_real_codex.py."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_for
from orchestrator.agents import keeper, told
from orchestrator.agents.backends import backend_for, capabilities, stall_seconds
from orchestrator.agents.backends.codex import choice_of, command_of, model_of, provider_key, resumed
from orchestrator.agents.backends.codex_program import login
from orchestrator.agents.handle import QUEUED
from orchestrator.agents.run_folder import remove_spent
from orchestrator.agents.spawner import ProcessSpawner
from orchestrator.agents.spec import LaunchSpec, agent_environment
from orchestrator.config import Config, Role, load_config
from orchestrator.core.agent import AttemptVerdict
from orchestrator.core.errors import ConfigError, ControlError
from orchestrator.ops.doctor import Host, roles

DEADLINE = 20.0
STAND_IN = """\
import json, os, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("codex-cli VERSION")
    sys.exit(0)
if args[:2] == ["login", "status"]:
    if os.environ.get("STAND_IN_LOGGED_IN"):
        print("Logged in using ChatGPT")
        sys.exit(0)
    print("Not logged in", file=sys.stderr)
    sys.exit(1)
prompt = sys.stdin.read()
with open("argv.json", "w") as out:
    json.dump(args, out)
with open("prompts.jsonl", "a") as out:
    out.write(json.dumps(prompt) + "\\n")
while "[wait]" in prompt and not os.path.exists("go"):
    __import__("time").sleep(0.02)
say = lambda event: print(json.dumps(event), flush=True)
say({"type": "thread.started", "thread_id": "thread-9"})
say({"type": "turn.started"})
if "[limit]" in prompt:
    text = "You\\u2019ve hit your usage limit. Try again in 30 minutes."
    say({"type": "error", "message": text})
    say({"type": "turn.failed", "error": {"message": text}})
    sys.exit(1)
if "[die]" in prompt:
    os.kill(os.getpid(), 9)
if "[fail]" in prompt:
    say({"type": "turn.failed", "error": {"message": "the model's stream broke"}})
    sys.exit(1)
say({"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": "built it"}})
usage = {"input_tokens": 900, "cached_input_tokens": 100, "cache_write_input_tokens": 0, "output_tokens": 50,
         "reasoning_output_tokens": 20}
say({"type": "turn.completed", "usage": usage})
"""


def stand_in(root: Path, version: str = "0.169.0") -> Path:
    program = root / "bin" / "codex"
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(f"#!{sys.executable}\n" + STAND_IN.replace("VERSION", version), encoding="utf-8")
    program.chmod(0o755)
    return program


def codex_role(root: Path, **keys: object) -> Role:
    command = [str(root / "bin" / "codex"), "exec", "--json", "-"]
    return Role.model_validate({"name": "builder", "prompt": "p.md", "backend": "codex", "command": command, **keys})


def config_of(root: Path, role: Role) -> Config:
    return Config(root=root, path=root / "roles.yaml", roles={role.name: role})


def test_the_registry_runs_codex_roles_by_its_name_or_its_program() -> None:
    named = Role(name="a", prompt="p.md", backend="codex")
    by_program = Role(name="b", prompt="p.md", command=["/opt/bin/codex", "exec", "--json", "-"])
    plain = Role(name="c", prompt="p.md", command=["codex", "exec", "-"])
    assert named.command == ["codex", "exec", "--json", "-"]
    assert command_of(named) == ["codex", "exec", "--json", "--sandbox", "workspace-write", "-"]  # the default's
    assert [backend_for(r).name for r in (named, by_program, plain)] == ["codex", "codex", "codex"]
    can = capabilities(named)
    assert can.session and can.resume and can.tell and can.tokens and can.usage_limits
    assert not (can.cost or can.interrupt)
    assert capabilities(by_program) == can
    ephemeral = capabilities(Role(name="e", prompt="p.md", command=["codex", "exec", "--json", "--ephemeral", "-"]))
    assert ephemeral.tokens and not (ephemeral.session or ephemeral.resume or ephemeral.tell), "it keeps no thread"
    from types import SimpleNamespace

    from orchestrator.supervisor.requests import _unsupported

    run = SimpleNamespace(
        role=SimpleNamespace(name="e", backend="codex"), agent=SimpleNamespace(capabilities=ephemeral)
    )
    said = _unsupported(run, "tell")  # type: ignore[arg-type]
    assert said.endswith("drop --ephemeral from its command: Codex then takes a tell after its turn"), said
    assert "backend: sdk" not in said, "a tell to an ephemeral Codex role: not another backend (defect: it said so)"
    assert (capabilities(plain).instead or "").startswith("add --json to its command"), "nor to one without --json"
    assert not capabilities(plain).tokens  # without --json its exit status is the verdict
    assert [stall_seconds(r) for r in (named, plain)] == [600.0, None]


def test_its_role_keys_become_arguments_before_the_prompt_and_never_twice() -> None:
    role = Role.model_validate(
        {
            "name": "a",
            "prompt": "p.md",
            "backend": "codex",
            "model": "gpt-5-codex",
            "sandbox": "read-only",
            "profile": "fast",
            "config": {"model_reasoning_effort": "high", "hide_agent_reasoning": True},
        }
    )
    assert command_of(role) == [
        "codex", "exec", "--json",
        "--model", "gpt-5-codex", "--sandbox", "read-only", "--profile", "fast",  # its sandbox, not the default's
        "-c", "model_reasoning_effort=high", "-c", "hide_agent_reasoning=true",
        "-",
    ]  # fmt: skip
    own = Role(name="b", prompt="p.md", backend="codex", model="o3", command=["codex", "exec", "-m", "o3", "--json"])
    assert command_of(own) == ["codex", "exec", "-m", "o3", "--json"]  # Codex refuses -m given twice
    assert model_of(own) == "o3" and model_of(own.model_copy(update={"model": None})) == "o3"
    for argv in (["codex", "exec", "--json", "--ephemeral", "-"], ["codex", "exec", "--json", "-"]):
        mine = Role(name="c", prompt="p.md", backend="codex", command=argv)
        assert command_of(mine) == argv, "a command of its own (even the default's words) keeps Codex's own sandbox"
    assert resumed(["codex", "exec", "--json", "-"], "t-1") == ["codex", "exec", "--json", "resume", "t-1", "-"]


def test_the_provider_a_role_selects_names_the_key_it_needs(tmp_path: Path) -> None:
    provider = '{name="mine", base_url="http://127.0.0.1:9/v1", env_key="MINE_KEY", wire_api="responses"}'
    by_command = Role(
        name="a",
        prompt="p.md",
        command=["codex", "exec", "-c", "model_provider=mine", "-c", f"model_providers.mine={provider}", "--json"],
    )
    by_config = Role.model_validate(
        {
            "name": "b",
            "prompt": "p.md",
            "backend": "codex",
            "config": {"model_provider": "mine", "model_providers.mine": provider},
        }
    )
    assert provider_key(by_command) == provider_key(by_config) == "MINE_KEY"
    assert provider_key(Role(name="c", prompt="p.md", backend="codex")) is None
    assert login("codex", {"MINE_KEY": "k"}, "MINE_KEY").status == "ok"
    missing = login("codex", {"OPENAI_API_KEY": "k"}, "MINE_KEY")
    assert missing.status == "fail" and "MINE_KEY" in missing.detail


def test_it_is_refused_at_start_when_missing_too_old_or_logged_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "CODEX_API_KEY", "STAND_IN_LOGGED_IN"):
        monkeypatch.delenv(name, raising=False)
    role = codex_role(tmp_path)
    config = config_of(tmp_path, role)
    where = f"{tmp_path / 'roles.yaml'}: roles.builder"
    with pytest.raises(ConfigError, match="is not an executable file") as missing:
        backend_for(role).check(config, role)
    assert str(missing.value).startswith(f"{where}.command: ")

    stand_in(tmp_path, "0.20.0")
    with pytest.raises(ConfigError) as old:
        backend_for(role).check(config, role)
    assert "codex-cli 0.20.0, too old; install @openai/codex 0.169.0 or later" in str(old.value)

    program = stand_in(tmp_path)  # a version too old is not remembered: it is asked again
    with pytest.raises(ConfigError) as out:
        backend_for(role).check(config, role)
    said = str(out.value)
    assert said.startswith(f"{where}: Codex is not logged in (`{program} login status` exited 1); run `")
    assert "\n" not in said

    monkeypatch.setenv("STAND_IN_LOGGED_IN", "1")
    backend_for(role).check(config, role)
    found, program_checked = roles.check_command(roles.Checkup(config, Host()), role)
    assert found.status == "ok" and "codex-cli 0.169.0" in found.detail
    assert program_checked is not None and program_checked.login is not None
    assert program_checked.login(str(program), {"STAND_IN_LOGGED_IN": "1"}).status == "ok"
    monkeypatch.delenv("STAND_IN_LOGGED_IN")
    monkeypatch.setenv("CODEX_API_KEY", "k")
    backend_for(role).check(config, role)  # an API key is credentials enough


def launch(root: Path, prompt: str, role: Role, resume: str | None = None) -> LaunchSpec:
    memo = root / "memo" / "builder" / "active" / "a.md"
    return LaunchSpec(
        run_id=3,
        attempt=1,
        role=role,
        root=root,
        prompt=prompt,
        memo_paths=[memo],
        log_path=root / ".orchestrator" / "logs" / "3-builder.log",
        cwd=root,
        env=agent_environment(role, root, 3, 1, [memo]),
        resume=resume,
    )


def start(root: Path, spec: LaunchSpec, figures: dict[str, Any] | None = None) -> AttemptVerdict:
    """One attempt started through the real spawner; its figures copied into ``figures``."""

    async def main() -> AttemptVerdict:
        ended: asyncio.Future[AttemptVerdict] = asyncio.get_running_loop().create_future()

        def on_exit(agent: Any, verdict: AttemptVerdict) -> None:
            (figures if figures is not None else {}).update(agent.result)
            ended.set_result(verdict)

        await ProcessSpawner(root, keeper.locate()).start(spec, on_exit)
        return await asyncio.wait_for(ended, DEADLINE)

    return asyncio.run(main())


def test_an_attempt_is_judged_by_its_events(tmp_path: Path) -> None:
    stand_in(tmp_path)
    role = codex_role(tmp_path, model="gpt-5-codex")
    verdict = start(tmp_path, launch(tmp_path, "build it", role))
    assert verdict.succeeded and verdict.session_id == "thread-9"
    assert verdict.last_words is not None and verdict.last_words.result == "built it"
    argv = json.loads((tmp_path / "argv.json").read_text(encoding="utf-8"))
    assert argv == ["exec", "--json", "--model", "gpt-5-codex", "-"]

    limited = start(tmp_path, launch(tmp_path, "[limit] build it", role))
    assert limited.returncode == 1 and not limited.permanent_failure
    assert limited.usage_limit is not None and limited.usage_limit.resets_at is not None
    assert limited.failure_reason is not None and limited.failure_reason.startswith(
        "Codex hit the account's usage limit"
    )

    start(tmp_path, launch(tmp_path, "again", role, resume="thread-9"))  # a retry that carries the thread on
    argv = json.loads((tmp_path / "argv.json").read_text(encoding="utf-8"))
    assert argv == ["exec", "--json", "--model", "gpt-5-codex", "resume", "thread-9", "-"]


def test_a_budget_needs_a_price_for_the_roles_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.config import load_config

    monkeypatch.setenv("CODEX_API_KEY", "k")
    stand_in(tmp_path)
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "builder.md").write_text("do $memo_path\n", encoding="utf-8")
    command = [str(tmp_path / "bin" / "codex"), "exec", "--json", "-m", "gpt-5-codex", "-"]
    team: dict[str, object] = {
        "roles": {"builder": {"backend": "codex", "command": command, "budget": {"per_day_usd": 5}}}
    }
    (tmp_path / "roles.yaml").write_text(json.dumps(team), encoding="utf-8")
    config = load_config(tmp_path)
    role = config.roles["builder"]
    with pytest.raises(ConfigError) as refused:
        backend_for(role).check(config, role)
    assert str(refused.value).startswith(f"{tmp_path / 'roles.yaml'}: prices: a budget counts role builder's cost")
    assert "'gpt-5-codex' has no price" in str(refused.value)

    team["prices"] = {"gpt-5-codex": {"input": 1.25, "cached_input": 0.125, "output": 10}}
    (tmp_path / "roles.yaml").write_text(json.dumps(team), encoding="utf-8")
    config = load_config(tmp_path)
    role = config.roles["builder"]
    backend_for(role).check(config, role)
    figures: dict[str, Any] = {}
    assert start(tmp_path, launch(tmp_path, "build it", role), figures).succeeded
    assert figures["input_tokens"] == 900 and figures["output_tokens"] == 50
    assert figures["cost_usd"] == pytest.approx((800 * 1.25 + 100 * 0.125 + 50 * 10) / 1e6)


def test_a_per_run_budget_is_refused_since_nothing_could_stop_a_run_at_it(tmp_path: Path) -> None:
    role = codex_role(tmp_path, budget={"per_run_usd": 1})
    with pytest.raises(ConfigError, match=r"roles\.builder\.budget\.per_run_usd: Codex reports no spend"):
        backend_for(role).check(config_of(tmp_path, role), role)


def test_a_model_provider_chosen_in_codexs_own_config_is_its_login(tmp_path: Path) -> None:
    """Azure, OpenRouter or Ollama set in ``CODEX_HOME/config.toml``: its ``env_key`` is the credential, and a
    provider that reads none needs nothing; ``login status`` (which says "not logged in") is not asked."""
    program = stand_in(tmp_path)  # its `login status` exits 1 unless STAND_IN_LOGGED_IN is set
    home = tmp_path / "codex-home"
    home.mkdir()
    toml = home / "config.toml"
    toml.write_text('model_provider = "azure"\n[model_providers.azure]\nenv_key = "AZURE_KEY"\n', encoding="utf-8")
    env = {"CODEX_HOME": str(home)}
    missing = login(str(program), env)
    assert missing.status == "fail" and "reads its key from AZURE_KEY, which is not set" in missing.detail
    assert str(toml) in missing.detail and missing.fix.startswith("set AZURE_KEY")
    assert login(str(program), {**env, "AZURE_KEY": "k"}).status == "ok"
    toml.write_text('model_provider = "ollama"\n', encoding="utf-8")
    assert login(str(program), env).status == "ok", "a provider that reads no key"
    toml.write_text('model_provider = "openai"\n', encoding="utf-8")
    assert login(str(program), env).status == "fail", "OpenAI's own: its login is asked"
    toml.write_text(
        'model_provider = "azure"\n[model_providers.azure]\nenv_key = "AZURE_KEY"\n'
        '[profiles.fast]\nmodel = "gpt-5-mini"\n[profiles.personal]\nmodel_provider = "openai"\n',
        encoding="utf-8",
    )
    keyed = {**env, "AZURE_KEY": "k"}
    for keys, status in (
        ({"profile": "fast"}, "ok"),  # a profile that keeps the file's provider
        ({"profile": "personal"}, "fail"),  # one that picks OpenAI's: its login is asked
        ({"config": {"model_provider": "openai"}}, "fail"),
        ({"config": {"model_provider": "azure"}}, "ok"),
        ({"command": [str(program), "exec", "-p", "personal", "--json", "-"]}, "fail"),
    ):
        role = codex_role(tmp_path, **keys)
        assert login(str(program), keyed, provider_key(role), choice_of(role)).status == status, keys


def test_a_key_its_command_gives_otherwise_is_refused_at_start_never_ignored(tmp_path: Path) -> None:
    """A ``sandbox: read-only`` beside a command giving ``--sandbox workspace-write`` would fail open, and a
    ``model`` beside another ``-m`` would be priced as the other model: one of the two must go."""
    stand_in(tmp_path)
    where = f"{tmp_path / 'roles.yaml'}: roles.builder"
    for keys, said in (
        ({"sandbox": "read-only"}, "sandbox: read-only is not what its command gives (--sandbox workspace-write)"),
        ({"model": "gpt-5-mini"}, "model: gpt-5-mini is not what its command gives (--model gpt-5.1-codex-max)"),
    ):
        command = [
            str(tmp_path / "bin" / "codex"),
            "exec",
            "--json",
            "-m",
            "gpt-5.1-codex-max",
            "-s",
            "workspace-write",
        ]
        role = codex_role(tmp_path, command=[*command, "-"], **keys)
        with pytest.raises(ConfigError) as refused:
            backend_for(role).check(config_of(tmp_path, role), role)
        assert str(refused.value) == f"{where}.{said}; remove one of the two"


def test_a_codex_role_runs_codex_though_the_teams_default_command_is_another_agents(tmp_path: Path) -> None:
    (tmp_path / "roles.yaml").write_text(
        "defaults: {command: [claude, -p, --permission-mode, acceptEdits]}\n"
        "roles:\n"
        "  writer: {}\n"
        "  builder: {backend: codex, sandbox: read-only}\n"
        "  wrapped: {backend: codex, command: [my-codex, exec, --json, -]}\n",
        encoding="utf-8",
    )
    roles = load_config(tmp_path).roles
    assert roles["writer"].command == ["claude", "-p", "--permission-mode", "acceptEdits"]
    assert command_of(roles["builder"]) == ["codex", "exec", "--json", "--sandbox", "read-only", "-"]
    assert roles["wrapped"].command == ["my-codex", "exec", "--json", "-"], "its own command stands"
    for defaults, kept in (
        ("{command: [/opt/codex, exec, --json, --skip-git-repo-check, -]}", ["/opt/codex", "exec"]),  # named codex
        ("{backend: codex, command: [npx, -y, '@openai/codex', exec, --json, -]}", ["npx", "-y"]),  # Codex's team
    ):
        (tmp_path / "roles.yaml").write_text(
            f"defaults: {defaults}\nroles: {{builder: {{backend: codex}}}}\n", encoding="utf-8"
        )
        assert load_config(tmp_path).roles["builder"].command[:2] == kept, f"a default meant for codex: {defaults}"


def test_a_codex_role_on_ray_is_refused_in_one_line(tmp_path: Path) -> None:
    role = codex_role(tmp_path)
    config = Config(root=tmp_path, path=tmp_path / "roles.yaml", roles={role.name: role}, executor={"kind": "ray"})
    with pytest.raises(ConfigError) as refused:
        backend_for(role).check(config, role)
    assert str(refused.value).startswith(f"{tmp_path / 'roles.yaml'}: roles.builder: a codex role is not yet supported")
    assert "\n" not in str(refused.value)


ENDED_TURN = [
    {"type": "thread.started", "thread_id": "thread-8"},
    {"type": "turn.started"},
    {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}},
]


def ended_turn(root: Path, role: Role) -> LaunchSpec:
    """The spec of run 3's attempt 1, whose log holds a turn that completed (``ENDED_TURN``) while we were down."""
    spec = launch(root, "", role)
    spec.log_path.parent.mkdir(parents=True)
    with open(spec.log_path, "w", encoding="utf-8") as log:
        log.write("\n=== run 3 attempt 1: codex exec --json -\n" + "".join(json.dumps(e) + "\n" for e in ENDED_TURN))
    return spec


def test_an_attempt_that_ended_while_we_were_down_is_read_from_its_log(tmp_path: Path) -> None:
    role = codex_role(tmp_path)
    spec = ended_turn(tmp_path, role)
    taken_back = backend_for(role).recorded(spec, None)
    assert taken_back.capabilities == capabilities(role)
    found = taken_back.conclude(0)
    assert found.succeeded and found.session_id == "thread-8"
    assert taken_back.result["input_tokens"] == 10
    with open(spec.log_path, "a", encoding="utf-8") as log:  # the same attempt again (adopted, then ended)
        log.write("\n=== run 3 attempt 1: codex exec --json -\n" + json.dumps(ENDED_TURN[0]) + "\n")
    cut = backend_for(role).recorded(launch(tmp_path, "", role), None)
    assert not cut.conclude(0).succeeded  # no completed turn after its header: a failure, whatever its exit


def test_an_attempt_taken_back_during_a_told_turn_counts_the_turns_before_it(tmp_path: Path) -> None:
    """Each told turn is a process of its own under the same header: the running one is read from the last header,
    after the turns the ones before it completed; its usage is already the thread's total."""
    role = codex_role(tmp_path)
    spec = ended_turn(tmp_path, role)
    second = [ENDED_TURN[0], {"type": "turn.started"}]
    second.append({"type": "turn.completed", "usage": {"input_tokens": 30, "output_tokens": 5}})
    with open(spec.log_path, "a", encoding="utf-8") as log:
        log.write("\n=== run 3 attempt 1: codex exec --json resume thread-8 -\n")
        log.write("".join(json.dumps(e) + "\n" for e in second))
    taken_back = backend_for(role).recorded(spec, None)
    assert taken_back.conclude(0).succeeded
    assert taken_back.result["num_turns"] == 2 and taken_back.result["input_tokens"] == 30, taken_back.result
    only = backend_for(role).recorded(launch(tmp_path / "other", "", role), None)  # no log at all: nothing before
    assert not only.conclude(0).agent_failed and only.result.get("num_turns") is None


def told_turns(
    root: Path, stop: bool = False, prompt: str = "[wait] build it", before_go: Callable[[], None] = lambda: None
) -> tuple[AttemptVerdict, dict[str, Any], list[str]]:
    """A ``[wait]`` turn told twice, then let go (or stopped): its verdict, figures and the prompts each process read;
    a tell after its end is refused."""
    role = codex_role(root, model="gpt-5-codex")

    async def main() -> tuple[AttemptVerdict, dict[str, Any]]:
        ended: asyncio.Future[AttemptVerdict] = asyncio.get_running_loop().create_future()
        agent = await ProcessSpawner(root, keeper.locate()).start(
            launch(root, prompt, role), lambda _, verdict: ended.set_result(verdict)
        )
        try:
            assert await agent.tell("one") == QUEUED and await agent.tell("two") == QUEUED
            if stop:
                until = asyncio.get_running_loop().time() + DEADLINE
                while not (root / "prompts.jsonl").exists():  # its turn under way: the stop meets a running process
                    assert asyncio.get_running_loop().time() < until, "the stand-in never read its prompt"
                    await asyncio.sleep(0.02)
                await agent.stop(1.0, lambda _: None, interrupt_first=False)
            before_go()
        finally:
            (root / "go").touch()  # its turn ends whatever happened before: no stand-in outlives a failing test
        verdict = await asyncio.wait_for(ended, DEADLINE)
        with pytest.raises(ControlError, match="ended its turn and exited"):
            await agent.tell("too late")
        return verdict, agent.result

    verdict, result = asyncio.run(main())
    prompts = [json.loads(line) for line in (root / "prompts.jsonl").read_text(encoding="utf-8").splitlines()]
    return verdict, result, prompts


def test_tells_kept_during_a_turn_are_the_next_turns_prompt_in_the_same_thread(tmp_path: Path) -> None:
    stand_in(tmp_path)
    verdict, result, prompts = told_turns(tmp_path)
    assert prompts == ["[wait] build it", "one\n\ntwo"]  # both tells, one next turn
    argv = json.loads((tmp_path / "argv.json").read_text(encoding="utf-8"))
    assert argv == ["exec", "--json", "--model", "gpt-5-codex", "resume", "thread-9", "-"]
    assert verdict.succeeded and verdict.session_id == "thread-9"
    assert result["num_turns"] == 2 and result["input_tokens"] == 900  # the thread's total, as Codex reports it


def test_a_stop_asked_during_a_told_turn_starts_no_next_turn(tmp_path: Path) -> None:
    stand_in(tmp_path)
    verdict, _, prompts = told_turns(tmp_path, stop=True)
    assert prompts == ["[wait] build it"] and verdict.returncode < 0  # the stop's end, and no told turn after it


def test_tells_kept_for_a_turn_that_fails_are_said_lost_in_its_reason(tmp_path: Path) -> None:
    stand_in(tmp_path)
    verdict, _, prompts = told_turns(tmp_path, prompt="[wait][fail] build it")
    assert prompts == ["[wait][fail] build it"] and not verdict.succeeded  # no next turn after a failed one
    assert verdict.failure_reason is not None and "the model's stream broke" in verdict.failure_reason
    assert verdict.failure_reason.endswith("; 2 tell(s) kept for the end of its turn were not given to it")


def test_tells_kept_for_a_turn_killed_by_a_signal_are_said_lost_beside_the_signal(tmp_path: Path) -> None:
    stand_in(tmp_path)
    verdict, _, _ = told_turns(tmp_path, prompt="[wait][die] build it")
    assert verdict.returncode == -9 and not verdict.succeeded
    assert verdict.failure_reason is not None, verdict  # not the supervisor's bare exit description, which drops them
    assert verdict.failure_reason.endswith("; 2 tell(s) kept for the end of its turn were not given to it")


def test_tells_are_kept_on_disk_until_the_turn_that_carries_them_on_starts(tmp_path: Path) -> None:
    """A restart of ``up`` during the turn finds them (``told.read``); once the next turn has them, it does not."""
    stand_in(tmp_path)
    spec = launch(tmp_path, "", codex_role(tmp_path, model="gpt-5-codex"))
    seen: list[list[str]] = []
    verdict, _, prompts = told_turns(tmp_path, before_go=lambda: seen.append(told.read(spec)))
    assert seen == [["one", "two"]] and prompts == ["[wait] build it", "one\n\ntwo"], (seen, prompts)
    assert verdict.succeeded and not told.told_path(spec).exists() and told.read(spec) == []


def test_a_tell_that_cannot_be_kept_is_refused_not_promised(tmp_path: Path) -> None:
    stand_in(tmp_path)
    role = codex_role(tmp_path, model="gpt-5-codex")
    told.told_path(launch(tmp_path, "", role)).mkdir(parents=True)  # in the way of the file the tell is kept in

    async def main() -> tuple[str, list[str], AttemptVerdict]:
        ended: asyncio.Future[AttemptVerdict] = asyncio.get_running_loop().create_future()
        agent = await ProcessSpawner(tmp_path, keeper.locate()).start(
            launch(tmp_path, "[wait] build it", role), lambda _, verdict: ended.set_result(verdict)
        )
        try:
            with pytest.raises(ControlError) as refused:
                await agent.tell("one")
        finally:
            (tmp_path / "go").touch()  # its turn ends whatever the tell did: no stand-in outlives a failing test
        return str(refused.value), agent.told, await asyncio.wait_for(ended, DEADLINE)

    why, kept, verdict = asyncio.run(main())
    assert why.startswith(
        f"run {launch(tmp_path, '', role).run_id}: the tell could not be kept for the end of its turn"
    )
    assert f"(writing {told.told_path(launch(tmp_path, '', role))}: Is a directory); nothing was queued" in why, why
    assert "\n" not in why and kept == [] and verdict.succeeded and verdict.warnings == (), verdict
    assert sorted(p.name for p in told.told_path(launch(tmp_path, "", role)).parent.iterdir()) == ["1.exit", "1.told"]


def test_tells_left_when_a_run_ends_go_with_its_folder(tmp_path: Path) -> None:
    """Kept for a turn that failed or was stopped (or half-written by a crash): gone with the run's records."""
    spec = launch(tmp_path, "", codex_role(tmp_path))
    told.write(spec, ["also write the docs"])
    folder = told.told_path(spec).parent
    (folder / "1.told.partial").write_text("[", encoding="utf-8")
    (folder / "1.exit").write_text("0\n", encoding="utf-8")
    remove_spent(folder)
    assert not folder.exists()


def test_tells_kept_before_a_restart_for_a_turn_that_ended_meanwhile_are_said_lost(tmp_path: Path) -> None:
    """Its process is gone, and with it the environment a next turn needs: the run ends as its turn did, and its
    warnings say what was not given to it."""
    role = codex_role(tmp_path)
    spec = ended_turn(tmp_path, role)
    told.write(spec, ["also write the docs"])
    taken_back = backend_for(role).recorded(spec, None)
    assert taken_back.activity == "1 tell(s) kept for the end of its turn"
    verdict = taken_back.conclude(0)
    assert verdict.succeeded and verdict.warnings == (
        "1 tell(s) kept for the end of its turn were not given to it: the orchestrator restarted during its turn "
        "and could not carry them on",
    ), verdict


def test_a_told_turn_that_cannot_start_fails_the_attempt_saying_why(tmp_path: Path) -> None:
    program = stand_in(tmp_path)

    def remove_the_cli() -> None:  # during the first turn, once it has read its prompt
        wait_for(lambda: (tmp_path / "prompts.jsonl").exists(), DEADLINE, "the first turn's prompt read")
        program.unlink()

    verdict, _, prompts = told_turns(tmp_path, before_go=remove_the_cli)
    assert prompts == ["[wait] build it"] and not verdict.succeeded, verdict
    assert verdict.failure_reason is not None, verdict
    assert verdict.failure_reason.startswith("the turn told to it could not start: command "), verdict.failure_reason
