"""The Ray spawner's head side with no cluster: its rules on the supervisor's clock, and an sdk attempt's stream.

Only the attempt's Ray actor is faked (``FakeActor``: the wrapper's messages,
fed by the test, and the calls made to it); the spawner, its lease checks, its timers on a
``ManualClock`` and the sdk agent's figures, transcript and controls are the
real code. No real time passes in the timer tests: the clock moves when told.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import Project
from orchestrator.agents.ray.agent import LOST_EXIT, RayAttempt
from orchestrator.agents.ray.names import Names
from orchestrator.agents.ray.spawner import RaySpawner
from orchestrator.agents.ray.stopping import AttemptStops
from orchestrator.agents.ray.wire import Beat, ControlAnswer, Ended, Output, SdkEvent, Started, TranscriptLines
from orchestrator.agents.sdk.follow import SdkFollow
from orchestrator.agents.spec import LaunchSpec, SpawnError
from orchestrator.config import load_config
from orchestrator.config.ray import ExecutorSettings
from orchestrator.core.clock import ManualClock
from orchestrator.core.errors import ControlError


class FakeRemote:
    """An actor method's ``.remote``: records the call, returns an awaitable (as an ``ObjectRef`` is)."""

    def __init__(self, calls: list[tuple[str, tuple[Any, ...]]], name: str) -> None:
        self.calls, self.name = calls, name

    def remote(self, *args: Any) -> Any:
        self.calls.append((self.name, args))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class FakeActor:
    """A wrapper's actor: ``take`` hands out the messages the test ``put``, in order; other calls are recorded."""

    def __init__(self) -> None:
        self.said: list[tuple[int, dict[str, Any]]] = []
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.take = SimpleNamespace(remote=self._take)
        self.stop, self.post, self.start = (FakeRemote(self.calls, n) for n in ("stop", "post", "start"))
        self.resume = SimpleNamespace(remote=self._resume)

    async def _resume(self) -> dict[str, Any]:
        """What a wrapper kept for a head that comes back (``board.WrapperActor.resume``)."""
        said = [item for item in self.said if item[1]["type"] not in ("sdk_event", "started", "start_failed")]
        first = next((data for _, data in self.said if data["type"] == "started"), None)
        return {
            "lease": self.said[0][1]["lease"],
            "first": first,
            "events": [data for _, data in self.said if data["type"] == "sdk_event"],
            "said": said,
            "last": len(self.said),
        }

    def put(self, message: Any) -> None:
        self.said.append((len(self.said) + 1, message.model_dump()))

    async def _take(self, after: int, _wait: float) -> list[tuple[int, dict[str, Any]]]:
        while True:
            new = [item for item in self.said if item[0] > after]
            if new:
                return new
            await asyncio.sleep(0)


def spawner(clock: ManualClock, stream: FakeActor, **settings: Any) -> tuple[RaySpawner, list[Any]]:
    """A ``RaySpawner`` on the manual clock whose one actor is ``stream``; and the calls made to it."""
    calls = stream.calls
    spawn = RaySpawner.__new__(RaySpawner)
    spawn.root, spawn.settings, spawn.say, spawn.clock = "/nowhere", ExecutorSettings(**settings), print, clock
    spawn.leases, spawn.session_nodes = set(), {}
    spawn.names = Names("/nowhere", Path(tempfile.mkdtemp(prefix="ray-head-")))  # a state folder of its own
    spawn.ray = SimpleNamespace(
        exceptions=SimpleNamespace(RayError=RuntimeError), kill=lambda *a, **k: calls.append(("kill", a))
    )

    def create(payload: dict[str, Any]) -> FakeActor:
        calls.append(("task", (payload,)))
        return stream

    spawn.actor = SimpleNamespace(options=lambda **_: SimpleNamespace(remote=create))
    spawn.stops = AttemptStops(spawn.ray, spawn.root, spawn.names, spawn.settings, spawn._end, spawn._cancel)

    def get_actor(name: str, namespace: str) -> FakeActor:
        calls.append(("get_actor", (name, namespace)))
        if not stream.said:
            raise ValueError(f"Failed to look up actor with name '{name}'")
        return stream

    spawn.ray.get_actor = get_actor
    return spawn, calls


def launch_spec(project: Project, role: dict[str, Any] | None = None) -> LaunchSpec:
    project.configure({"builder": role or {}})
    memo = project.root / "memo.md"
    memo.write_text("body\n", encoding="utf-8")
    config = load_config(project.root)
    log = project.root / ".orchestrator" / "logs" / "run.log"
    return LaunchSpec(1, 1, config.roles["builder"], project.root, "the prompt", [memo], log, project.root, {})


