"""The loop owns its state by construction: one event at a time, never one inside another, time on the clock.

Scripted through the real supervisor (``tests/replay.py``): the only fakes are the clock and the spawner.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.core.clock import iso
from orchestrator.core.events import InterruptRequested, MemoSeen
from orchestrator.core.run import Run
from orchestrator.core.states import ALLOWED, STOP_ENDS, Ending, RunState
from orchestrator.intake import queue as queue_module
from orchestrator.intake.memo import parse_front_matter
from orchestrator.intake.queue import BATCH_WAIT, SETTLE
from orchestrator.supervisor.requests import ANSWER_SLACK
from replay import Replay


def play(tmp_path: Path, scenario: Any) -> Any:
    return asyncio.run(scenario(tmp_path))


@dataclass(frozen=True)
class Outer:
    """A test event whose handler posts another."""


@dataclass(frozen=True)
class Inner:
    """The follow-up."""


async def until(condition: Any) -> None:
    """Poll ``condition`` on the loop for 10 s at most: the writer check answers from a thread, in real time."""
    end = time.monotonic() + 10
    while not condition() and time.monotonic() < end:
        await asyncio.sleep(0.005)


def depth_recorder(r: Replay) -> tuple[list[str], list[int]]:
    """Wrap the loop's one-event handler: the name of every event handled, and the nesting depth of each."""
    names: list[str] = []
    depths: list[int] = []
    depth = 0
    handle_one = r.sup._handle

    def wrapped(event: object) -> None:
        nonlocal depth
        depth += 1
        names.append(type(event).__name__)
        depths.append(depth)
        try:
            handle_one(event)
        finally:
            depth -= 1

    r.sup._handle = wrapped  # type: ignore[method-assign]
    return names, depths


def test_an_event_posted_by_a_handler_is_handled_after_it_not_inside_it(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root)
        order: list[str] = []

        def outer(_event: Outer) -> None:
            order.append("outer begins")
            r.sup.post(Inner())
            order.append("outer ends")

        r.sup.handlers[Outer] = outer
        r.sup.handlers[Inner] = lambda _event: order.append("inner")
        r.sup.post(Outer())
        assert order == ["outer begins", "outer ends", "inner"]
        r.close()

    play(tmp_path, scenario)


def test_a_start_that_fails_inside_the_scheduler_comes_back_as_its_own_event(tmp_path: Path) -> None:
    """A prompt that cannot be rendered fails the start while the loop is scheduling after an event: the
    ``AgentStartFailed`` is handled after that event, never inside it."""

    async def scenario(root: Path) -> None:
        r = Replay(root)

        def broken(_run: Any) -> dict[str, str]:
            raise RuntimeError("no section today")

        r.sup.launcher.sections.append(broken)
        names, depths = depth_recorder(r)
        await r.drop("builder", "B-1.md")
        assert names[:2] == ["MemoSeen", "AgentStartFailed"]
        assert max(depths) == 1, "no event is handled inside another"
        assert r.folder("builder", "failed") == ["B-1.md"]
        assert "could not prepare the prompt: no section today" in r.console.text
        r.close()

    play(tmp_path, scenario)


def test_the_settle_check_is_an_event_on_the_injected_clock(tmp_path: Path) -> None:
    """A memo seen while its writer may still be busy is looked at again after ``SETTLE`` seconds of the
    supervisor's clock, by a ``SettleDue`` the loop handles like any event; who holds it open is read off the
    loop and comes back as a ``WritersFound``, after which the loop starts what it queued."""

    async def scenario(root: Path) -> None:
        r = Replay(root)
        names, depths = depth_recorder(r)
        path = r.config.role_dir("builder") / "inbox" / "B-2.md"
        path.write_text("---\nid: B-2\n---\nbody\n", encoding="utf-8")
        old = time.time() - 10 * SETTLE  # its writer long gone, by the file system's clock
        os.utime(path, (old, old))
        r.sup.post(MemoSeen("builder", path, complete=False))
        await r.settle()
        assert r.spawner.agents == [] and path in r.sup.intake.pending
        assert r.clock.pending() == [SETTLE]
        await r.advance(SETTLE - 0.01)
        assert r.spawner.agents == [], "not before the settle time, on the injected clock"
        await r.advance(0.01)
        end = time.monotonic() + 10  # who writes to it is read in a worker thread: real time passes
        while not r.spawner.agents and time.monotonic() < end:
            await asyncio.sleep(0.005)
        assert names[-3:] == ["SettleDue", "WritersFound", "AgentStarted"]
        assert max(depths) == 1
        assert r.agent("B-2").spec.attempt == 1
        r.close()

    play(tmp_path, scenario)


