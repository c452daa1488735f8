"""Preflight before every run (``orchestrator/schedule/preflight.py``): a failing check holds the role with its
memos unclaimed in the inbox and runs again at the next tick; a success releases it and is reused for
``preflight_reuse``. Through the replay harness (a manual clock, the probe runner faked) and with real processes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from conftest import Project, wait_for
from orchestrator.agents import procs
from orchestrator.schedule.probes import Probe, ProbeResult, run_probe
from replay import Replay


def play(tmp_path: Path, scenario: Callable[[Path], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario(tmp_path))


class FakeChecks:
    """The one faked boundary: the signal and preflight commands. Every call is kept; ``ok`` decides them."""

    def __init__(self) -> None:
        self.ok = False
        self.calls: list[list[str]] = []

    async def __call__(self, probes: list[Probe], _root: Path) -> list[ProbeResult]:
        self.calls.append([p.kind for p in probes])
        problem = "" if self.ok else "exit status 1: No module named 'discord'"
        return [ProbeResult(p, self.ok or p.kind != "preflight", problem=problem) for p in probes]

    @property
    def preflights(self) -> int:
        return sum(1 for kinds in self.calls if kinds == ["preflight"])


def rig(root: Path, rin: dict[str, Any], **top: Any) -> tuple[Replay, FakeChecks]:
    roles = {"rin": {"preflight": [["python3", "-c", "import discord"]], **rin}, "pm": {}}
    r = Replay(root, roles, notify="pm", **top)
    checks = FakeChecks()
    r.wakes.probe_runner = checks
    return r, checks


def notices(r: Replay) -> list[str]:
    return [a.spec.memo_paths[0].read_text() for a in r.spawner.agents if a.spec.role.name == "pm"]


def rin_agents(r: Replay) -> list[Any]:
    return [a for a in r.spawner.agents if a.spec.role.name == "rin"]


def test_a_failing_preflight_holds_the_memo_in_the_inbox_until_a_tick_finds_it_passing(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r, checks = rig(root, {})
        await r.drop("rin", "M-1.md")
        assert checks.preflights == 1 and rin_agents(r) == []
        assert r.folder("rin", "inbox") == ["M-1.md"] and r.folder("rin", "active") == []
        held = r.sup.holds.snapshot()["rin"]["preflight"]
        assert "python3 -c import discord" in held and "No module named 'discord'" in held
        assert len(notices(r)) == 1 and "Held: runs of rin" in notices(r)[0]
        await r.advance(4.9)
        assert checks.preflights == 1, "not again before the next tick"
        await r.advance(0.1)  # the tick (rescan_interval 5 s): still failing
        assert checks.preflights == 2 and r.folder("rin", "inbox") == ["M-1.md"] and rin_agents(r) == []
        assert len(notices(r)) == 1, "one notice, not one per tick"
        checks.ok = True
        await r.advance(5)
        assert checks.preflights == 3
        assert "rin" not in r.sup.holds.snapshot()
        assert [a.spec.memo_paths[0].name for a in rin_agents(r)] == ["M-1.md"]
        assert r.folder("rin", "inbox") == []
        assert len(notices(r)) == 2 and "Recovered: runs of rin" in notices(r)[1]
        r.close()

    play(tmp_path, scenario)


def test_a_passed_preflight_is_reused_for_preflight_reuse_then_run_again(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r, checks = rig(root, {})
        checks.ok = True
        await r.drop("rin", "M-1.md")
        assert checks.preflights == 1 and len(rin_agents(r)) == 1
        assert "held:" not in r.console.text and "released" not in r.console.text, "a passing check is no news"
        await r.exit("M-1", 0)
        await r.advance(30)
        await r.drop("rin", "M-2.md")
        assert checks.preflights == 1 and len(rin_agents(r)) == 2, "within a minute the last success counts"
        await r.exit("M-2", 0)
        await r.advance(31)
        await r.drop("rin", "M-3.md")
        assert checks.preflights == 2 and len(rin_agents(r)) == 3
        assert notices(r) == []
        r.close()

    play(tmp_path, scenario)


def test_preflight_reuse_zero_checks_before_every_run_and_retry(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r, checks = rig(root, {"preflight_reuse": 0, "retry": {"max": 1, "backoff": ["1s"]}})
        checks.ok = True
        await r.drop("rin", "M-1.md")
        await r.drop("rin", "M-2.md")
        assert checks.preflights == 2 and len(rin_agents(r)) == 2
        await r.exit("M-1", 1)  # a retry is a new attempt: the environment is checked again
        checks.ok = False
        await r.advance(1)
        assert checks.preflights == 3 and len(rin_agents(r)) == 2, "the retry waits for a passing preflight"
        assert r.state("M-1") == "retry_wait"
        checks.ok = True
        await r.advance(5)
        assert len(rin_agents(r)) == 3 and r.agent("M-1").spec.attempt == 2
        r.close()

    play(tmp_path, scenario)


def test_a_wake_that_passed_its_preflight_starts_without_a_second_check(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r, checks = rig(root, {"wake": {"every": "30m"}, "tasks": {"post": {"every": "1h", "text": "p"}}})
        checks.ok = True
        r.wakes.start()
        await r.advance(0)
        assert checks.calls == [["preflight"]], "the wake's own checks"
        assert len(rin_agents(r)) == 1 and rin_agents(r)[0].spec.memo_paths[0].name.startswith("wake-")
        r.close()

    play(tmp_path, scenario)


def test_a_wake_whose_preflight_failed_is_released_by_a_later_passing_check(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r, checks = rig(root, {"wake": {"every": "30m"}, "tasks": {"post": {"every": "1h", "text": "p"}}})
        r.wakes.start()
        await r.advance(0)
        holds = r.sup.holds.snapshot()["rin"]
        assert "No module named" in holds["wake"] and "No module named" in holds["preflight"]
        assert len(notices(r)) == 1 and "Held: wakes of rin" in notices(r)[0]
        await r.drop("rin", "M-1.md")  # an ordinary memo arrives while the role is held
        assert rin_agents(r) == [] and r.folder("rin", "inbox") == ["M-1.md"]
        assert len(notices(r)) == 1, "the same failure, told once"
        checks.ok = True
        await r.advance(5)  # the next tick: the preflight passes, both holds go
        assert "rin" not in r.sup.holds.snapshot()
        assert [a.spec.memo_paths[0].name for a in rin_agents(r)] == ["M-1.md"]
        assert len(notices(r)) == 2 and "Recovered: wakes of rin" in notices(r)[1]
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ real processes


def test_real_preflight_holds_a_memo_unclaimed_and_a_tick_releases_it(project: Project) -> None:
    checks = project.root / "checks.log"
    project.configure(
        {
            "builder": {
                "preflight": [["sh", "-c", f"echo x >> {checks}; test -e ready || {{ echo no ready >&2; exit 3; }}"]]
            },
            "pm": {},
        },
        notify="pm",
        rescan_interval="0.3s",
    )
    orch = project.up()
    project.drop("builder", "B-1.md", {"id": "B-1", "subject": "work"})
    wait_for(lambda: "preflight" in project.status().get("holds", {}).get("builder", {}), what="builder held")
    held = project.status()["holds"]["builder"]["preflight"]
    assert "exit status 3: no ready" in held, held
    wait_for(lambda: checks.exists() and len(checks.read_text().splitlines()) >= 3, what="a check at every tick")
    assert project.folder("builder", "inbox") == ["B-1.md"] and project.folder("builder", "active") == []
    assert [r for r in project.records() if r["role"] == "builder"] == []
    (project.root / "ready").write_text("")
    wait_for(lambda: project.folder("builder", "archive") == ["B-1.md"], what="B-1 run once the check passes")
    assert "builder" not in project.status().get("holds", {})
    wait_for(lambda: len(project.folder("pm", "archive")) == 2, what="the held and recovered notices")
    subjects = sorted(
        (project.root / "memo" / "pm" / "archive" / n).read_text() for n in project.folder("pm", "archive")
    )
    assert any("Held: runs of builder" in s for s in subjects) and any(
        "Recovered: runs of builder" in s for s in subjects
    )
    assert orch.stop() == 0


def test_real_preflight_success_is_reused_unless_preflight_reuse_is_zero(project: Project) -> None:
    checks = project.root / "checks.log"
    argv = ["sh", "-c", f"echo x >> {checks}"]
    project.configure({"a": {"preflight": [argv]}, "b": {"preflight": [argv], "preflight_reuse": 0}})
    orch = project.up()
    for role in ("a", "b"):
        for n in (1, 2):
            project.drop(role, f"{role}-{n}.md", {"id": f"{role}-{n}"})
            name = f"{role}-{n}.md"
            wait_for(lambda r=role, m=name: m in project.folder(r, "archive"), what=f"{name} archived")
    assert len(checks.read_text().splitlines()) == 3, "a: one check for two runs; b: one per run"
    db = sqlite3.connect(project.root / ".orchestrator" / "state.db")
    try:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 4
    finally:
        db.close()
    assert orch.stop() == 0


def test_a_signal_command_is_not_taken_by_the_orphan_reaper(tmp_path: Path):
    """A probe's child exits while the loop is busy; the tick's orphan reaper runs before asyncio reads its
    status: it must leave it, or asyncio says exit status 255 and the role's wakes are held."""

    async def main():
        if sys.version_info < (3, 12):  # asyncio's default watcher reaps at once; this one only when the loop runs
            watcher = asyncio.PidfdChildWatcher()
            watcher.attach_loop(asyncio.get_running_loop())
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                asyncio.set_child_watcher(watcher)
        task = asyncio.ensure_future(run_probe(Probe("signal", "s", ("/bin/sh", "-c", "sleep 0.1"), 5), tmp_path))
        await asyncio.sleep(0.05)  # started, still running
        time.sleep(0.4)  # the loop is busy: the command exits meanwhile and waits as a zombie
        procs.reap_orphans()
        return await task

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        previous = asyncio.get_child_watcher() if sys.version_info < (3, 12) else None
    try:
        result = asyncio.run(main())
    finally:  # the watcher is process-wide and bound to this loop, which is closed now: later tests need their own
        if previous is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                asyncio.set_child_watcher(previous)
    assert result.ok, result.problem