async def settle() -> None:
    """Let the loop run what is ready (the pump reading the messages already put)."""
    for _ in range(20):
        await asyncio.sleep(0)


def lease_of(spawn: RaySpawner) -> str:
    (lease,) = spawn.leases
    return lease


async def started(spawn: RaySpawner, stream: FakeActor, project: Project, exits: list[int]) -> Any:
    """An attempt of ``project``'s memo started through ``spawn``, its wrapper saying its agent runs on a worker."""
    starting = asyncio.ensure_future(launch(spawn, launch_spec(project), exits))
    await settle()
    stream.put(Started(lease=lease_of(spawn), pid=4242, create_time=1.0, node="10.0.0.2/abc"))
    return await starting


def test_lost_after_on_the_supervisors_clock_fails_the_attempt_and_a_beat_puts_it_off(project: Project) -> None:
    async def scenario() -> None:
        clock, stream = ManualClock(), FakeActor()
        spawn, calls = spawner(clock, stream, lost_after=30.0)
        exits: list[int] = []
        agent = await started(spawn, stream, project, exits)
        clock.advance(20.0)
        stream.put(Beat(lease=agent.transport.lease))
        await settle()
        clock.advance(29.0)  # 49 s since the start, 29 since the beat: not lost
        await settle()
        assert exits == [] and not agent.transport.finished
        clock.advance(1.0)
        await settle()
        attempt = agent.transport
        assert ("stop", (0.0,)) in calls  # given up: the wrapper is told to stop its tree, should it still hear us
        assert exits == [] and spawn.leases == set(), "its words are ignored from now on; it ends once stopped"
        stream.put(Ended(lease=attempt.lease, code=0, stopped=True))  # it did: its word is ignored, not acted on
        await asyncio.wait_for(asyncio.shield(attempt.pump), 5)
        await settle()
        assert exits == [LOST_EXIT] and attempt.lost is not None and "no word from the wrapper" in attempt.lost
        assert ("kill", (stream,)) in calls  # its actor, read to its end, is let go

    asyncio.run(scenario())


