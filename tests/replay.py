"""The replay harness: scripted events through the real supervisor loop, with no process and no real time.

Only the two injected boundaries are replaced: the clock (``ManualClock``, moved by
``advance``) and the spawner (``FakeSpawner``, whose agents exit when the script says
so). Memos are real files in a real project folder and the database is the real one,
so every rule (retries, timeouts, crash loops, budgets, cancel at each stage) runs
through the same lifecycle as in production, in a few milliseconds.
"""

from __future__ import annotations

import asyncio
import io
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from orchestrator.agents.backends import capabilities
from orchestrator.agents.spec import SpawnError
from orchestrator.compose import build_supervisor
from orchestrator.config import load_config
from orchestrator.console import Console
from orchestrator.continuity.hooks import Continuity
from orchestrator.core.agent import AttemptVerdict, KillReport, LastWords, UsageLimit
from orchestrator.core.clock import ManualClock
from orchestrator.core.errors import ControlError
from orchestrator.core.events import CancelRequested, InterruptRequested, MemoSeen, StopRequested, TellRequested
from orchestrator.core.run import Run
from orchestrator.core.states import RunState
from orchestrator.intake.memo import FOLDERS
from orchestrator.memory.curator import MemoryCurator
from orchestrator.retention.daily import DailyPass
from orchestrator.schedule.wakes import Wakes
from orchestrator.supervisor.extension import ExtensionFactory

WORKER_WAIT = 10.0  # seconds a settle waits for the intake's worker thread (a loaded machine is slow)


class FakeAgent:
    """An agent that does nothing until the script makes it exit."""

    def __init__(self, spec: Any, on_exit: Any, backend: str) -> None:
        self.spec = spec
        self.on_exit = on_exit
        self.backend = backend
        self.capabilities = capabilities(spec.role)
        self.pid = 4_000_000 + spec.run_id * 100 + spec.attempt  # above any real pid: signals reach nobody
        self.create_time: float | None = None
        self.node: str | None = None
        self.stop_slack = 0.0
        self.activity: str | None = None
        self.cost_usd: float | None = None
        self.result: dict[str, Any] = {}
        self.session_id: str | None = None
        self.failure_reason: str | None = None
        self.usage_limit: UsageLimit | None = None  # set before ``exit``: the attempt met its account's limit
        self.budget_exceeded = False
        self.interrupted = False
        self.verdict: AttemptVerdict | None = None
        self.alive = True
        self.refuse_interrupt = False
        self.told: list[str] = []
        self.output_at: float | None = None  # when it last wrote (epoch seconds); None: it cannot be known
        self.last_words: LastWords | None = None  # what its verdict says it last did and said

    def last_output(self) -> float | None:
        return self.output_at

    def exit(self, code: int) -> None:
        if self.alive:
            self.alive = False
            self.verdict = AttemptVerdict(
                code,
                interrupted=self.interrupted,
                budget_exceeded=self.budget_exceeded,
                session_id=self.session_id or self.result.get("session_id"),
                failure_reason=self.failure_reason,
                usage_limit=self.usage_limit,
                last_words=self.last_words,
            )
            self.on_exit(self, self.verdict)

    async def interrupt(self, keep: bool = False) -> None:
        if self.refuse_interrupt:
            raise ControlError(f"run {self.spec.run_id}'s agent session has already ended; nothing to interrupt")
        self.interrupted = True

    async def tell(self, text: str) -> None:
        self.told.append(text)
        self.interrupted = False


class FakeSpawner:
    """Starts ``FakeAgent``s; ``refuse`` makes starts fail (``break_on``: raise as a bug would), ``hold_start``/
    ``hold_stop`` keep them pending."""

    def __init__(self) -> None:
        self.agents: list[FakeAgent] = []
        self.refuse: str | None = None
        self.refuse_internal = False  # the refusal is of the orchestrator's doing (SpawnError.internal)
        self.hold_start: asyncio.Event | None = None
        self.hold_stop: asyncio.Event | None = None
        self.stops: list[tuple[int, float, bool]] = []
        self.break_on: str | None = None  # a start for a memo whose name contains it raises what no start should
        self.exit_on_stop = True  # False: a stop reports the tree dead and the script tells the exit later
        self.asked_left: list[int] = []  # the run ids whose ended agents were asked what they left behind

    async def start(self, spec: Any, on_exit: Any) -> FakeAgent:
        if self.hold_start is not None:
            await self.hold_start.wait()
        if self.refuse:
            raise SpawnError(self.refuse, internal=self.refuse_internal)
        if self.break_on is not None and any(self.break_on in path.name for path in spec.memo_paths):
            raise RuntimeError(f"injected fault for run {spec.run_id}")
        agent = FakeAgent(spec, on_exit, spec.role.backend)
        self.agents.append(agent)
        return agent

    async def stop(self, agent: Any, grace: float, log: Any, interrupt_first: bool) -> KillReport:
        self.stops.append((agent.spec.run_id, grace, interrupt_first))
        if self.hold_stop is not None:
            await self.hold_stop.wait()
        pids = [agent.pid] if isinstance(agent, FakeAgent) and agent.alive else []
        if isinstance(agent, FakeAgent) and self.exit_on_stop:  # an adopted agent is a real process: the test ends it
            agent.exit(-15)
        return KillReport(pids=pids, seconds=0.0)

    def left_behind(self, agent: FakeAgent) -> bool:
        self.asked_left.append(agent.spec.run_id)
        return False

    async def sweep(self, agent: FakeAgent, grace: float) -> KillReport:
        return KillReport()