def test_a_batch_role_waits_for_a_settling_memo_of_its_inbox_and_at_most_batch_wait(tmp_path: Path) -> None:
    """Memos that lay in a batch role's inbox together go to one run: one complete beside one still settling
    waits for it (not a run of one, then another); one that never settles holds the role ``BATCH_WAIT`` at most."""

    async def scenario(root: Path) -> None:
        r = Replay(root, roles={"pm": {"batch": True}})
        inbox = r.config.role_dir("pm") / "inbox"
        done, settling = inbox / "a.md", inbox / "b.md"
        for path in (done, settling):
            path.write_text("---\nid: x\n---\nbody\n", encoding="utf-8")
        old = time.time() - 10 * SETTLE
        for path in (done, settling):
            os.utime(path, (old, old))
        r.sup.post(MemoSeen("pm", settling, complete=False))
        r.sup.post(MemoSeen("pm", done, complete=True))
        await r.settle()
        assert r.spawner.agents == [], "a complete memo waits for its inbox's settling one"
        await r.advance(SETTLE)
        await until(lambda: r.spawner.agents)
        assert [p.name for p in r.spawner.agents[0].spec.memo_paths] == ["a.md", "b.md"]
        r.spawner.agents[0].exit(0)
        await r.settle()
        # a memo whose writer never lets go holds the batch role no longer than BATCH_WAIT
        late, stuck = inbox / "c.md", inbox / "d.md"
        stuck.write_text("---\nid: d\n---\nbody\n", encoding="utf-8")  # its mtime now: it keeps changing
        r.sup.post(MemoSeen("pm", stuck, complete=False))
        late.write_text("---\nid: c\n---\nbody\n", encoding="utf-8")
        r.sup.post(MemoSeen("pm", late, complete=True))
        await r.settle()
        waited = 0.0
        while len(r.spawner.agents) < 2 and waited < 2 * BATCH_WAIT:
            os.utime(stuck)  # written to again: never settles, so no writer check either
            await r.advance(SETTLE)
            waited += SETTLE
        await until(lambda: len(r.spawner.agents) == 2)
        assert [p.name for p in r.spawner.agents[1].spec.memo_paths] == ["c.md"]
        assert waited == BATCH_WAIT and stuck in r.sup.intake.pending
        r.close()

    play(tmp_path, scenario)


