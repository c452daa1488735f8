"""Endings always answer: every reply waiting for a run's end is answered, every wait has a deadline, every shutdown
step runs, and a bug ends every run it touched.

Each test puts an exception (or a silence) where one step of an ending happens: a listener of ``finish``, the
``finish`` itself, the stop of a run, an agent that does not take its interrupt, a reply that never comes, one
step of `up`'s shutdown. The replay harness (``tests/replay.py``) drives the real loop with a manual clock; the
shutdown is a real `up` with the fault put in by ``tests/fault_injection``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import Project, wait_for
from fault_injection import fault_injection
from orchestrator import cli
from orchestrator.control import client
from orchestrator.core.errors import ControlError, DeadlineError
from orchestrator.core.events import CancelRequested, InterruptRequested, StopRequested, TellRequested
from orchestrator.supervisor import replies
from orchestrator.supervisor.requests import ANSWER_SLACK, TELL_WITHIN
from replay import Replay


def play(tmp_path: Path, scenario: Callable[[Path], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario(tmp_path))


def refusal(reply: asyncio.Future[Any]) -> BaseException:
    assert reply.done(), "the reply was never answered"
    error = reply.exception()
    assert error is not None, f"expected a refusal, got {reply.result()}"
    return error


# ------------------------------------------------------------------ finish and drop answer every waiting reply
def test_finish_answers_the_cancel_its_receipt_could_not_be_made_for(tmp_path: Path) -> None:
    """The announcer raises while it records the cancellation: the cancel is still answered, saying how it ended."""

    async def scenario(root: Path) -> None:
        r = Replay(root)
        await r.drop("builder", "X-1.md")

        def broken(**_fields: Any) -> None:
            raise RuntimeError("injected fault in record_cancellation")

        r.sup.store.record_cancellation = broken  # type: ignore[method-assign]
        reply = await r.request(CancelRequested, memo="X-1")
        assert reply.done(), "the cancel was never answered"
        answer = reply.result()
        assert answer["state"] == "cancelled" and answer["previous_state"] == "running"
        assert answer["note"].startswith("ended as cancelled; its receipt could not be made")
        assert r.folder("builder", "cancelled") == ["X-1.md"] and not r.sup.runs
        assert "Announcer" in r.console.text and "while ending a run" in r.console.text
        r.close()

    play(tmp_path, scenario)


def test_a_run_dropped_after_its_finish_failed_answers_its_cancel(tmp_path: Path) -> None:
    """``finish`` itself raises (twice: for the cancel's end, then for the internal error's): the run is dropped,
    and the cancel that waited for it is told so in one line instead of waiting for ever."""

    async def scenario(root: Path) -> None:
        r = Replay(root)
        await r.drop("builder", "X-1.md")
        r.spawner.hold_stop = asyncio.Event()
        reply = await r.request(CancelRequested, memo="X-1")
        assert r.state("X-1") == "cancelling"

        def broken(*_args: Any) -> None:
            raise RuntimeError("injected fault in moving the memos")

        r.sup.lc.memo_moves.move = broken  # type: ignore[method-assign]
        r.spawner.hold_stop.set()
        await r.settle()
        error = refusal(reply)
        assert isinstance(error, ControlError) and "ended as dropped" in str(error), error
        assert "\n" not in str(error)
        assert not r.sup.runs and r.sup.lc.slots.in_use == 0
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ a second cancel
def test_a_second_cancel_returns_with_the_first_ones_receipt(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root)
        await r.drop("builder", "X-1.md")
        r.spawner.hold_stop = asyncio.Event()
        first = await r.request(CancelRequested, memo="X-1", reason="enough")
        second = await r.request(CancelRequested, memo="X-1")
        assert not first.done() and not second.done(), "both wait for the one stop"
        r.spawner.hold_stop.set()
        await r.settle()
        receipt = first.result()
        assert receipt["previous_state"] == "running" and receipt["state"] == "cancelled"
        note = {"previous_state": "cancelling", "note": "it was already being cancelled"}
        assert second.result() == {**receipt, **note}
        assert len(r.spawner.stops) == 1, "one stop for both"
        r.close()

    play(tmp_path, scenario)


@pytest.mark.parametrize("exit_first", [True, False], ids=["exit-then-stop-done", "stop-done-then-exit"])
def test_a_cancelled_agent_is_asked_once_what_it_left_whichever_of_its_exit_and_its_stop_is_told_first(
    tmp_path: Path, exit_first: bool
) -> None:
    # the exit is told after the stop's outcome when the agent's end is read off the loop; the run is over by
    # then, and a Ray attempt's actor (which holds its CPUs) is let go only when its handle is asked
    async def scenario(root: Path) -> None:
        r = Replay(root)
        r.spawner.exit_on_stop = exit_first
        await r.drop("builder", "X-1.md")
        agent = r.agent("X-1")
        reply = await r.request(CancelRequested, memo="X-1")
        assert reply.result()["state"] == "cancelled"
        agent.exit(-15)  # already told when exit_first
        await r.settle()
        assert r.spawner.asked_left == [agent.spec.run_id]
        r.close()

    play(tmp_path, scenario)


def test_a_second_cancel_of_a_run_a_bug_ended_says_how_it_ended(tmp_path: Path) -> None:
    """The stop's end raises: the run ends as failed, and both cancels say so (not "cancelled")."""

    async def scenario(root: Path) -> None:
        r = Replay(root)
        await r.drop("builder", "X-1.md")
        r.spawner.hold_stop = asyncio.Event()
        first = await r.request(CancelRequested, memo="X-1")
        second = await r.request(CancelRequested, memo="X-1")

        def broken(*_args: Any) -> None:
            raise RuntimeError("injected fault in the attempt's record")

        r.sup.lc.end_attempt = broken  # type: ignore[method-assign]
        r.spawner.hold_stop.set()
        await r.settle()
        assert first.result()["state"] == "failed"
        assert second.result()["state"] == "failed" and second.result()["note"] == "it was already being cancelled"
        assert r.folder("builder", "failed") == ["X-1.md"] and r.sup.lc.slots.in_use == 0
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ the server's deadlines
def test_a_cancel_whose_stop_never_ends_answers_by_its_deadline(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"grace": "2s"}})
        await r.drop("builder", "X-1.md", front={"id": "X-1"})
        run_id = r.run_of("X-1").run_id
        r.spawner.hold_stop = asyncio.Event()  # never set: the stop hangs
        reply = await r.request(CancelRequested, memo="X-1")
        seconds = replies.stop_deadline([r.run_of("X-1")])
        assert seconds == 2 * 2 + replies.STOP_SLACK
        await r.advance(seconds - 0.5)
        assert not reply.done(), "answered before its deadline"
        await r.advance(0.5)
        error = refusal(reply)
        assert isinstance(error, DeadlineError) and error.exit_code == 11
        assert str(error) == (
            f"cancel: after {seconds:g}s still waiting for run {run_id} (builder, X-1, cancelling) to end; "
            "the stop goes on (`orchestrator status` shows when it ends)"
        )
        assert r.state("X-1") == "cancelling", "the deadline answers; it does not end the run"
        r.spawner.hold_stop.set()
        await r.settle()
        assert r.folder("builder", "cancelled") == ["X-1.md"]
        r.close()

    play(tmp_path, scenario)


