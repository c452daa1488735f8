"""The runner's socket channel against the fake CLI, with no orchestrator: a test is the client.

The test makes the listening socket the way ``start_sdk`` does (``channel.listen``),
the runner inherits it, and the test connects, goes away and connects again, as
an orchestrator that was SIGKILLed and restarted would.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from orchestrator.agents.sdk import channel
from orchestrator.agents.sdk.protocol import parse_result

REPO = Path(__file__).resolve().parent.parent
DEADLINE = 30.0


class Client:
    """One connection to the runner's socket, reading its event lines."""

    def __init__(self, files: channel.RunFiles) -> None:
        sock = channel.connect(files)
        assert sock is not None, "nobody listens on the runner's socket"
        sock.setblocking(True)
        sock.settimeout(DEADLINE)
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.events: list[dict[str, Any]] = []

    def until(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Read events until one of ``kind`` with ``fields`` arrives."""
        while True:
            line = self.reader.readline()
            assert line, f"the socket closed before a {kind} event with {fields}; got {self.events}"
            event = json.loads(line)
            self.events.append(event)
            if event["event"] == kind and all(event.get(k) == v for k, v in fields.items()):
                return event

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def start_runner(tmp_path: Path, fake_cli: Path, files: channel.RunFiles, prompt: str) -> subprocess.Popen[bytes]:
    listener = channel.listen(files)
    spec = {
        "prompt": prompt,
        "options": {"cli_path": str(fake_cli), "cwd": str(tmp_path)},
        "transcript": str(files.folder / "transcript.jsonl"),
        "listen_fd": listener.fileno(),
        "socket_path": str(files.socket),
        "events_path": str(files.events),
        "result_path": str(files.result),
    }
    log = open(tmp_path / "runner.log", "wb")  # noqa: SIM115 - the child has its own copy
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.agents.sdk.runner"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO), "FAKE_CLAUDE_RECORD": str(tmp_path / "record.jsonl")},
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            pass_fds=(listener.fileno(),),
        )
    finally:
        listener.close()
        log.close()
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(spec) + "\n").encode())
    proc.stdin.close()  # the spec, then end of file: the rest travels over the socket
    return proc


def test_a_reconnecting_client_gets_the_latest_events_then_live_ones_and_controls_work(
    tmp_path: Path, fake_cli: Path
) -> None:
    files = channel.run_files(tmp_path / ("p" * 120), 7, 2)  # a root past the 108 bytes of a socket path
    first_gate = tmp_path / "gate"
    proc = start_runner(tmp_path, fake_cli, files, f"[wait:{first_gate}] first")
    try:
        assert stat.S_IMODE(files.folder.stat().st_mode) == 0o700
        assert stat.S_IMODE(files.socket.stat().st_mode) == 0o600
        one = Client(files)
        session = one.until("session")["session_id"]
        one.until("activity", text="Bash: echo working")
        one.send({"op": "interrupt", "keep": True})  # the session then waits for a tell
        one.until("result", subtype="error_during_execution")
        one.close()  # the orchestrator went away: the runner carries on

        two = Client(files)
        backlog = [two.until("result")]  # the latest of each kind comes first, the result among them
        kinds = [e["event"] for e in two.events]
        assert kinds.count("session") == 1 and two.events[kinds.index("session")]["session_id"] == session
        assert len(kinds) == len(set(kinds)), f"one event of each kind, not the whole history: {kinds}"
        assert backlog[0]["num_turns"] == 1 and proc.poll() is None
        two.send({"op": "tell", "text": "second"})
        done = two.until("done")
        assert done["code"] == 0
        assert proc.wait(DEADLINE) == 0
        two.close()

        result = parse_result(files.result.read_bytes())
        assert result.code == 0 and stat.S_IMODE(files.result.stat().st_mode) == 0o600
        last = [e for e in result.events if e.event == "result"]
        assert len(last) == 1 and last[0].wire()["num_turns"] == 2
        logged = [json.loads(line) for line in files.events.read_text().splitlines()]
        assert [e["event"] for e in logged].count("result") == 2  # the log has every event, the result the latest
        assert stat.S_IMODE(files.events.stat().st_mode) == 0o600
        assert channel.recorded_events(files) == result.events
        assert not files.socket.exists(), "the runner removes its socket when it exits"
        assert channel.connect(files) is None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(DEADLINE)


def test_without_a_result_file_the_event_log_is_read_to_its_last_whole_line(tmp_path: Path) -> None:
    files = channel.run_files(tmp_path, 1, 1)
    files.folder.mkdir(parents=True)
    files.events.write_text(
        '{"event": "session", "session_id": "s-1"}\n{"event": "cost", "usd": 0.5}\nnot json\n{"event": "cost", "us'
    )
    assert [e.wire() for e in channel.recorded_events(files)] == [
        {"event": "session", "session_id": "s-1"},
        {"event": "cost", "usd": 0.5},
    ]


def test_listen_replaces_a_stale_socket_and_connect_finds_nobody_after_close(tmp_path: Path) -> None:
    files = channel.run_files(tmp_path, 3, 1)
    for _ in range(2):
        listener = channel.listen(files)
        client = channel.connect(files)
        assert client is not None
        client.close()
        listener.close()
    assert files.socket.exists()
    assert channel.connect(files) is None  # a socket file with nobody behind it


def test_start_sdk_under_the_keeper_talks_over_the_socket(tmp_path: Path, fake_cli: Path) -> None:
    import asyncio

    from test_sdk_runner import launch_spec, make_role, watch_events

    from orchestrator.agents import keeper, procs
    from orchestrator.agents.backends import backend_for
    from orchestrator.agents.handle import Agent
    from orchestrator.agents.local import LocalProcess
    from orchestrator.core.agent import AttemptVerdict

    binary = keeper.locate()
    assert binary is not None, f"no usable keeper in this checkout: {keeper.find().problem} (make, or pip install -e .)"
    spec = launch_spec(tmp_path, make_role(tmp_path, fake_cli), prompt="[slow] first", env={"FAKE_CLAUDE_COST": "0.5"})

    async def scenario() -> tuple[Agent, int, list[str], int]:
        exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        seen: list[str] = []

        def on_exit(_agent: Agent, verdict: AttemptVerdict) -> None:
            exited.set_result(verdict.returncode)

        agent = await backend_for(spec.role).start(spec, on_exit, binary)
        assert agent.follower is not None and isinstance(agent.transport, LocalProcess)
        watch_events(agent.follower, lambda event: seen.append(event["event"]))
        keeper_pid = psutil.Process(agent.pid).ppid()
        assert agent.pid != keeper_pid and keeper.is_keeper(keeper_pid)
        deadline = asyncio.get_running_loop().time() + DEADLINE
        while agent.activity != "Bash: echo working":
            assert asyncio.get_running_loop().time() < deadline, "no activity over the socket"
            await asyncio.sleep(0.02)
        await agent.interrupt(keep=True)
        await agent.tell("second")
        return agent, await asyncio.wait_for(exited, DEADLINE), seen, keeper_pid

    agent, code, seen, keeper_pid = asyncio.run(scenario())
    files = channel.run_files(tmp_path, 7, 1)
    assert code == 0 and keeper.read_exit(tmp_path / ".orchestrator" / "runs" / "7" / "1.exit") is not None
    assert agent.result["num_turns"] == 2 and agent.cost_usd == 1.0 and agent.session_id
    assert seen.count("result") == 2 and seen[-1] == "done"
    assert parse_result(files.result.read_bytes()).code == 0
    assert agent.pid not in procs._spared and keeper_pid not in procs._spared
