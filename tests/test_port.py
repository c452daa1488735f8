"""The port used from outside the core: a test-only feature (``tests/port_feature.py``) that moves each start to a
folder of its own (``prepare``), redirects ends (``decide_end``) and serves a command of its own (``requests``),
composed in through ``compose.build_supervisor(more=...)`` with nothing under ``orchestrator/supervisor/`` edited
for it. The replays prove the rules; the last test runs it in a real ``up`` with real agents and the real socket.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
from port_feature import FoldersRequest, PortFeature
from test_adoption_replay import exit_record, left_by_a_dead_orchestrator

from orchestrator.agents.spec import LaunchSpec, SpawnError
from orchestrator.config import RoleRun
from orchestrator.control import client
from orchestrator.control.authority import PERSON, Caller
from orchestrator.control.protocol import FeatureRequest, parse_request
from orchestrator.core.agent import AttemptVerdict
from orchestrator.core.errors import RefusedError, UsageError
from orchestrator.core.events import AgentStarted, CancelRequested, FeatureRequested, InterruptRefused, RunExited
from orchestrator.core.states import Ending
from orchestrator.supervisor.extension import Extension, Host
from orchestrator.supervisor.feature_requests import Command, FeatureRequests, Needs
from orchestrator.supervisor.recovery import recover
from replay import Replay

HERE = Path(__file__).parent
DEADLINE = 20.0


def play(tmp_path: Path, scenario: Callable[[Path], Any]) -> Any:
    return asyncio.run(scenario(tmp_path))


async def until(condition: Callable[[], Any], what: str) -> Any:
    """Let the loop run until ``condition()`` holds (``prepare`` makes its folder on a thread)."""
    end = time.monotonic() + DEADLINE
    while not (value := condition()):
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)
    return value


# ------------------------------------------------------------------ prepare
def test_prepare_moves_every_start_and_its_change_reaches_the_agent(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 1, "backoff": ["1s"]}}}, more=[PortFeature])
        await r.drop("builder", "a.md")
        first = await until(lambda: r.spawner.agents, "the first attempt")
        run_id = first[0].spec.run_id
        assert first[0].spec.cwd == root / "work" / f"{run_id}-1" and first[0].spec.cwd.is_dir()
        assert first[0].spec.env["PORT_FOLDER"] == str(first[0].spec.cwd) and first[0].spec.args == ("--prepared",)
        assert first[0].spec.env["ORCHESTRATOR_RUN_ID"] == str(run_id), "the core's environment is kept"
        await r.exit("a", 1)
        await r.advance(1)
        retry = await until(lambda: r.spawner.agents[1:], "the retry")
        assert retry[0].spec.cwd == root / "work" / f"{run_id}-2", "a retry is prepared again"
        assert r.sup.extension(PortFeature).folders["builder"] == {
            f"{run_id}/1": str(root / "work" / f"{run_id}-1"),
            f"{run_id}/2": str(root / "work" / f"{run_id}-2"),
        }
        await r.exit("a", 0)
        assert r.folder("builder", "archive") == ["a.md"]
        r.close()

    play(tmp_path, scenario)


class Refusing(Extension):
    """A ``prepare`` that cannot give the attempt what it needs, or returns what is not a spec."""

    def __init__(self, host: Host) -> None:
        self.host = host

    async def prepare(self, run: RoleRun, spec: LaunchSpec) -> LaunchSpec:
        if "broken" in spec.memo_paths[0].name:
            return "not a spec"  # type: ignore[return-value]
        raise SpawnError("no workspace free for this run")


def test_a_prepare_that_refuses_or_breaks_fails_the_attempt(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}}, more=[Refusing])
        await r.drop("builder", "a.md")
        await until(lambda: r.folder("builder", "failed"), "the failed memo")
        assert r.spawner.agents == [], "nothing started"
        assert "could not prepare the start: no workspace free for this run" in r.console.text
        await r.drop("builder", "broken.md")
        await until(lambda: "broken.md" in r.folder("builder", "failed"), "the second failed memo")
        assert "ERROR preparing the start of run 2 failed" in r.console.text, "a bug is loud"
        assert "Refusing.prepare returned 'not a spec', not the LaunchSpec of run 2 attempt 1" in r.console.text
        r.close()

    play(tmp_path, scenario)


def test_prepare_is_shown_a_run_taken_back_at_a_restart_and_changes_nothing(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}}, more=[PortFeature])
        run_id = left_by_a_dead_orchestrator(r, "A-1.md")
        exit_record(r, run_id, 1, "exit 0\n")
        await recover(r.config, r.sup.store, r.console, r.sup.lc, r.sup.make_adopter())
        await r.settle()
        feature = r.sup.extension(PortFeature)
        assert feature.seen_adopted == [run_id] and feature.folders == {}, "observed; no folder made for it"
        assert r.folder("builder", "archive") == ["A-1.md"] and r.spawner.agents == []
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ decide_end
def test_decide_end_parks_a_run_or_fails_it_for_good_before_the_rules(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 3, "backoff": ["1s"]}}}, more=[PortFeature])
        await r.drop("builder", "p.md")
        agent = (await until(lambda: r.spawner.agents, "the agent"))[0]
        (agent.spec.cwd / "park.txt").write_text("which design?\n", encoding="utf-8")
        await r.exit("p", 0)
        assert r.folder("builder", "held") == ["p.md"] and r.folder("builder", "archive") == []
        assert (r.config.role_dir("builder") / "held" / "p.reason").read_text() == (
            "held: the agent asked for a person: which design?\n"
        )
        row = r.sup.store.history()[-1]
        assert (row["state"], row["reason"]) == ("returned", "parked: the agent asked for a person: which design?")
        assert [a["outcome"] for a in r.sup.store.attempts(row["run_id"])] == ["parked"]
        assert r.sup.store.memo_attempts("builder", "p.md") == 1, "its attempts are kept for its release"
        assert "parked p.md in held/" in r.console.text

        await r.drop("builder", "w.md")
        await until(lambda: len(r.spawner.agents) == 2, "the second agent")
        await r.exit("w", 3)
        assert r.folder("builder", "failed") == ["w.md"], "failed for good: the role's 3 retries are not used"
        assert "exit 3 means the work is wrong" in (r.config.role_dir("builder") / "failed" / "w.reason").read_text()

        await r.drop("builder", "ok.md")
        await until(lambda: len(r.spawner.agents) == 3, "the third agent")
        await r.exit("ok", 1)
        assert r.state("ok") == "retry_wait", "DEFAULT: the rules decide"
        r.close()

    play(tmp_path, scenario)


class Broken(Extension):
    def __init__(self, host: Host) -> None:
        pass

    def decide_end(self, run: RoleRun, verdict: Any) -> Any:
        raise RuntimeError("a decision with a bug")


def test_a_decide_end_with_a_bug_leaves_the_end_to_the_rules(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}}, more=[Broken])
        await r.drop("builder", "a.md")
        await r.exit("a", 0)
        assert r.folder("builder", "archive") == ["a.md"]
        assert "internal error in Broken.decide_end for run" in r.console.text
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ requests
def test_a_feature_request_is_parsed_checked_and_answered_by_its_handler(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}, "reviewer": {}}, more=[PortFeature])
        features = r.sup.gate.features
        request = parse_request(b'{"op": "port_folders", "role": "builder"}\n', features.models)
        assert request == FoldersRequest(role="builder")
        with pytest.raises(UsageError, match='field "role"'):
            parse_request(b'{"op": "port_folders", "role": 3}\n', features.models)
        with pytest.raises(UsageError, match="known: .*port_folders"):
            parse_request(b'{"op": "port_nothing"}\n', features.models)

        builder = Caller(agent=True, run_id=4, role="builder")
        assert r.sup.gate.admit_caller(request, PERSON) == request, "a person may"
        own = r.sup.gate.admit_caller(request, builder)
        assert isinstance(own, FoldersRequest) and own.who.endswith("an agent of run 4 (builder)")
        with pytest.raises(RefusedError, match=r"`orchestrator port folders` of another role is for people"):
            r.sup.gate.admit_caller(FoldersRequest(role="reviewer"), builder)

        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        r.sup.post(FeatureRequested(FoldersRequest(role="builder", who="tester"), reply))
        assert reply.result() == {"folders": {}, "parked": [], "who": "tester"}
        refused: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        r.sup.post(FeatureRequested(FoldersRequest(role="nobody"), refused))
        with pytest.raises(UsageError, match="no role 'nobody'"):
            refused.result()
        r.close()

    play(tmp_path, scenario)


class TakenRequest(FeatureRequest):
    op: Literal["status"] = "status"


class FlyRequest(FeatureRequest):
    op: Literal["fly"] = "fly"


class LooseRequest(FeatureRequest):
    op: str = "loose"


def test_a_registration_that_cannot_work_is_refused_at_start() -> None:
    features = FeatureRequests()
    features.add("A", [Command(FoldersRequest, lambda _r: {})])
    with pytest.raises(ValueError, match="B: the request 'port_folders' is already served"):
        features.add("B", [Command(FoldersRequest, lambda _r: {})])
    with pytest.raises(ValueError, match="the request 'status' is already served"):
        features.add("C", [Command(TakenRequest, lambda _r: {})])
    with pytest.raises(ValueError, match="needs the unknown grant 'fly'"):
        features.add("D", [Command(FlyRequest, lambda _r: {}, Needs("fly"))])
    with pytest.raises(TypeError, match="LooseRequest.op must be a Literal"):
        features.add("E", [Command(LooseRequest, lambda _r: {})])


# ------------------------------------------------------------------ all of it, in a real orchestrator
def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def test_the_feature_in_a_real_up_moves_parks_fails_and_answers_over_the_socket(project: Any) -> None:
    record = project.root / "port.jsonl"
    agent = [sys.executable, str(HERE / "agents" / "port_agent.py")]
    project.configure({"builder": {"command": agent, "retry": {"max": 2, "backoff": ["0.1s"]}}, "reviewer": {}})
    project.command = [sys.executable, str(HERE / "port_up.py")]
    project.up(PORT_RECORD=str(record))
    for name, body in (("a.md", "done"), ("p.md", "park"), ("w.md", "wrong"), ("q.md", "ask reviewer")):
        project.drop("builder", name, body=body)
    from conftest import wait_for

    wait_for(lambda: len(records(record)) == 4, what="four agents")
    wait_for(lambda: project.folder("builder", "active") == [], what="every run ended")
    seen = {r["words"][0]: r for r in records(record)}
    for r in seen.values():
        assert Path(r["cwd"]).parent == project.root / "work" and r["folder"] == r["cwd"], r
        assert r["argv"] == ["--prepared"], r
    assert project.folder("builder", "held") == ["p.md"]
    assert project.folder("builder", "failed") == ["w.md"]
    assert sorted(project.folder("builder", "archive")) == ["a.md", "q.md"]
    assert "is for people" in seen["ask"]["refused"], "an agent may not ask about another role"

    answer = client.call(project.root, "port_folders", role="builder")  # a person, over the real socket
    assert sorted(Path(f).name for f in answer["folders"].values()) == sorted(
        Path(r["cwd"]).name for r in seen.values()
    )
    assert len(answer["parked"]) == 1
    assert project.procs[0].stop() == 0


def test_the_dashboard_sends_a_feature_request_as_the_cli_does(project: Any) -> None:
    from web_harness import start

    agent = [sys.executable, str(HERE / "agents" / "port_agent.py")]
    project.configure({"builder": {"command": agent}, "reviewer": {}})
    project.command = [sys.executable, str(HERE / "port_up.py")]
    board = start(project, PORT_RECORD=str(project.root / "port.jsonl"))
    try:
        project.drop("builder", "a.md", body="done")
        from conftest import wait_for

        wait_for(lambda: project.folder("builder", "archive") == ["a.md"], what="a.md archived")
        answer = board.post("/api/v1/requests/port_folders", {"role": "builder"})
        assert answer.status_code == 200, answer.text
        assert [Path(f).parent for f in answer.json()["folders"].values()] == [project.root / "work"]
        unknown = board.post("/api/v1/requests/nothing_here", {})
        assert unknown.status_code == 400 and "serves: answer, ask, port_folders" in unknown.json()["error"]["message"]
        wrong = board.post("/api/v1/requests/port_folders", {"role": 3})
        assert wrong.status_code == 400 and "role" in wrong.json()["error"]["message"], wrong.text
        extra = board.post("/api/v1/requests/port_folders", {"role": "builder", "force": True})
        assert extra.status_code == 400 and "force" in extra.json()["error"]["message"], extra.text
    finally:
        board.close()
    assert project.procs[0].stop() == 0


class Slow(Extension):
    """A ``prepare`` that waits until the test lets it go (a slow workspace)."""

    gate: asyncio.Event

    def __init__(self, host: Host) -> None:
        Slow.gate = asyncio.Event()

    async def prepare(self, run: RoleRun, spec: LaunchSpec) -> LaunchSpec:
        await Slow.gate.wait()
        return spec


def test_a_run_cancelled_while_its_start_is_prepared_starts_no_agent(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}}, more=[Slow])
        await r.drop("builder", "a.md")
        assert r.state("a") == "starting"
        reply = await r.request(CancelRequested, memo="a")
        assert r.state("a") == "cancelling"
        Slow.gate.set()
        await until(lambda: reply.done(), "the cancel's receipt")
        assert r.spawner.agents == [] and r.folder("builder", "cancelled") == ["a.md"]
        assert reply.result()["state"] == "cancelled"
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ an end that waits for a feature's work
class Saving(Extension):
    """A ``before_finish`` whose work is awaited (a workspace's commit): it waits until the test lets it go, and
    records what it saw of the memo; ``broken`` memos make it raise once awaited."""

    gate: asyncio.Event
    seen: list[tuple[str, str]]

    def __init__(self, host: Host) -> None:
        self.host = host
        Saving.gate = asyncio.Event()
        Saving.seen = []

    def before_finish(self, run: RoleRun, state: Any, reason: str | None) -> Any:
        return self.save(run, state.value)

    async def save(self, run: RoleRun, state: str) -> None:
        await Saving.gate.wait()
        Saving.seen.append((state, run.memos[0].path.parent.name))  # the memo has not moved yet
        if "broken" in run.memos[0].name:
            raise RuntimeError("the save broke")


def test_an_end_waits_for_a_features_work_and_nothing_else_ends_the_run_meanwhile(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"max_concurrent": 1}}, more=[Saving])
        await r.drop("builder", "a.md")
        await r.drop("builder", "b.md")
        await r.exit("a", 0)
        run = r.run_of("a")
        assert run.settling == "succeeded" and r.folder("builder", "active") == ["a.md"], "the memo waits"
        assert r.sup.view().runs[0].activity == "ending as succeeded", "status says what it is doing"
        assert len(r.spawner.agents) == 1, "its slot is held until it has ended: b waits"
        cancel = await r.request(CancelRequested, memo="a")
        r.sup.begin_ending(Ending.FORCE, "a test")  # a force ending leaves a settling run be
        assert not cancel.done() and run.settling == "succeeded"
        Saving.gate.set()
        await until(lambda: cancel.done(), "the cancel's answer")
        assert Saving.seen == [("succeeded", "active")]
        assert r.folder("builder", "archive") == ["a.md"] and r.state("a") == "succeeded"
        assert cancel.result()["state"] == "succeeded" and "already ended" in cancel.result()["note"]
        assert "is already ending as succeeded" not in r.console.text
        r.close()

    play(tmp_path, scenario)


def test_a_retry_cancelled_while_due_says_it_is_ending_not_due(tmp_path: Path) -> None:
    """Found by a review: a run cancelled from retry_wait whose end waits for a feature's work stays in retry_wait
    while it settles, and said "retry due since ..." (with its next attempt's time) instead of what it was doing."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 2, "backoff": ["600s"]}}}, more=[Saving])
        await r.drop("builder", "a.md")
        await r.exit("a", 1)
        assert r.state("a") == "retry_wait" and r.sup.view().runs[0].activity is None, "not due yet"
        cancel = await r.request(CancelRequested, memo="a")
        assert r.sup.view().runs[0].activity == "ending as cancelled"
        Saving.gate.set()
        await until(lambda: cancel.done(), "the cancel's answer")
        r.close()

    play(tmp_path, scenario)


def test_a_feature_whose_end_work_breaks_is_loud_and_the_end_goes_on(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}}, more=[Saving, PortFeature])
        Saving.gate.set()
        await r.drop("builder", "broken.md")
        await until(lambda: r.spawner.agents, "the agent")
        await r.exit("broken", 3)  # failed for good by PortFeature
        await until(lambda: r.folder("builder", "failed"), "the failed memo")
        assert "internal error while run 1 was ending" in r.console.text, r.console.text
        await r.drop("builder", "p.md")
        agent = await until(lambda: [a for a in r.spawner.agents if a.spec.memo_paths[0].name == "p.md"], "p")
        (agent[0].spec.cwd / "park.txt").write_text("which design?\n", encoding="utf-8")
        await r.exit("p", 0)
        await until(lambda: r.folder("builder", "held"), "the parked memo")
        await until(lambda: "parked p.md in held/" in r.console.text, "the park told, once the memo moved")
        r.close()

    play(tmp_path, scenario)