def test_an_interrupt_the_agent_never_takes_answers_by_its_deadline(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"sdk": {"backend": "sdk", "grace": "3s"}})
        await r.drop("sdk", "I-1.md", front={"id": "I-1"})
        never = asyncio.Event()

        async def stuck(keep: bool = False) -> None:
            await never.wait()

        r.agent("I-1").interrupt = stuck  # type: ignore[method-assign]
        reply = await r.request(InterruptRequested, memo="I-1")
        await r.advance(3 + ANSWER_SLACK)
        error = refusal(reply)
        assert isinstance(error, DeadlineError)
        assert "has still not taken the interrupt; it is interrupting" in str(error), error
        r.close()

    play(tmp_path, scenario)


def test_a_tell_the_agent_never_takes_answers_by_its_deadline(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"sdk": {"backend": "sdk"}})
        await r.drop("sdk", "T-1.md", front={"id": "T-1"})
        never = asyncio.Event()

        async def stuck(text: str) -> None:
            await never.wait()

        r.agent("T-1").tell = stuck  # type: ignore[method-assign]
        reply = await r.request(TellRequested, memo="T-1")
        await r.advance(TELL_WITHIN)
        error = refusal(reply)
        assert isinstance(error, DeadlineError) and "has still not taken the text" in str(error), error
        assert TELL_WITHIN < 30, "the server answers before the client (30 s) gives up"
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ an internal error ends what it touched
def _stop_that_breaks_on(r: Replay, nth: int) -> None:
    """The agent stops' ``stop``, raising at its ``nth`` call (as a bug in starting a stop would)."""
    real = r.sup.agent_stops.stop
    calls = []

    def stop(*args: Any, **kwargs: Any) -> None:
        calls.append(args)
        if len(calls) == nth:
            raise RuntimeError("injected fault in starting a stop")
        real(*args, **kwargs)

    r.sup.agent_stops.stop = stop  # type: ignore[method-assign]