def test_a_hung_wrapper_given_up_has_its_actor_killed_before_the_attempt_ends(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No word comes back from the stop either: after the bound (real time, as every wait for Ray itself), its actor
    is killed, then the attempt ends, so its retry never runs while the hung wrapper's agent may."""
    from orchestrator.agents import procs
    from orchestrator.agents.ray import spawner as module

    monkeypatch.setattr(module, "BOARD_WAIT", 0.05)
    monkeypatch.setattr(module, "CANCEL_WAIT", 0.05)
    monkeypatch.setattr(procs, "KILL_WAIT", 0.05)

    async def scenario() -> None:
        clock, stream = ManualClock(), FakeActor()
        spawn, calls = spawner(clock, stream, lost_after=30.0, poll=0.01)
        exits: list[int] = []
        agent = await started(spawn, stream, project, exits)
        clock.advance(30.0)
        await settle()
        assert exits == [] and ("stop", (0.0,)) in calls and ("kill", (stream,)) not in calls
        deadline = time.monotonic() + 10
        while not exits and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert exits == [LOST_EXIT] and "no word from the wrapper" in (agent.transport.lost or "")
        assert ("kill", (stream,)) in calls, "its actor was killed before the attempt ended"

    asyncio.run(scenario())


class FakeSweep:
    """``ray`` as the sweep uses it: ``ray.remote(fn).options(...).remote(*args)``, answering ``answer`` (an
    exception is raised, None never answers)."""

    def __init__(self, answer: Any) -> None:
        self.answer, self.calls = answer, []

    def remote(self, *args: Any) -> Any:
        if len(args) == 1 and callable(args[0]):  # ray.remote(fn)
            self.calls.append(("function", args[0].__name__))
            return self
        self.calls.append(("task", args))
        return self._answer()

    def options(self, **options: Any) -> FakeSweep:
        self.calls.append(("options", options))
        return self

    async def _answer(self) -> Any:
        if self.answer is None:
            await asyncio.sleep(3600)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def test_a_task_on_its_node_kills_what_a_hung_wrapper_left_else_the_log_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("ray")
    from orchestrator.agents.ray import sweep

    monkeypatch.setattr(sweep, "SWEEP_WAIT", 0.05)
    node = "ab" * 28  # Ray's node ids are 28 bytes
    attempt = SimpleNamespace(node="10.0.0.2/abc", node_id=node, pid=4242, spec=SimpleNamespace(run_id=7, attempt=2))
    cases = {
        "killed": [4242, 4243],
        "refused": RuntimeError(f"Node {node[:8]} is dead\n(the rest of Ray's words)"),
        "silent": None,
    }
    for case, answer in cases.items():
        ray, said = FakeSweep(answer), []
        report = asyncio.run(sweep.sweep_report(ray, attempt, "/root", "k", said.append, time.monotonic()))
        assert ray.calls[-1] == ("task", ("/root", "k", 7, 2)), ray.calls  # this attempt of this run, on its node
        options = next(call[1] for call in ray.calls if call[0] == "options")
        assert options["num_cpus"] == 0 and options["scheduling_strategy"].node_id == node
        assert options["scheduling_strategy"].soft is False
        if case == "killed":
            assert report.pids == [4242, 4243] and report.survivors == []
            assert said == ["a task on 10.0.0.2/abc killed what the wrapper left: [4242, 4243]"]
        else:
            assert report.pids == [4242] and report.survivors == [4242]
            why = f"Node {node[:8]} is dead" if case == "refused" else "no answer within 0.05s"
            assert said == [
                f"no task could kill what the wrapper left on 10.0.0.2/abc ({why}): the agent (pid 4242) is killed "
                "by the next wrapper that runs there"
            ]


def test_an_error_reading_the_wrappers_messages_ends_the_attempt_and_stops_its_agent(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk under the run's log (or a message the head cannot read): the pump used to die with the error
    unretrieved, and the run stayed running for ever, its slot held."""
    from orchestrator.agents.ray import spawner as module

    def full(_fd: int, _data: bytes) -> int:
        raise OSError(28, "No space left on device")

    async def scenario() -> None:
        clock, stream = ManualClock(), FakeActor()
        spawn, calls = spawner(clock, stream, lost_after=5.0)
        exits: list[int] = []
        agent = await started(spawn, stream, project, exits)
        monkeypatch.setattr(module.os, "write", full)
        stream.put(Output(lease=agent.transport.lease, data="hello\n"))
        await settle()
        monkeypatch.undo()
        assert ("stop", (0.0,)) in calls and ("kill", (stream,)) not in calls, "its wrapper stops its tree first"
        assert exits == [], "and the attempt ends after"
        clock.advance(6.0)  # past lost_after while it waits: given up already, not given up again
        await settle()
        assert calls.count(("stop", (0.0,))) == 1
        stream.put(Ended(lease=agent.transport.lease, code=-15, stopped=True))
        await asyncio.wait_for(asyncio.shield(agent.transport.pump), 5)
        await settle()
        assert exits == [LOST_EXIT] and ("kill", (stream,)) in calls
        assert "No space left on device" in (agent.transport.lost or "")

    asyncio.run(scenario())


def test_start_timeout_on_the_supervisors_clock_fails_the_start(project: Project) -> None:
    async def scenario() -> None:
        clock, stream = ManualClock(), FakeActor()
        spawn, _calls = spawner(clock, stream, start_timeout=60.0)
        starting = asyncio.ensure_future(launch(spawn, launch_spec(project), []))
        await settle()
        clock.advance(59.0)
        await settle()
        assert not starting.done()
        clock.advance(1.0)
        with pytest.raises(SpawnError, match="no Ray node could take it within 60s"):
            await asyncio.wait_for(starting, 5)
        assert spawn.leases == set()

    asyncio.run(scenario())


async def launch(spawn: RaySpawner, spec: LaunchSpec, exits: list[int]) -> Any:
    return await spawn.start(spec, lambda _agent, verdict: exits.append(verdict.returncode))


def test_an_sdk_attempts_events_transcript_and_controls_arrive_as_locally(project: Project) -> None:
    async def scenario() -> None:
        clock, stream = ManualClock(), FakeActor()
        spawn, calls = spawner(clock, stream)
        spec = launch_spec(project, {"backend": "sdk", "cli_path": "fake-claude"})
        exits: list[int] = []
        starting = asyncio.ensure_future(launch(spawn, spec, exits))
        await settle()
        lease = lease_of(spawn)
        ((_, (payload,)),) = [c for c in calls if c[0] == "task"]
        assert payload["backend"] == "sdk" and payload["cli_path"] == "fake-claude"  # resolved on the worker
        assert payload["sdk_spec"]["prompt"] == "the prompt" and payload["sdk_spec"]["options"]["cli_path"] is None
        stream.put(Started(lease=lease, pid=4242, create_time=1.0, node="n"))
        agent = await starting
        assert isinstance(agent.transport, RayAttempt) and isinstance(agent.follower, SdkFollow)
        assert agent.backend == "sdk"
        for event in (
            {"event": "session", "session_id": "s-1"},
            {"event": "activity", "text": "Bash: ls"},
            {"event": "tells", "pending": 1},
            {"event": "cost", "usd": 0.25},
        ):
            stream.put(SdkEvent(lease=lease, line=json.dumps(event)))
        stream.put(TranscriptLines(lease=lease, data='{"type": "system"}\n'))
        await settle()
        assert agent.session_id == "s-1" and agent.cost_usd == 0.25
        assert agent.activity == "Bash: ls (1 tell pending)"

        telling = asyncio.ensure_future(agent.tell("and the docs"))
        await settle()
        ((_, (control,)),) = [c for c in calls if c[0] == "post"]
        assert json.loads(control["line"]) == {"op": "tell", "text": "and the docs"}
        stream.put(ControlAnswer(lease=lease, id=control["id"]))
        await asyncio.wait_for(telling, 5)

        refused = asyncio.ensure_future(agent.interrupt())
        await settle()
        control = [c for c in calls if c[0] == "post"][-1][1][0]
        stream.put(ControlAnswer(lease=lease, id=control["id"], refused="run 1's agent session has already ended"))
        with pytest.raises(ControlError, match="already ended"):
            await asyncio.wait_for(refused, 5)
        assert not agent.follower.interrupted

        result = {
            "event": "result",
            "cost_usd": 0.5,
            "input_tokens": 10,
            "output_tokens": 2,
            "num_turns": 2,
            "session_id": "s-1",
            "is_error": False,
            "subtype": "success",
        }
        stream.put(SdkEvent(lease=lease, line=json.dumps(result)))
        stream.put(SdkEvent(lease=lease, line=json.dumps({"event": "done", "code": 0})))
        stream.put(TranscriptLines(lease=lease, data='{"type": "result"}\n'))
        stream.put(Ended(lease=lease, code=0))
        await asyncio.wait_for(asyncio.shield(agent.done), 5)
        assert exits == [0] and agent.result["cost_usd"] == 0.5 and agent.closing
        transcript = project.root / ".orchestrator" / "runs" / "1" / "transcript.jsonl"
        assert transcript.read_text().splitlines() == ['{"type": "system"}', '{"type": "result"}']
        with pytest.raises(ControlError, match="already ended; nothing to tell"):
            await agent.tell("too late")

    asyncio.run(scenario())


def test_a_head_that_comes_back_takes_the_kept_end_replays_the_figures_and_acts_on_it_once(project: Project) -> None:
    async def scenario() -> None:
        clock, stream = ManualClock(), FakeActor()
        spawn, calls = spawner(clock, stream)
        spec = launch_spec(project, {"backend": "sdk", "cli_path": "fake-claude"})
        assert await spawn.reattach(spec) is None  # no actor of the attempt: gone for good
        lease = "kept-lease"
        stream.put(Started(lease=lease, pid=4242, create_time=1.0, node="10.0.0.2/abc", orphans=[99]))
        stream.put(SdkEvent(lease=lease, line=json.dumps({"event": "session", "session_id": "s-1"})))
        stream.put(Output(lease=lease, data="said while no head was up\n"))
        stream.put(SdkEvent(lease=lease, line=json.dumps({"event": "cost", "usd": 0.25})))
        stream.put(Ended(lease=lease, code=0))
        printed: list[str] = []
        spawn.say = printed.append
        agent = await spawn.reattach(spec)
        assert agent is not None and agent.pid == 4242 and agent.node == "10.0.0.2/abc"
        exits: list[int] = []
        agent.watch(lambda _agent, verdict: exits.append(verdict.returncode))
        await asyncio.wait_for(asyncio.shield(agent.done), 5)
        assert exits == [0] and agent.session_id == "s-1" and agent.cost_usd == 0.25  # each event applied once
        assert "said while no head was up" in spec.log_path.read_text()
        assert printed == []  # the orphans were told by the head that started it
        assert ("kill", (stream,)) not in calls  # kept until the head has recorded the end
        assert not agent.left_behind() and ("kill", (stream,)) in calls
        assert spawn.leases == set()

    asyncio.run(scenario())
