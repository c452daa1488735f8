"""The ``sdk`` backend against a fake Claude Code CLI: the runner process, then ``start_sdk`` in a loop.

The runner (``python -m orchestrator.agents.sdk.runner``) and claude-agent-sdk run for
real; only the CLI is faked (``tests/fake_claude.py``, given as ``cli_path``), so
nothing reaches Anthropic. Every test passes ``cli_path``: without it the SDK
would start the real CLI it bundles.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import pid_alive, wait_for
from orchestrator.agents import procs
from orchestrator.agents.backends import backend_for
from orchestrator.agents.claude_cli import check_role
from orchestrator.agents.handle import Agent
from orchestrator.agents.sdk import backend, channel, protocol
from orchestrator.agents.sdk.phases import ControlLine, Phase, SdkMessage
from orchestrator.agents.sdk.protocol import RunnerSpec, SpecOptions
from orchestrator.agents.sdk.reasons import describe_error_result, describe_exception
from orchestrator.agents.sdk.session import Session
from orchestrator.agents.sdk.totals import Totals
from orchestrator.agents.sdk.transcript import Output
from orchestrator.agents.spec import LaunchSpec, agent_environment
from orchestrator.config import Config, Role
from orchestrator.core.agent import AttemptVerdict
from orchestrator.core.errors import ConfigError, ControlError

REPO = Path(__file__).resolve().parent.parent
DEADLINE = 30.0
ATTEMPTS = itertools.count(1)


class Runner:
    """A ``python -m orchestrator.agents.sdk.runner`` process, with its socket's events collected as they arrive."""

    def __init__(self, tmp_path: Path, spec: dict[str, Any], env: dict[str, str]) -> None:
        self.record = tmp_path / "record.jsonl"
        child_env = {**os.environ, "PYTHONPATH": str(REPO), "FAKE_CLAUDE_RECORD": str(self.record), **env}
        files = channel.run_files(tmp_path, 1, next(ATTEMPTS))  # each runner of a test on a socket of its own
        listener, self.sock, keys = channel.open_channel(files)
        spec = {**spec, **keys}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.agents.sdk.runner"],
                cwd=tmp_path,
                env=child_env,
                stdin=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(listener.fileno(),),
            )
        finally:
            listener.close()
        self.events: list[dict[str, Any]] = []
        self._lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stderr = ""
        self.readers = [
            threading.Thread(target=self._read_events, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self.readers:
            reader.start()
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(spec) + "\n").encode())
        self.proc.stdin.close()

    def _read_events(self) -> None:
        for line in self.sock.makefile("rb"):
            self._lines.put(json.loads(line))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr += line.decode("utf-8", "replace")

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def _drain(self) -> list[dict[str, Any]]:
        while True:
            try:
                self.events.append(self._lines.get_nowait())
            except queue.Empty:
                return self.events

    def wait_event(self, kind: str, **fields: Any) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            matches = [e for e in self._drain() if e["event"] == kind and all(e.get(k) == v for k, v in fields.items())]
            return matches[-1] if matches else None

        try:
            event: dict[str, Any] = wait_for(found, DEADLINE, f"a {kind} event with {fields}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; events so far {self.events}; stderr {self.stderr}") from None
        return event

    def wait(self) -> int:
        try:
            code = self.proc.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the runner did not exit; events {self._drain()}; stderr {self.stderr}") from None
        for reader in self.readers:  # the socket and stderr reach end of file once the runner and the CLI are gone
            reader.join(DEADLINE)
        self._drain()
        return code

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(DEADLINE)
        for reader in self.readers:
            reader.join(DEADLINE)
        self.sock.close()
        assert self.proc.stderr is not None
        self.proc.stderr.close()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self._drain() if e["event"] == kind]

    def records(self) -> list[dict[str, Any]]:
        """What the fake CLI received, one entry per thing."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def recorded(self, key: str) -> list[Any]:
        return [e[key] for e in self.records() if key in e]


def make_spec(tmp_path: Path, cli: Path | str, prompt: str = "hello", **extra: Any) -> dict[str, Any]:
    options = {"cli_path": str(cli), "cwd": str(tmp_path), **extra.pop("options", {})}
    return {
        "prompt": prompt,
        "options": options,
        "transcript": str(tmp_path / "runs" / "1" / "transcript.jsonl"),
        "resume": None,
        "per_run_usd": None,
        **extra,
    }


Start = Callable[..., Runner]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """Start a runner with a spec and ``FAKE_CLAUDE_*`` settings (``mode="slow"``); each is cleaned up after."""
    runners: list[Runner] = []

    def starter(spec: dict[str, Any], **env: str) -> Runner:
        runners.append(Runner(tmp_path, spec, {f"FAKE_CLAUDE_{k.upper()}": v for k, v in env.items()}))
        return runners[-1]

    yield starter
    for runner in runners:
        runner.cleanup()


def finished(runner: Runner, code: int) -> None:
    assert runner.wait() == code, f"events {runner.events}; stderr {runner.stderr}"


# ---------------------------------------------------------------- the runner process


def test_normal_run_reports_cost_result_and_writes_the_transcript(tmp_path: Path, fake_cli: Path, start: Start) -> None:
    options = {
        "model": "claude-test",
        "permission_mode": "acceptEdits",
        "allowed_tools": ["Read", "Bash"],
        "system_prompt": {"preset": "claude_code", "append": "Be brief."},
    }
    spec = make_spec(tmp_path, fake_cli, options=options)
    runner = start(spec, cost="0.25")
    finished(runner, 0)

    session = runner.of("session")[0]["session_id"]
    assert runner.of("activity")[0]["text"] == "Bash: echo working"
    assert runner.of("activity")[-1]["text"] == "echo: hello"
    assert runner.of("cost") == [{"event": "cost", "usd": 0.25}]
    assert runner.of("result") == [
        {
            "event": "result",
            "cost_usd": 0.25,
            "input_tokens": 100,
            "output_tokens": 20,
            "num_turns": 1,
            "session_id": session,
            "is_error": False,
            "subtype": "success",
        }
    ]
    assert runner.of("failure") == []
    assert runner.recorded("prompt") == ["hello"]
    argv = runner.recorded("argv")[0]
    for flag in (
        ["--model", "claude-test"],
        ["--permission-mode", "acceptEdits"],
        ["--allowedTools", "Read,Bash"],
        ["--append-system-prompt", "Be brief."],
    ):
        assert flag[0] in argv and argv[argv.index(flag[0]) + 1] == flag[1], argv
    assert "--system-prompt" not in argv  # the claude_code preset, not an empty prompt
    assert not any(a.startswith("--resume") for a in argv)
    assert runner.recorded("env")[0]["CLAUDE_CODE_ENTRYPOINT"] == "sdk-py"

    lines = [json.loads(line) for line in (tmp_path / "runs" / "1" / "transcript.jsonl").read_text().splitlines()]
    kinds = [line["type"] for line in lines]
    assert kinds[0] == "prompt" and lines[0]["text"] == "hello"
    assert kinds[1:] == ["system", "assistant", "assistant", "result"]
    assert lines[2]["content"][0] == {
        "type": "tool_use",
        "id": lines[2]["content"][0]["id"],
        "name": "Bash",
        "input": {"command": "echo working", "description": "say it works"},
    }
    assert lines[-1]["total_cost_usd"] == 0.25 and lines[-1]["session_id"] == session


def test_a_plain_system_prompt_is_used_as_is(tmp_path: Path, fake_cli: Path, start: Start) -> None:
    runner = start(make_spec(tmp_path, fake_cli, options={"system_prompt": "You are terse."}))
    finished(runner, 0)
    argv = runner.recorded("argv")[0]
    assert argv[argv.index("--system-prompt") + 1] == "You are terse."


def test_interrupt_ends_the_turn_and_the_session(tmp_path: Path, fake_cli: Path, start: Start) -> None:
    runner = start(make_spec(tmp_path, fake_cli), mode="slow")
    runner.wait_event("activity", text="Bash: echo working")
    started = time.monotonic()
    runner.send({"op": "interrupt", "keep": False})
    finished(runner, 3)
    assert time.monotonic() - started < 10  # the slow turn would take a minute
    assert runner.of("result")[-1]["subtype"] == "error_during_execution"
    assert runner.of("failure") == []
    assert any(e.get("control") == "interrupt" and e["in_turn"] for e in runner.records())


def test_interrupt_with_keep_waits_for_a_tell_in_the_same_session(tmp_path: Path, fake_cli: Path, start: Start) -> None:
    runner = start(make_spec(tmp_path, fake_cli, prompt="[slow] first"))
    runner.wait_event("activity", text="Bash: echo working")
    runner.send({"op": "interrupt", "keep": True})
    first = runner.wait_event("result", subtype="error_during_execution")
    assert runner.proc.poll() is None  # still open, waiting for a tell
    runner.send({"op": "tell", "text": "second"})
    second = runner.wait_event("result", subtype="success")
    finished(runner, 0)
    assert second["session_id"] == first["session_id"]
    assert second["num_turns"] == 2
    assert runner.recorded("prompt") == ["[slow] first", "second"]


def test_tell_is_a_second_turn_in_the_same_session(tmp_path: Path, fake_cli: Path, start: Start) -> None:
    runner = start(make_spec(tmp_path, fake_cli, prompt="first"), cost="0.1")
    runner.send({"op": "tell", "text": "and a follow-up"})
    finished(runner, 0)
    results = runner.of("result")
    assert len(results) == 2
    assert results[0]["session_id"] == results[1]["session_id"]
    assert results[1]["num_turns"] == 2
    assert results[1]["cost_usd"] == pytest.approx(0.2)  # the CLI's running total, not a sum of totals
    assert results[1]["input_tokens"] == 200 and results[1]["output_tokens"] == 40
    assert runner.recorded("prompt") == ["first", "and a follow-up"]
    assert len(set(runner.recorded("pid"))) == 1  # one CLI process served both turns
    assert runner.of("activity")[-1]["text"] == "echo: and a follow-up"


def test_a_cli_crash_fails_with_its_last_stderr_lines(tmp_path: Path, fake_cli: Path, start: Start) -> None:
    runner = start(make_spec(tmp_path, fake_cli), mode="crash")
    finished(runner, 1)
    reason = runner.of("failure")[-1]["reason"]
    assert "exited with status 2" in reason
    assert "segmentation fault in the tokenizer" in reason
    assert "\n" not in reason
    assert "fake-claude: fatal: segmentation fault in the tokenizer" in runner.stderr  # passed through to the log


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("overloaded", "the Anthropic API is overloaded (API Error: Repeated 529 Overloaded errors)"),
        ("notloggedin", "Claude Code is not logged in (Not logged in · Please run /login)"),
        ("malformed", "Claude Code wrote output that is not JSON"),
        ("nocall", "the agent started but made no model call"),
    ],
)
def test_clear_failures_have_one_line_reasons(
    tmp_path: Path, fake_cli: Path, start: Start, mode: str, expected: str
) -> None:
    runner = start(make_spec(tmp_path, fake_cli), mode=mode)
    finished(runner, 1)
    failures = runner.of("failure")
    assert len(failures) == 1, failures
    assert expected in failures[0]["reason"] and "\n" not in failures[0]["reason"]
    assert "budget" not in failures[0]


@pytest.mark.parametrize(
    ("mode", "kind", "resets_at"), [("planlimit", "five_hour", 1767225600), ("keylimit", "rate_limit", None)]
)
def test_a_usage_limit_is_a_failure_that_names_the_limit_and_its_reset(
    tmp_path: Path, fake_cli: Path, start: Start, mode: str, kind: str, resets_at: float | None
) -> None:
    runner = start(make_spec(tmp_path, fake_cli), mode=mode)
    finished(runner, 1)
    failure = runner.of("failure")[-1]
    assert failure["reason"].startswith("rate limited by the Anthropic API"), failure
    assert failure["limit_kind"] == kind and failure.get("resets_at") == resets_at
    assert "permanent" not in failure


def test_a_missing_cli_is_a_clear_failure(tmp_path: Path, start: Start) -> None:
    runner = start(make_spec(tmp_path, tmp_path / "no-such-claude"))
    finished(runner, 1)
    reason = runner.of("failure")[-1]["reason"]
    assert reason.startswith("the Claude Code CLI was not found at ") and "no-such-claude" in reason


def test_per_run_budget_stops_the_run(tmp_path: Path, fake_cli: Path, start: Start) -> None:
    runner = start(make_spec(tmp_path, fake_cli, per_run_usd=0.1), cost="0.25")
    runner.send({"op": "tell", "text": "never answered: the budget is spent"})
    finished(runner, 4)
    assert runner.of("failure") == [
        {"event": "failure", "reason": "per-run budget of $0.10 exceeded ($0.25 spent)", "budget": True}
    ]
    assert runner.recorded("prompt") == ["hello"]
    argv = runner.recorded("argv")[0]
    assert argv[argv.index("--max-budget-usd") + 1] == "0.1"  # so the CLI can also stop a turn that overspends


def test_a_resumed_sessions_per_run_budget_counts_only_what_this_run_adds(
    tmp_path: Path, fake_cli: Path, start: Start
) -> None:
    """A session resumed by a later run (a question's, answered) reports running totals that hold what the earlier
    run spent (``carried_usd``): the per-run budget and its reason count on top of it. The CLI's own cap counts
    only what its process spends, so it is given as it is (0.1 here, not 0.3, which would let 0.3 be spent)."""
    sessions = tmp_path / "sessions.json"
    options = {"max_budget_usd": 0.1}
    for cost, code in (("0.05", 0), ("0.15", 4)):
        sessions.write_text(json.dumps({"sess-1": {"cost": 0.2, "tokens": [100, 10]}}), encoding="utf-8")
        spec = make_spec(tmp_path, fake_cli, resume="sess-1", per_run_usd=0.1, carried_usd=0.2, options=options)
        runner = start(spec, cost=cost, sessions=str(sessions), honor_budget="1")
        finished(runner, code)
        argv = runner.recorded("argv")[-1]
        assert argv[argv.index("--max-budget-usd") + 1] == "0.1"
        assert runner.of("result")[-1]["cost_usd"] == pytest.approx(0.2 + float(cost)), "the session's running total"
    assert runner.of("failure") == [
        {"event": "failure", "reason": "per-run budget of $0.10 exceeded ($0.15 spent)", "budget": True}
    ]


def test_resume_passes_the_session_to_the_cli(tmp_path: Path, fake_cli: Path, start: Start) -> None:
    runner = start(make_spec(tmp_path, fake_cli, resume="sess-1234"))
    finished(runner, 0)
    assert "--resume=sess-1234" in runner.recorded("argv")[0]
    assert runner.of("session")[0]["session_id"] == "sess-1234"
    assert runner.of("result")[-1]["session_id"] == "sess-1234"


@pytest.mark.os_level
def test_sigterm_ends_the_runner_and_its_cli_promptly(tmp_path: Path, fake_cli: Path, start: Start) -> None:
    runner = start(make_spec(tmp_path, fake_cli), mode="slow")
    runner.wait_event("activity", text="Bash: echo working")
    cli_pid = runner.recorded("pid")[0]
    started = time.monotonic()
    runner.proc.send_signal(signal.SIGTERM)
    finished(runner, protocol.EXIT_SIGNALLED)
    assert time.monotonic() - started < 5
    wait_for(lambda: not pid_alive(cli_pid), 10, "the fake CLI to end")


def test_sigterm_before_the_spec_ends_the_runner(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.agents.sdk.runner"],
        stdin=subprocess.PIPE,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        # the thread that reads the spec starts after the signal handlers are in place
        wait_for(lambda: psutil.Process(proc.pid).num_threads() >= 2, what="the runner's spec reader")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(DEADLINE) == protocol.EXIT_SIGNALLED
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdin is not None
        proc.stdin.close()


@pytest.mark.parametrize(
    ("spec_line", "expected"),
    [
        ("not json", "bad spec: the spec on stdin is not JSON"),
        ('{"prompt": "x", "options": {"colour": "blue"}}', "bad spec: unknown option(s) colour"),
        ('{"prompt": "x"}', "bad spec: the spec names no socket channel"),
    ],
)
def test_a_bad_spec_is_a_failure_in_the_log(tmp_path: Path, spec_line: str, expected: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.agents.sdk.runner"],
        input=spec_line.encode() + b"\n",
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=DEADLINE,
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and proc.stdout == b""  # no channel yet: the failure goes to the log
    lines = proc.stderr.decode().splitlines()
    events = [json.loads(line.removeprefix("sdk_runner: ")) for line in lines if line.startswith("sdk_runner: {")]
    assert len(events) == 1 and events[0]["event"] == "failure" and events[0]["reason"].startswith(expected)


# ---------------------------------------------------------------- reasons and totals, in process


def test_failure_reasons_from_sdk_errors() -> None:
    from collections import deque

    from claude_agent_sdk import ProcessError, ResultError

    refused = ResultError(
        "Claude Code returned an error result",
        exit_code=1,
        data={
            "type": "result",
            "subtype": "error_during_execution",
            "is_error": True,
            "errors": ["No conversation found with session ID: abc"],
        },
    )
    assert describe_exception(refused, deque(), SpecOptions()).reason == (
        "Claude Code reported an error (error_during_execution): No conversation found with session ID: abc"
    )
    crash = ProcessError("Command failed", exit_code=1, stderr="Check stderr output for details")
    lines = deque(["starting", "Error: Invalid API key", ""])
    logged_out = describe_exception(crash, lines, SpecOptions())
    assert logged_out.reason.startswith("Claude Code is not logged in (starting | Error") and logged_out.permanent
    assert describe_exception(crash, deque(), SpecOptions()).reason == (
        "Claude Code exited with status 1: it wrote nothing to stderr"
    )
    max_turns = {"subtype": "error_max_turns", "is_error": True}
    assert describe_error_result(max_turns, None, SpecOptions(max_turns=3)).reason == (
        "stopped after the role's max_turns (3) turns"
    )


def test_totals_take_running_totals_and_sum_turns() -> None:
    from claude_agent_sdk import ResultMessage

    def result(cost: float, model_usage: dict[str, Any] | None) -> ResultMessage:
        return ResultMessage(
            subtype="success",
            duration_ms=1,
            duration_api_ms=1,
            is_error=False,
            num_turns=3,
            session_id="s",
            total_cost_usd=cost,
            model_usage=model_usage,
            usage={"input_tokens": 5, "cache_read_input_tokens": 10, "output_tokens": 2},
        )

    totals = Totals()
    for cost in (0.5, 0.75):
        totals.add(result(cost, None))  # no modelUsage: per-turn ``usage`` is summed
    assert (totals.cost_usd, totals.num_turns, totals.input_tokens, totals.output_tokens) == (0.75, 6, 30, 4)
    totals.add(result(0.0, {"m": {"inputTokens": 7, "cacheReadInputTokens": 100, "outputTokens": 9}}))
    assert (totals.cost_usd, totals.input_tokens, totals.output_tokens) == (0.75, 107, 9)  # a zeroed crash result


# ---------------------------------------------------------------- the session loop, replayed


class ScriptedClient:
    """Stands in for ``ClaudeSDKClient``: records what the session sends; its messages come from the script."""

    def __init__(self, options: Any) -> None:
        self.prompts: list[str] = []
        self.interrupts = 0

    async def connect(self) -> None:
        pass

    async def query(self, prompt: Any) -> None:
        async for message in prompt:
            self.prompts.append(message["message"]["content"])

    async def interrupt(self) -> None:
        self.interrupts += 1

    async def receive_messages(self) -> Any:
        await asyncio.Event().wait()  # the script posts the CLI's messages itself, in order with the controls
        yield

    async def disconnect(self) -> None:
        pass


class Collected(Output):
    """The runner's writer, keeping events and notes instead of writing them."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []
        self.notes: list[str] = []

    def event(self, event: Any) -> None:
        self.events.append(event.wire())

    def note(self, text: str) -> None:
        self.notes.append(text)


def control(**message: Any) -> ControlLine:
    return ControlLine(json.dumps(message))


def turn_result(subtype: str = "success", cost: float = 0.01) -> SdkMessage:
    from claude_agent_sdk import ResultMessage

    return SdkMessage(
        ResultMessage(
            subtype=subtype,
            duration_ms=1,
            duration_api_ms=1,
            is_error=subtype != "success",
            num_turns=1,
            session_id="s",
            total_cost_usd=cost,
        )
    )


INTERRUPTED = turn_result("error_during_execution")
KEEP, CANCEL = control(op="interrupt", keep=True), control(op="interrupt", keep=False)
TELL_A, TELL_B = control(op="tell", text="a"), control(op="tell", text="b")

SCRIPTS = {  # the events after the first prompt, in order -> exit status, prompts sent, interrupts sent
    "one turn": ([turn_result()], 0, ["p"], 0),
    "a tell: both turns": ([TELL_A, turn_result(), turn_result()], 0, ["p", "a"], 0),
    "an error result fails": ([turn_result("error_during_execution")], 1, ["p"], 0),
    "interrupt ends the session": ([CANCEL, INTERRUPTED], 3, ["p"], 1),
    "interrupt keep, then a tell": ([KEEP, INTERRUPTED, TELL_B, turn_result()], 0, ["p", "b"], 1),
    "a tell queued while pausing": ([KEEP, TELL_A, INTERRUPTED, turn_result()], 0, ["p", "a"], 1),
    "keep, then cancel: cancel wins": ([KEEP, CANCEL, INTERRUPTED, TELL_A], 3, ["p"], 1),
    "cancel, then keep: still cancelled": ([CANCEL, KEEP, INTERRUPTED, TELL_A], 3, ["p"], 1),
    "keep, a queued tell: the tell": ([TELL_A, KEEP, INTERRUPTED, turn_result()], 0, ["p", "a"], 1),
    "waiting, then cancel": ([KEEP, INTERRUPTED, KEEP, CANCEL], 3, ["p"], 1),
    "a second interrupt after a tell": (
        [KEEP, INTERRUPTED, TELL_A, KEEP, INTERRUPTED, TELL_B, turn_result()],
        0,
        ["p", "a", "b"],
        2,
    ),
    "over the per-run budget": ([TELL_A, turn_result(cost=0.25)], 4, ["p"], 0),
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_session_loop_replays_a_script(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import claude_agent_sdk

    script, code, prompts, interrupts = SCRIPTS[name]
    monkeypatch.setattr(claude_agent_sdk, "ClaudeSDKClient", ScriptedClient)
    spec = RunnerSpec(prompt="p", per_run_usd=0.2)
    out = Collected()

    async def replay() -> tuple[int, Session]:
        events: asyncio.Queue[Any] = asyncio.Queue()
        for event in script:
            events.put_nowait(event)
        session = Session(spec, None, events, out)
        return await asyncio.wait_for(session.run(), 5.0), session

    assert (result := asyncio.run(replay()))[0] == code, out.events
    client = result[1].client
    assert (client.prompts, client.interrupts) == (prompts, interrupts)
    assert result[1].phase is Phase.DONE and [e for e in out.events if e["event"] == "done"] == [
        {"event": "done", "code": code}
    ]
    assert any(e["event"] == "failure" for e in out.events) == (code in (1, 4))


def test_a_bad_control_line_is_noted_with_its_field(monkeypatch: pytest.MonkeyPatch) -> None:
    import claude_agent_sdk

    monkeypatch.setattr(claude_agent_sdk, "ClaudeSDKClient", ScriptedClient)
    out = Collected()
    script = [
        ControlLine('{"op": "tell"}'),
        ControlLine('{"op": "pause"}'),
        control(op="interrupt", keep="maybe"),
        ControlLine("not json"),
        turn_result(),
    ]

    async def replay() -> int:
        events: asyncio.Queue[Any] = asyncio.Queue()
        for event in script:
            events.put_nowait(event)
        return await asyncio.wait_for(Session(RunnerSpec(prompt="p"), None, events, out).run(), DEADLINE)

    assert asyncio.run(replay()) == 0
    fields = [note.removeprefix("ignored a control line (").split(":")[0] for note in out.notes]
    assert fields == ["text", "op", "keep", "the control line"], out.notes
    assert "Field required" in out.notes[0] and "'pause'" in out.notes[1]


# ---------------------------------------------------------------- the sdk backend in the orchestrator's loop


def make_role(tmp_path: Path, cli: Path, **settings: Any) -> Role:
    return Role(name="writer", prompt="prompts/writer.md", backend="sdk", cli_path=str(cli), **settings)


def launch_spec(tmp_path: Path, role: Role, prompt: str = "hello", **extra: Any) -> LaunchSpec:
    memo = tmp_path / "memo" / "writer" / "inbox" / "a.md"
    env = agent_environment(role, tmp_path, 7, 1, [memo])
    env.update({"FAKE_CLAUDE_RECORD": str(tmp_path / "record.jsonl"), **extra.pop("env", {})})
    return LaunchSpec(
        run_id=7,
        attempt=1,
        role=role,
        root=tmp_path,
        prompt=prompt,
        memo_paths=[memo],
        log_path=tmp_path / "logs" / "7.log",
        cwd=tmp_path,
        env=env,
        **extra,
    )


async def started(spec: LaunchSpec) -> tuple[Agent, asyncio.Future[int], list[dict[str, Any]]]:
    """The runner started with no keeper (``recovery: restart`` without the binary): by itself, on its socket."""
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[int] = loop.create_future()
    seen: list[dict[str, Any]] = []

    def on_exit(agent: Agent, verdict: AttemptVerdict) -> None:
        exited.set_result(verdict.returncode)

    agent = await backend_for(spec.role).start(spec, on_exit, None)
    assert agent.follower is not None
    watch_events(agent.follower, seen.append)
    return agent, exited, seen


def watch_events(follower: Any, sink: Any) -> None:
    """Give ``sink`` each runner event's JSON as the follower applies it (what came over the socket)."""
    apply = follower.apply

    def seen(event: Any) -> None:
        sink(event.wire())
        apply(event)

    follower.apply = seen


async def until(condition: Any, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def test_start_sdk_reports_figures_and_takes_a_tell(tmp_path: Path, fake_cli: Path) -> None:
    role = make_role(tmp_path, fake_cli, env={"ROLE_VAR": "1"})
    spec = launch_spec(tmp_path, role, prompt="[slow] first", env={"FAKE_CLAUDE_COST": "0.5"})

    async def scenario() -> tuple[Agent, int, list[dict[str, Any]]]:
        agent, exited, seen = await started(spec)
        await until(lambda: agent.activity == "Bash: echo working", "the first tool use")
        assert agent.session_id is not None and agent.verdict is None
        await agent.interrupt(keep=True)
        assert agent.follower.interrupted
        await until(lambda: agent.result.get("subtype") == "error_during_execution", "the interrupted turn's result")
        await agent.tell("second")
        assert not agent.follower.interrupted
        code = await asyncio.wait_for(exited, DEADLINE)
        with pytest.raises(ControlError, match="already ended"):
            await agent.tell("too late")
        return agent, code, seen

    agent, code, seen = asyncio.run(scenario())
    assert code == 0
    assert agent.backend == "sdk"
    assert agent.result == {
        "cost_usd": 1.0,
        "input_tokens": 200,
        "output_tokens": 40,
        "num_turns": 2,
        "session_id": agent.session_id,
        "is_error": False,
        "subtype": "success",
    }
    assert agent.cost_usd == 1.0 and agent.activity == "echo: second"
    assert agent.verdict.failure_reason is None and not agent.verdict.budget_exceeded
    assert [e["event"] for e in seen].count("result") == 2
    assert agent.follower.transcript == tmp_path / ".orchestrator" / "runs" / "7" / "transcript.jsonl"
    assert agent.follower.transcript.exists()
    record = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
    assert record[0]["cwd"] == str(tmp_path)
    assert record[0]["env"]["ORCHESTRATOR_RUN_ID"] == "7"
    assert record[0]["env"]["PYTHONPATH"] == spec.env.get("PYTHONPATH")  # the runner's own entry is gone
    assert "=== run 7 attempt 1: sdk session" in (tmp_path / "logs" / "7.log").read_text()
    assert agent.pid not in procs._spared


def test_start_sdk_interrupt_and_budget(tmp_path: Path, fake_cli: Path) -> None:
    async def interrupted() -> tuple[Agent, int]:
        agent, exited, _ = await started(launch_spec(tmp_path, make_role(tmp_path, fake_cli), prompt="[slow] x"))
        await until(lambda: agent.activity is not None, "activity")
        await agent.interrupt()
        return agent, await asyncio.wait_for(exited, DEADLINE)

    agent, code = asyncio.run(interrupted())
    assert code == protocol.EXIT_INTERRUPTED and agent.verdict.interrupted and agent.verdict.failure_reason is None

    role = make_role(tmp_path, fake_cli, budget={"per_run_usd": 0.2})

    async def over_budget() -> tuple[Agent, int]:
        agent, exited, _ = await started(launch_spec(tmp_path, role, resume="sess-9", env={"FAKE_CLAUDE_COST": "0.3"}))
        return agent, await asyncio.wait_for(exited, DEADLINE)

    agent, code = asyncio.run(over_budget())
    assert code == protocol.EXIT_BUDGET and agent.verdict.budget_exceeded
    assert agent.verdict.failure_reason == "per-run budget of $0.20 exceeded ($0.30 spent)"
    assert agent.result["session_id"] == "sess-9"


SCRIPTED_RUNNER = """
import json, socket, sys
line = sys.stdin.readline()
open("spec.jsonl", "w").write(line)
connection, _ = socket.socket(fileno=json.loads(line)["listen_fd"]).accept()
for line in ['{"event": "cost", "usd": "lots"}', "not json", '{"event": "party"}', '["activity"]',
             '{"event": "activity", "text": "ok"}', '{"event": "cost", "usd": 0.5}', '{"event": "done", "code": 0}']:
    connection.sendall(line.encode() + b"\\n")
"""


def test_start_sdk_skips_lines_that_are_no_event(
    tmp_path: Path, fake_cli: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "scripted_runner.py").write_text(SCRIPTED_RUNNER)
    monkeypatch.setattr(backend, "RUNNER_MODULE", "scripted_runner")  # ``python -m`` finds it in the role's cwd

    async def scenario() -> tuple[Agent, int, list[dict[str, Any]]]:
        agent, exited, seen = await started(launch_spec(tmp_path, make_role(tmp_path, fake_cli), prompt="hi"))
        return agent, await asyncio.wait_for(exited, DEADLINE), seen

    agent, code, seen = asyncio.run(scenario())
    assert code == 0
    assert seen == [{"event": "activity", "text": "ok"}, {"event": "cost", "usd": 0.5}, {"event": "done", "code": 0}]
    assert (agent.activity, agent.cost_usd, agent.closing) == ("ok", 0.5, True)
    assert protocol.parse_spec((tmp_path / "spec.jsonl").read_text()).prompt == "hi"


def test_check_role(tmp_path: Path, fake_cli: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An sdk role's start-up check, the one ``up`` and ``doctor`` run: the SDK installed, the CLI found."""

    def check(role: Role) -> None:
        check_role(Config(root=tmp_path, path=tmp_path / "roles.yaml", roles={role.name: role}), role)

    check(make_role(tmp_path, fake_cli))
    check(make_role(tmp_path, Path("bin/fake-claude")))  # relative to the project root
    with pytest.raises(ConfigError, match=r"roles.yaml: roles.writer.cli_path: '.*nope' is not an executable file$"):
        check(make_role(tmp_path, tmp_path / "nope"))
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "claude_agent_sdk" else real(name))
    with pytest.raises(ConfigError) as info:
        check(make_role(tmp_path, fake_cli))
    assert str(info.value) == (
        f"{tmp_path / 'roles.yaml'}: roles.writer.backend: sdk needs claude-agent-sdk, which is not installed; "
        "install it with pip install 'orchestrator[sdk]'"
    )