def test_who_writes_to_a_settled_memo_is_read_off_the_loop_and_a_busy_memo_waits(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The writer check looks at every descriptor of every process: it runs in a worker thread, and a memo it finds
    open for writing waits for the next check."""
    threads: list[threading.Thread] = []
    writing: set[Path] = set()

    def spy(paths: list[Path]) -> set[Path]:
        threads.append(threading.current_thread())
        return {p for p in paths if p in writing}

    monkeypatch.setattr(queue_module, "open_for_writing", spy)

    async def scenario(root: Path) -> None:
        r = Replay(root)
        names, _depths = depth_recorder(r)
        path = r.config.role_dir("builder") / "inbox" / "B-3.md"
        path.write_text("---\nid: B-3\n---\nbody\n", encoding="utf-8")
        old = time.time() - 10 * SETTLE
        os.utime(path, (old, old))
        writing.add(path)
        r.sup.post(MemoSeen("builder", path, complete=False))
        await r.advance(SETTLE)
        await until(lambda: "WritersFound" in names)
        assert threads and all(t is not threading.main_thread() for t in threads)
        assert r.spawner.agents == [] and path in r.sup.intake.pending, "still open for writing: it waits"
        writing.clear()
        await r.advance(SETTLE)
        await until(lambda: r.spawner.agents)
        assert r.agent("B-3").spec.attempt == 1
        r.close()

    play(tmp_path, scenario)


def test_each_state_being_stopped_has_one_end_and_the_state_table_allows_it() -> None:
    assert set(STOP_ENDS) == {RunState.CANCELLING, RunState.TIMING_OUT, RunState.STOPPING}
    for state, end in STOP_ENDS.items():
        assert state.live and state.being_stopped
        assert end.stopped in ALLOWED[state] and end.at_restart in ALLOWED[state], state
    assert not any(s.being_stopped for s in RunState if s not in STOP_ENDS)


def test_a_force_ending_overrides_a_graceful_one_never_the_reverse(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root)
        await r.drop("builder", "B-3.md")
        r.sup.begin_ending(Ending.GRACEFUL, "test")
        assert r.sup.ending is Ending.GRACEFUL and r.state("B-3") == "running"
        r.sup.begin_ending(Ending.FORCE, "test, harder")
        await r.settle()
        assert r.sup.ending is Ending.FORCE and r.folder("builder", "inbox") == ["B-3.md"]
        r.sup.begin_ending(Ending.GRACEFUL, "too late")
        assert r.sup.ending is Ending.FORCE and f"{r.sup.ending}" == "force"
        r.close()

    play(tmp_path, scenario)


def test_one_exit_announces_one_stopped_event_however_often_an_ending_is_asked_for(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root)
        told: list[str] = []
        r.sup.lc.team_events.listeners.append(lambda event: told.append(event.kind))
        r.sup.begin_ending(Ending.GRACEFUL, "a critical role's crash loop", exit_code=3)
        r.sup.begin_ending(Ending.GRACEFUL, "stop_on_failure", exit_code=1)
        r.sup.begin_ending(Ending.FORCE, "Ctrl-C pressed 3 times")
        assert told.count("stopped") == 1 and r.sup.exit_code == 3
        r.close()

    play(tmp_path, scenario)


RUN_FIELDS = {f.name for f in dataclasses.fields(Run)}
MUTATORS = {"append", "extend", "clear", "pop", "popitem", "update", "setdefault", "remove", "insert"}


def _names_a_run(node: ast.expr) -> bool:
    """``run``, ``self.run``, ``event.run``, ``first_run``: an expression that by its name holds a ``Run``."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name == "run" or name.endswith("_run")


def _run_field(node: ast.expr) -> str | None:
    """The field of ``run.FIELD`` (or ``run.FIELD[...]``) that ``node`` names, if it does."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr in RUN_FIELDS and _names_a_run(node.value):
        return node.attr
    return None


def run_changes(source: str) -> list[str]:
    """Each place in ``source`` that assigns a field of a ``Run`` or changes one of its lists or dicts."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                targets += target.elts if isinstance(target, ast.Tuple) else [target]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if node.args and _names_a_run(node.args[0]):
                found.append(f"{node.lineno}: setattr")
        for target in targets:
            field = _run_field(target)
            if field is not None:
                found.append(f"{node.lineno}: run.{field}")
    return found


def test_the_guard_below_sees_the_changes_it_forbids() -> None:
    source = "run.state = x\nrun.attempt += 1\nrun.waiters.append(f)\nrun.timers['t'] = h\na, self.run.stalled = 1, 2\n"
    assert sorted(run_changes(source + "setattr(run, 'agent', a)\nrun.label\nself.state = 1\n")) == [
        "1: run.state",
        "2: run.attempt",
        "3: run.waiters",
        "4: run.timers",
        "5: run.stalled",
        "6: setattr",
    ]


def test_no_run_field_is_changed_outside_the_lifecycle() -> None:
    """The lifecycle is the only module that assigns a ``Run``'s fields or changes its lists and dicts."""
    package = Path(__file__).resolve().parents[1] / "orchestrator"
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).as_posix() != "supervisor/lifecycle.py":
            found += [f"{path.relative_to(package)}:{c}" for c in run_changes(path.read_text(encoding="utf-8"))]
    assert found == []


def test_an_interrupt_whose_agent_does_not_end_is_answered_on_the_injected_clock(tmp_path: Path) -> None:
    """The answer waits the role's grace and a slack for the run to end, by the supervisor's clock."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"sdk": {"backend": "sdk", "timeout": "1h", "grace": "2s"}})
        await r.drop("sdk", "x.md")
        answer = await r.request(InterruptRequested, memo="x")
        await r.advance(2 + ANSWER_SLACK - 0.01)
        assert not answer.done(), "not before grace + slack on the injected clock"
        await r.advance(0.01)
        assert answer.result()["state"] == "interrupting"
        await r.exit("x", 3)
        assert r.folder("sdk", "cancelled") == ["x.md"]
        r.close()

    play(tmp_path, scenario)


def test_a_notice_is_dated_by_the_supervisors_clock(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}, "pm": {}}, notify="pm")
        await r.drop("builder", "B-4.md")
        await r.advance(90)
        await r.exit("B-4", 1)
        (notice,) = r.folder("pm", "inbox")
        header = parse_front_matter((r.config.role_dir("pm") / "inbox" / notice).read_text(encoding="utf-8"))
        assert header.created_at == iso(r.clock.now())
        r.close()

    play(tmp_path, scenario)