def test_an_internal_error_in_a_cancel_fails_every_run_it_touched(tmp_path: Path) -> None:
    """``cancel --role`` names no run: the bug's event has no ``run_id``, and still no run stays ``cancelling``."""

    async def scenario(root: Path) -> None:
        r = Replay(root)
        await r.drop("builder", "A.md")
        await r.drop("builder", "B.md")
        _stop_that_breaks_on(r, 2)
        reply = await r.request(CancelRequested, role="builder")
        assert isinstance(refusal(reply), ControlError)
        assert not r.sup.runs, f"left: {[(run.label, run.state.value) for run in r.sup.runs.values()]}"
        assert r.sup.lc.slots.in_use == 0
        assert r.folder("builder", "failed") == ["A.md", "B.md"]
        await r.drop("builder", "C.md")
        await r.exit("C", 0)
        assert r.folder("builder", "archive") == ["C.md"], "the loop goes on"
        r.close()

    play(tmp_path, scenario)


def test_an_internal_error_in_a_forced_stop_leaves_no_run_stopping(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root)
        await r.drop("builder", "A.md")
        await r.drop("builder", "B.md")
        _stop_that_breaks_on(r, 2)
        await r.request(StopRequested, force=True)
        assert not r.sup.runs, f"left: {[(run.label, run.state.value) for run in r.sup.runs.values()]}"
        assert r.sup.lc.slots.in_use == 0 and r.sup.done.is_set(), "nothing holds the ending open"
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ the client's deadline
def _mute_server(root: Path) -> tuple[socket.socket, threading.Event]:
    """A server on the project's socket that reads its one request and never answers until released."""
    folder = root / ".orchestrator"
    folder.mkdir(mode=0o700, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(folder / "control.sock"))
    server.listen(1)
    release = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(4096)
            release.wait(60)

    threading.Thread(target=serve, daemon=True).start()
    return server, release


@pytest.mark.parametrize(
    ("argv", "request_line"), [(["cancel", "X-1"], "`cancel X-1`"), (["interrupt", "X-1"], "`interrupt X-1`")]
)
def test_cancel_and_interrupt_give_up_on_a_lost_reply_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    request_line: str,
) -> None:
    monkeypatch.setattr(client, "LONG_WAIT", 0.5)
    server, release = _mute_server(tmp_path)
    ended: list[int] = []
    command = threading.Thread(target=lambda: ended.append(cli.main([*argv, "--root", str(tmp_path)])), daemon=True)
    try:
        command.start()
        command.join(10)
        assert ended, "the command still waits for an answer that never comes"
    finally:
        release.set()
        command.join(10)
        server.close()
    assert ended == [11]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"did not answer {request_line} within 0.5s" in err, err


