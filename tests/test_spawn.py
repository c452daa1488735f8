"""The one spawn path: a command agent started under its keeper, or without one, reads the same to the supervisor.

Real processes throughout (the built keeper binary, small Python agents); the
spawner is ``ProcessSpawner`` itself, with the keeper binary or with none (what
``recovery: restart`` allows when there is no binary: the agent is started by
itself and its end is its wait status). Each case asserts what the supervisor
sees: the verdict, the run's log, the agent's folder and session, the one-line
error of a start that cannot be made.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agents import keeper, procs
from orchestrator.agents.handle import Agent
from orchestrator.agents.spawner import ProcessSpawner
from orchestrator.agents.spec import LaunchSpec, SpawnError, agent_environment, role_folder
from orchestrator.config import Role
from orchestrator.core.agent import AgentHandle, AttemptVerdict, Capabilities

DEADLINE = 20.0


@pytest.fixture(params=["keeper", "no keeper"])
def binary(request: pytest.FixtureRequest) -> Path | None:
    if request.param == "no keeper":
        return None
    built = keeper.locate()
    assert built is not None, f"no usable keeper in this checkout: {keeper.find().problem} (make, or pip install -e .)"
    return built


def spec_for(root: Path, command: list[str], **settings: Any) -> LaunchSpec:
    role = Role(name="builder", prompt="prompts/builder.md", command=command, **settings)
    memo = root / "memo" / "builder" / "active" / "a.md"
    return LaunchSpec(
        run_id=3,
        attempt=1,
        role=role,
        root=root,
        prompt="the prompt",
        memo_paths=[memo],
        log_path=root / ".orchestrator" / "logs" / "3-builder.log",
        cwd=role_folder(root, role.cwd),
        env=agent_environment(role, root, 3, 1, [memo]),
    )


def run(root: Path, binary: Path | None, spec: LaunchSpec) -> tuple[AgentHandle, AttemptVerdict]:
    async def main() -> tuple[AgentHandle, AttemptVerdict]:
        ended: asyncio.Future[AttemptVerdict] = asyncio.get_running_loop().create_future()
        agent = await ProcessSpawner(root, binary).start(spec, lambda _a, verdict: ended.set_result(verdict))
        return agent, await asyncio.wait_for(ended, DEADLINE)

    return asyncio.run(main())


def test_the_agent_gets_its_prompt_folder_session_and_log_and_its_exit_status_is_the_verdict(tmp_path, binary):
    folder = tmp_path / "work"
    folder.mkdir()
    seen = tmp_path / "seen.json"
    probe = (
        "import json, os, sys; json.dump({'cwd': os.getcwd(), 'pid': os.getpid(), 'sid': os.getsid(0), "
        f"'prompt': sys.stdin.read(), 'run': os.environ['ORCHESTRATOR_RUN_ID']}}, open({str(seen)!r}, 'w')); "
        "print('working'); sys.exit(4)"
    )
    before = set(procs._spared)
    agent, verdict = run(tmp_path, binary, spec_for(tmp_path, [sys.executable, "-c", probe], cwd="work"))
    facts = json.loads(seen.read_text())
    assert verdict == AttemptVerdict(4) and agent.verdict == verdict
    assert facts == {"cwd": str(folder), "pid": agent.pid, "sid": agent.pid, "prompt": "the prompt", "run": "3"}
    log = (tmp_path / ".orchestrator" / "logs" / "3-builder.log").read_text().splitlines()
    assert log[-2:] == [f"=== run 3 attempt 1: {sys.executable} -c {probe}", "working"]
    assert agent.pid not in procs._spared and procs._spared == before, "no child is left waited for"


def test_a_signal_is_the_verdict_as_minus_its_number(tmp_path, binary):
    code = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    _agent, verdict = run(tmp_path, binary, spec_for(tmp_path, [sys.executable, "-c", code]))
    assert verdict.returncode == -signal.SIGTERM


def test_starts_that_cannot_be_made_say_why_in_one_line(tmp_path, binary):
    before = set(procs._spared)
    script = tmp_path / "broken.sh"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    with pytest.raises(SpawnError, match=r"^cannot start '.*broken.sh': .*interpreter on its #! line missing\?\)$"):
        run(tmp_path, binary, spec_for(tmp_path, [str(script)]))
    with pytest.raises(SpawnError, match=r"^cannot enter the folder .*gone of role builder: No such file"):
        run(tmp_path, binary, spec_for(tmp_path, ["/bin/true"], cwd="gone"))
    other = tmp_path / "other"
    (other / ".orchestrator").mkdir(parents=True)
    (other / ".orchestrator" / "logs").write_text("not a folder")
    with pytest.raises(SpawnError, match=r"^cannot open the run's log .*3-builder.log: Not a directory$"):
        run(other, binary, spec_for(other, ["/bin/true"]))
    assert procs._spared == before, "no child is left waited for"


def test_a_claude_cli_agent_is_explained_from_what_it_said(tmp_path, binary):
    cli = tmp_path / "bin" / "claude"
    cli.parent.mkdir()
    cli.write_text(f"#!{sys.executable}\nprint('Invalid API key · Fix external API key')\nraise SystemExit(1)\n")
    cli.chmod(0o755)
    _agent, verdict = run(tmp_path, binary, spec_for(tmp_path, [str(cli)]))
    assert verdict.returncode == 1 and verdict.permanent_failure
    assert verdict.failure_reason is not None and verdict.failure_reason.startswith("the Anthropic API rejected")
    assert verdict.failure_reason.endswith("(exit code 1)")


def test_without_a_keeper_nothing_is_recorded_on_disk(tmp_path):
    run(tmp_path, None, spec_for(tmp_path, ["/bin/true"]))
    assert not (tmp_path / ".orchestrator" / "runs").exists()
    assert os.path.exists(tmp_path / ".orchestrator" / "logs" / "3-builder.log")


def test_an_environment_too_long_for_linux_is_ours_not_the_roles_and_names_the_culprit(tmp_path, binary):
    spec = spec_for(tmp_path, ["/bin/true"], env={"HUGE": "x" * 140_000})
    with pytest.raises(
        SpawnError, match=r"Argument list too long.*the longest is variable HUGE, 140006 bytes"
    ) as caught:
        run(tmp_path, binary, spec)
    assert caught.value.internal, "the memos go back to the inbox: the role did nothing wrong"


class _BrokenEnd:
    """A transport whose end cannot be read: what a bug or an unreadable exit record would look like."""

    pid = 12345
    create_time = None
    node = None

    async def ended(self) -> Any:
        raise OSError("the exit record cannot be read")


def test_an_end_that_cannot_be_read_is_still_told_as_the_attempts_end(tmp_path):
    """A waiter that raised was lost: the run kept its slot and its memo stayed in active/ until its timeout."""

    async def main() -> AttemptVerdict:
        ended: asyncio.Future[AttemptVerdict] = asyncio.get_running_loop().create_future()
        spec = spec_for(tmp_path, [sys.executable, "-c", "pass"])
        agent = Agent(spec, _BrokenEnd(), capabilities=Capabilities())  # type: ignore[arg-type]
        agent.watch(lambda _a, verdict: ended.set_result(verdict))
        return await asyncio.wait_for(ended, DEADLINE)

    verdict = asyncio.run(main())
    assert verdict.returncode == -signal.SIGKILL
    assert verdict.failure_reason == (
        "internal error while reading the agent's end: OSError: the exit record cannot be read"
    )


def test_a_claude_cli_agent_that_ended_while_the_orchestrator_was_down_is_explained_too(tmp_path):
    """Taken back from its keeper's record after a restart, its failure still reads from its log: a permanent
    one is not retried as an ordinary failure."""
    from orchestrator.agents.backends import backend_for

    spec = spec_for(tmp_path, ["claude", "-p"])
    spec.log_path.parent.mkdir(parents=True)
    spec.log_path.write_text("=== attempt 1\nInvalid API key · Fix external API key\n", encoding="utf-8")
    verdict = backend_for(spec.role).recorded(spec, None).conclude(1)
    assert verdict.permanent_failure
    assert verdict.failure_reason is not None and verdict.failure_reason.startswith("the Anthropic API rejected")


def test_a_stream_json_claude_agent_taken_back_after_a_restart_is_judged_by_its_own_result(tmp_path):
    """Its exit 0 is not the verdict: the refused tool call in its result is, read from its attempt's output only
    (an earlier attempt's lines in the same log count for nothing)."""
    import json

    from orchestrator.agents.backends import backend_for

    spec = spec_for(tmp_path, ["claude", "-p", "--output-format", "stream-json", "--verbose"])
    spec.log_path.parent.mkdir(parents=True)
    denied = {"tool_name": "Bash", "tool_input": {"command": "orchestrator stop --force"}}
    lines = [
        "\n=== run 3 attempt 0: claude -p\n",
        json.dumps({"type": "result", "subtype": "success", "is_error": True, "result": "earlier"}) + "\n",
        "\n=== run 3 attempt 1: claude -p --output-format stream-json\n",
        json.dumps({"type": "system", "subtype": "init", "session_id": "s-1"}) + "\n",
        json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "x"}]}}) + "\n",
        json.dumps(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "num_turns": 1,
                "session_id": "s-1",
                "permission_denials": [denied],
            }
        )
        + "\n",
    ]
    spec.log_path.write_text("".join(lines), encoding="utf-8")
    verdict = backend_for(spec.role).recorded(spec, None).conclude(0)
    assert verdict.agent_failed and verdict.permanent_failure
    assert verdict.failure_reason is not None and "Bash: orchestrator stop --force" in verdict.failure_reason