class RecordingConsole(Console):
    """The real printer into a buffer, remembering every transition it was told of."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()
        super().__init__(None, stream=self.buffer, live=False)
        self.edges: list[tuple[RunState, RunState]] = []

    def event(self, run: Any, old: RunState, new: RunState) -> None:
        self.edges.append((old, new))
        super().event(run, old, new)

    @property
    def text(self) -> str:
        return self.buffer.getvalue()


@dataclass(frozen=True)
class Boom:
    """An event no handler knows: the loop must treat it as a bug in the run it names."""

    run_id: int


class Replay:
    """One project root driven by a script; use inside a running asyncio loop."""

    def __init__(
        self,
        root: Path,
        roles: dict[str, dict[str, Any]] | None = None,
        start: datetime | None = None,
        more: Sequence[ExtensionFactory] = (),
        **top: Any,
    ) -> None:
        """``more``: features of the test's own, plugged in after the team's (``compose.build_supervisor``)."""
        self.root = root
        roles = roles if roles is not None else {"builder": {}}
        data: dict[str, Any] = {"max_concurrent": 10, "rescan_interval": "5s", **top}
        defaults = {"command": [sys.executable, "-c", "pass"], "grace": "2s", "retry": {"max": 0, "backoff": ["1s"]}}
        defaults.update(data.pop("defaults", {}))
        data["defaults"] = defaults
        data["roles"] = {}
        for name, settings in roles.items():
            settings = {"prompt": f"prompts/{name}.md", **settings}
            data["roles"][name] = settings
            prompt = root / settings["prompt"]
            prompt.parent.mkdir(parents=True, exist_ok=True)
            prompt.write_text("memo $memo_path\n$memo", encoding="utf-8")
        (root / "roles.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        self.config = load_config(root)
        self.clock = ManualClock(start)  # ``start``: the wall clock's first reading (default: a fixed day)
        self.spawner = FakeSpawner()
        self.console = RecordingConsole()
        self.sup = build_supervisor(self.config, self.console, clock=self.clock, spawner=self.spawner, more=more)
        self.sup.loop = asyncio.get_running_loop()
        for role in self.config.roles:
            for folder in FOLDERS:
                (self.config.role_dir(role) / folder).mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------ the features
    @property
    def wakes(self) -> Wakes:
        return self.sup.extension(Wakes)

    @property
    def memory(self) -> MemoryCurator:
        return self.sup.extension(MemoryCurator)

    @property
    def continuity(self) -> Continuity:
        return self.sup.extension(Continuity)

    @property
    def retention(self) -> DailyPass:
        return self.sup.extension(DailyPass)

    # ------------------------------------------------------------ script
    async def settle(self) -> None:
        """Let the spawn, stop and answer tasks run to their next wait (no real time passes for the rules), and the
        intake's look for a memo's writers, which runs in a worker thread, come back (real time, bounded)."""
        for _ in range(30):
            await asyncio.sleep(0)
        end = time.monotonic() + WORKER_WAIT
        while self.sup.intake._checking and time.monotonic() < end:
            await asyncio.sleep(0.002)
            for _ in range(30):
                await asyncio.sleep(0)

    async def drop(self, role: str, name: str, body: str = "body", front: dict[str, Any] | None = None) -> Path:
        path = self.config.role_dir(role) / "inbox" / name
        header = front if front is not None else {"id": name.removesuffix(".md")}
        path.write_text("---\n" + yaml.safe_dump(header) + "---\n" + body + "\n", encoding="utf-8")
        self.sup.post(MemoSeen(role, path, complete=True))
        await self.settle()
        return path

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.settle()

    def agent(self, memo: str, attempt: int | None = None) -> FakeAgent:
        """The newest agent started for the memo (by id or file name)."""
        for agent in reversed(self.spawner.agents):
            names = [p.name for p in agent.spec.memo_paths]
            if (memo in names or memo + ".md" in names) and (attempt is None or agent.spec.attempt == attempt):
                return agent
        raise AssertionError(
            f"no agent started for {memo}; started: {[a.spec.memo_paths for a in self.spawner.agents]}"
        )

    async def exit(self, memo: str, code: int) -> None:
        self.agent(memo).exit(code)
        await self.settle()

    async def request(self, kind: type, **fields: Any) -> asyncio.Future[Any]:
        """Post a control request as the control channel would; the future holds its answer."""
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        defaults: dict[str, Any] = {"who": "tester"}
        if kind is CancelRequested:
            defaults.update(memo=None, role=None, all=False, reason="")
        elif kind is InterruptRequested:
            defaults.update(keep=False, reason="interrupted")
        elif kind is StopRequested:
            defaults.update(force=False)
        elif kind is TellRequested:
            defaults.update(text="more")
        self.sup.post(kind(**{**defaults, **fields}, reply=reply))
        await self.settle()
        return reply

    # ------------------------------------------------------------ looking
    def run_of(self, memo: str) -> Run:
        for run in self.sup.runs.values():
            if any(m.name in (memo, memo + ".md") or m.memo_id == memo for m in run.memos):
                return run
        raise AssertionError(f"no live run for {memo}: {[r.memos for r in self.sup.runs.values()]}")

    def state(self, memo: str) -> str:
        try:
            return self.run_of(memo).state.value
        except AssertionError:
            rows = [r for r in self.sup.store.history() if memo + ".md" in r["memos"] or memo in r["memos"]]
            return rows[-1]["state"] if rows else "unknown"

    def folder(self, role: str, folder: str) -> list[str]:
        return sorted(p.name for p in (self.config.role_dir(role) / folder).iterdir() if p.name.endswith(".md"))

    def close(self) -> None:
        self.sup.store.close()