def test_late_events_for_a_settling_run_change_nothing_and_a_late_agent_is_stopped(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 3, "backoff": ["1s"]}}}, more=[Saving])
        await r.drop("builder", "a.md")
        agent = r.agent("a")
        await r.exit("a", 0)
        run = r.run_of("a")
        assert run.settling == "succeeded"
        r.sup.post(RunExited(run.run_id, run.attempt, AttemptVerdict(returncode=1)))  # a kill's exit, late
        r.sup.post(InterruptRefused(run.run_id, run.attempt))
        await r.advance(5)
        assert run.state.value == "running" and run.settling == "succeeded" and len(r.spawner.agents) == 1
        r.sup.post(AgentStarted(run.run_id, run.attempt, agent))  # a start that was under way: its agent is stopped
        await r.settle()
        assert [stop[0] for stop in r.spawner.stops] == [run.run_id]
        Saving.gate.set()
        await until(lambda: r.folder("builder", "archive"), "the end")
        assert r.state("a") == "succeeded" and len(r.spawner.agents) == 1, "no retry, no second attempt"
        r.close()

    play(tmp_path, scenario)


def test_recovery_waits_for_the_ends_it_began_before_it_empties_active(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}}, more=[Saving])
        left_by_a_dead_orchestrator(r, "A-1.md", state="cancelling")
        recovering = asyncio.ensure_future(recover(r.config, r.sup.store, r.console, r.sup.lc, r.sup.make_adopter()))
        await until(lambda: r.sup.runs and next(iter(r.sup.runs.values())).settling, "the end under way")
        await r.settle()
        assert not recovering.done() and r.folder("builder", "active") == ["A-1.md"], "the memo waits for its end"
        assert r.folder("builder", "inbox") == []
        Saving.gate.set()
        await recovering
        await r.settle()
        assert r.folder("builder", "cancelled") == ["A-1.md"] and r.folder("builder", "inbox") == []
        assert "disappeared" not in r.console.text
        r.close()

    play(tmp_path, scenario)