def test_a_start_called_off_before_the_keeper_says_the_pid_leaves_no_agent(tmp_path):
    """The start is cancelled while it waits for the keeper's status pipe (a stop of ``up`` at that moment): the
    agent the keeper goes on to start is killed once its pid is said, by a thread that outlives the loop. The
    agent would sleep a minute; its keeper's record says SIGKILL within the deadline."""
    built = keeper.locate()
    assert built is not None, keeper.find().problem
    spec = spec_for(tmp_path, [sys.executable, "-c", "import time; time.sleep(60)"])

    async def main() -> None:
        start = asyncio.ensure_future(ProcessSpawner(tmp_path, built).start(spec, lambda _a, _v: None))
        while not start.done() and not list((tmp_path / ".orchestrator" / "logs").glob("*.log")):
            await asyncio.sleep(0)  # the keeper is started: it has opened the run's log
        assert not start.done(), "the start was over before it could be called off"
        start.cancel()
        with pytest.raises(asyncio.CancelledError):
            await start

    asyncio.run(main())
    record = keeper.exit_path(tmp_path / ".orchestrator", spec.run_id, spec.attempt)
    deadline = time.monotonic() + DEADLINE
    while keeper.read_exit(record) is None:
        assert time.monotonic() < deadline, "the agent of a called-off start is still running"
        time.sleep(0.02)
    assert keeper.read_exit(record) == keeper.ExitRecord(-signal.SIGKILL, timed_out=False)
    target = procs.Target(None, None, spec.run_id, str(tmp_path), attempt=spec.attempt)
    assert procs.find_tree(target) == {}, "nothing of the run is left"