def test_a_cancel_answered_with_another_end_is_printed_as_that_end() -> None:
    from orchestrator.commands.running import _describe_cancel

    failed = {"memo": "X-1.md", "role": "builder", "state": "failed", "reason": "internal error: RuntimeError: boom"}
    assert _describe_cancel(failed) == "X-1.md (builder) ended as failed: internal error: RuntimeError: boom"


def test_a_deadline_has_its_own_exit_status_and_http_status() -> None:
    pytest.importorskip("starlette")
    from orchestrator.web.errors import from_exception

    error = DeadlineError("cancel: after 14s still waiting for run 1 (builder, X-1, cancelling) to end")
    assert error.exit_code == 11 and client.CONTROL_ERRORS[error.code] is DeadlineError
    answer = from_exception(error)
    assert answer.status_code == 504 and json.loads(answer.body)["error"]["code"] == "deadline"


def test_every_wait_of_the_client_has_a_deadline() -> None:
    """No request may wait for ever: ``call`` takes no ``None``, and the long waits end after the server's own."""
    import inspect

    assert inspect.signature(client.call).parameters["timeout"].annotation == "float"
    assert client.LONG_WAIT > client.ANSWER_WITHIN >= replies.stop_deadline([])
    assert TELL_WITHIN < inspect.signature(client.call).parameters["timeout"].default


# ------------------------------------------------------------------ every shutdown step runs
STEPS = [
    "orchestrator.retention.daily:DailyPass.stop",  # the first feature stopped
    "orchestrator.intake.inotify:InotifyWatcher.stop",
    "orchestrator.control.channel:ControlServer.close",
    "orchestrator.supervisor.agent_stops:AgentStops.drain",  # the step before the store
]


@pytest.mark.internal_error_expected
@pytest.mark.parametrize("step", STEPS, ids=[s.split(":")[1] for s in STEPS])
def test_every_shutdown_step_runs_when_one_raises(project: Project, step: str) -> None:
    project.configure()
    orch = project.up(**fault_injection(FAULT_RAISE_IN=step))
    project.drop("builder", "D-1.md", {"id": "D-1"})
    wait_for(lambda: project.folder("builder", "archive") == ["D-1.md"], what="D-1 archived")
    assert orch.stop() == 0, f"a step that raised is logged, not a crash:\n{orch.output}"
    qualname = step.split(":")[1]
    lines = [line for line in orch.output.splitlines() if f"injected fault in {qualname}" in line]
    assert len(lines) == 1, f"the failure is logged once on the terminal:\n{orch.output}"
    assert "Traceback" not in orch.output
    state = project.root / ".orchestrator"
    assert not (state / "control.sock").exists(), "the socket's file is removed"
    assert not (state / "state.db-wal").exists(), "the store is committed, checkpointed and closed"
    log = (state / "orchestrator.log").read_text(encoding="utf-8")
    assert log.count(f"RuntimeError: injected fault in {qualname}") >= 1
    result = project.cli("status", "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["running"] is False, result.stderr


def test_a_cancels_deadline_counts_what_its_agents_stop_may_wait_for_where_it_runs() -> None:
    """Twice the grace and 10 s, plus the agent's ``stop_slack`` (a Ray wrapper's word, a task on its node; 0 for a
    local agent), for the longest of the runs stopped; 60 s at most."""
    from types import SimpleNamespace

    from orchestrator.supervisor.replies import stop_deadline

    def run(grace: float, slack: float | None) -> Any:
        agent = SimpleNamespace(stop_slack=slack) if slack is not None else None
        return SimpleNamespace(role=SimpleNamespace(grace=grace), agent=agent)

    assert stop_deadline([run(5.0, None)]) == 20.0
    assert stop_deadline([run(5.0, 0.0), run(2.0, 36.0)]) == 50.0  # the Ray run's bound, not the longest grace's
    assert stop_deadline([run(30.0, 36.0)]) == 60.0
