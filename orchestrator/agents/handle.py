"""The one agent handle (``core.agent.AgentHandle``) for every backend and executor.

What differs between agents is handed to it as strategies (a ``Transport``, a ``Follower``, a ``Reader``, a
``FollowUp``) and its backend's ``Capabilities``, never subclassed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from orchestrator.agents.spec import LaunchSpec, SpawnError
from orchestrator.core.agent import (
    AgentHandle,
    AttemptVerdict,
    Capabilities,
    Judgement,
    KillReport,
    LastWords,
    Log,
    UsageLimit,
    describe_exit,
)
from orchestrator.core.errors import ControlError, OrchestratorError, UnsupportedError

QUEUED = "queued for the end of its turn"  # what a tell to a program agent's running turn becomes
UNKNOWN_EXIT = -signal.SIGKILL  # no record and no keeper's status: it was most likely killed with its keeper
TASK_WAIT = 2.0  # after the end, how long the agent's own tasks (its stdin's write) may take to finish


@dataclass(frozen=True)
class Ending:
    """How a transport saw its agent end: the exit status, and why when the transport knows better (a lost node)."""

    code: int
    reason: str | None = None
    at: float | None = None  # when it ended (epoch seconds), when that was before it was told (kept while no head was)


class Transport(Protocol):
    """Where an agent runs: its pid, how its end is awaited, how its tree is stopped."""

    pid: int | None
    create_time: float | None
    node: str | None
    stop_slack: float  # seconds its stop may take beyond the ladder's own (``AgentHandle.stop_slack``)

    async def ended(self) -> Ending: ...

    async def stop(self, agent: Agent, grace: float, log: Log, interrupt_first: bool) -> KillReport: ...

    def left_behind(self) -> bool: ...

    async def sweep(self, grace: float) -> KillReport: ...


class Follower(Protocol):
    """An SDK session as its runner reports it: figures, controls, and its own reasons for an end."""

    activity: str | None
    cost_usd: float | None
    result: dict[str, Any]
    session_id: str | None
    failure_reason: str | None
    interrupted: bool
    budget_exceeded: bool
    permanent_failure: bool
    usage_limit: UsageLimit | None
    warnings: list[str]
    closing: bool
    last_event_at: float | None

    async def interrupt(self, keep: bool = False) -> None: ...

    async def tell(self, text: str) -> None: ...

    async def settle(self) -> None:
        """The runner has ended: take in what its channel did not bring; controls are refused from now on."""
        ...

    def unexplained(self, code: int) -> str | None:
        """The reason to give a failure exit ``code`` that the session did not explain (None: none)."""
        ...

    def last_words(self) -> LastWords | None:
        """What the session last did and said, from its transcript's tail (blocking: read in a worker thread)."""
        ...


class Reader(Protocol):
    """A ``command`` agent's output, read at its end by its backend: its figures (``result``, the keys of
    ``AgentHandle.result``), and its own judgement of how it went (an error result, refused tool calls, a usage
    limit, no model call), whatever the exit status."""

    result: dict[str, Any]

    def judge(self, code: int) -> Judgement:
        """Read the output (once) and judge the end with exit ``code``; blocking file reads, so the end's waiter
        calls it in a worker thread."""
        ...


class FollowUp(Protocol):
    """A program agent's next turn in the same session (Codex's ``exec resume``), one process a turn: what a tell
    to its running turn becomes once that turn has ended well."""

    async def next_turn(self, agent: Agent, session_id: str, text: str) -> tuple[Transport, Reader | None]:
        """Start the turn that carries on ``session_id`` with ``text`` as its prompt: its process's transport and
        the reader of its output (whose figures are the attempt's so far). ``SpawnError`` when it cannot start.
        The tells it carries on are no longer kept once it starts (``keep``)."""
        ...

    def keep(self, told: list[str]) -> None:
        """Keep ``told``, the tells for the end of the running turn, where an orchestrator started after this one
        finds them; raises ``OSError`` when it cannot (the tell is then refused, not promised)."""
        ...


OnExit = Callable[["Agent", AttemptVerdict], None]


class Agent:
    """One attempt's agent: its spec, its transport, what its backend says it can do, and the follower or reader
    its backend gives it."""

    def __init__(
        self,
        spec: LaunchSpec,
        transport: Transport,
        *,
        capabilities: Capabilities,
        follower: Follower | None = None,
        reader: Reader | None = None,
        followup: FollowUp | None = None,
        outputs: tuple[Path, ...] = (),
    ) -> None:
        self.spec = spec
        self.transport = transport
        self.capabilities = capabilities
        self.follower = follower
        self.reader = reader
        self.followup = followup
        self.told: list[str] = []  # tells kept for the end of the running turn (a ``followup`` agent's)
        self.turn_open = True  # its process runs: a tell can still be kept for the turn after it
        self.stopping = False  # a stop was asked: no next turn starts
        self._switch: asyncio.Future[None] | None = None  # the next turn's start, which a stop waits for
        self.on_turn: Callable[[AgentHandle], None] | None = None  # told of each next turn's process (``AgentHandle``)
        self.outputs = (spec.log_path, *outputs)  # files whose writes show it is alive (for the stall check)
        self.verdict: AttemptVerdict | None = None
        self.done: asyncio.Future[None] | None = None  # ends once ``on_exit`` has been told the verdict
        self._tasks: list[asyncio.Future[Any]] = []

    # ------------------------------------------------------------ what the supervisor reads
    @property
    def backend(self) -> str:
        return self.spec.role.backend

    @property
    def pid(self) -> int | None:
        return self.transport.pid

    @property
    def create_time(self) -> float | None:
        return self.transport.create_time

    @property
    def node(self) -> str | None:
        return self.transport.node

    @property
    def stop_slack(self) -> float:
        return self.transport.stop_slack

    @property
    def activity(self) -> str | None:
        if self.follower is None and self.told:  # a program agent's tells, kept for the end of its turn
            return f"{len(self.told)} tell(s) kept for the end of its turn"
        return self.follower.activity if self.follower is not None else None

    @property
    def cost_usd(self) -> float | None:
        return self.follower.cost_usd if self.follower is not None else None

    @property
    def result(self) -> dict[str, Any]:
        if self.follower is not None:
            return self.follower.result
        return self.reader.result if self.reader is not None else {}

    @property
    def session_id(self) -> str | None:
        return (self.follower.session_id if self.follower is not None else None) or self.result.get("session_id")

    @property
    def closing(self) -> bool:
        """Its session takes no more turns (it is finishing by itself): controls are refused."""
        return self.follower is not None and self.follower.closing

    # ------------------------------------------------------------ requests
    async def interrupt(self, keep: bool = False) -> None:
        instead = "use `orchestrator cancel` to stop it, or set `backend: sdk`"
        await self._session("interrupt a turn", instead).interrupt(keep)

    async def tell(self, text: str) -> str | None:
        """Into its session; a program agent with a ``followup`` keeps it for the end of its turn (``QUEUED``)."""
        if self.follower is not None or self.followup is None:
            await self._session("take follow-up messages", "set `backend: sdk` for that").tell(text)
            return None
        if not self.turn_open or self.stopping:
            raise ControlError(f"run {self.spec.run_id}'s agent has ended its turn and exited; nothing to tell")
        try:  # kept on disk before the receipt: a restart of the orchestrator meanwhile must not lose it
            self.followup.keep([*self.told, text])
        except OSError as exc:  # refused, not promised: the person may send it again once the cause is fixed
            named = exc.filename2 or exc.filename  # a rename's target, else the file written
            where = f" {named}" if named else ""
            raise ControlError(
                f"run {self.spec.run_id}: the tell could not be kept for the end of its turn (writing{where}: "
                f"{exc.strerror or exc}); nothing was queued: send it again once that is fixed"
            ) from None
        self.told.append(text)
        return QUEUED

    def _session(self, cannot: str, instead: str) -> Follower:
        """The agent's session; raises ``UnsupportedError`` (one line) for a command agent, which has no session."""
        if self.follower is None:
            raise UnsupportedError(
                f"role {self.spec.role.name} uses the {self.backend} backend, which cannot {cannot}; {instead}"
            )
        return self.follower

    async def stop(self, grace: float, log: Log, interrupt_first: bool) -> KillReport:
        self.stopping = True
        if self._switch is not None:  # a next turn being started is the one to stop
            await asyncio.shield(self._switch)
        return await self.transport.stop(self, grace, log, interrupt_first)

    def left_behind(self) -> bool:
        return self.transport.left_behind()

    def last_output(self) -> float | None:
        if self.follower is not None and self.follower.interrupted:
            return None  # a session kept open by `interrupt --keep` is rightly silent until a tell
        times = [self.follower.last_event_at] if self.follower is not None and self.follower.last_event_at else []
        for path in self.outputs:
            with contextlib.suppress(OSError):
                times.append(os.stat(path).st_mtime)
        return max(times, default=None)

    async def sweep(self, grace: float) -> KillReport:
        return await self.transport.sweep(grace)

    # ------------------------------------------------------------ the end
    def keep(self, task: asyncio.Future[Any] | None) -> None:
        """A task of this agent's (its stdin's write) that its end waits for, briefly."""
        if task is not None:
            self._tasks.append(task)

    def watch(self, on_exit: OnExit) -> None:
        """Wait for the agent's end (in a task); then ``on_exit(agent, verdict)``, once."""

        async def waiter() -> None:
            # whatever goes wrong, the end is told: a silent waiter would hold the run's slot until its timeout
            while True:
                try:
                    ending = await self.transport.ended()
                    code, reason, at = ending.code, ending.reason, ending.at
                except Exception as exc:  # noqa: BLE001 - told as the attempt's end, with the error as its reason
                    code, reason, at = UNKNOWN_EXIT, _internal("reading the agent's end", exc), None
                self.turn_open = False
                for task in self._tasks:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await asyncio.wait_for(task, TASK_WAIT)
                self._tasks.clear()
                try:
                    if self.follower is not None:
                        await self.follower.settle()
                    # the output is read in a worker thread: a 50 MB stream's end must not hold the loop
                    judged = await asyncio.to_thread(self.read_end, code, reason)
                    started, judged = await self._next_turn(code, reason, judged)
                    if started:
                        continue
                    verdict = self.conclude(code, reason, judged, at)
                except Exception as exc:  # noqa: BLE001 - likewise
                    verdict = AttemptVerdict(
                        code, failure_reason=reason or _internal("reading the agent's report", exc), ended_at=at
                    )
                    self.verdict = verdict
                on_exit(self, verdict)
                return

        self.done = asyncio.ensure_future(waiter())  # a strong reference: the loop keeps only weak ones

    async def _next_turn(self, code: int, reason: str | None, judged: Judgement) -> tuple[bool, Judgement]:
        """Start the next turn with what was told during this one, when it ended well and no stop was asked:
        whether it started, and the judgement to conclude with when not (one that fails the attempt, saying why,
        when the next turn could not start)."""
        session = self.session_id
        ended_well = code == 0 and reason is None and not judged.failed and session is not None
        if self.followup is None or not self.told or self.stopping or not ended_well:
            return False, judged
        assert session is not None
        text, self.told = "\n\n".join(self.told), []
        self._switch = switch = asyncio.get_running_loop().create_future()
        try:
            self.transport, self.reader = await self.followup.next_turn(self, session, text)
        except (OrchestratorError, SpawnError, OSError) as exc:  # a start's own errors: the attempt fails, said
            return False, dataclasses.replace(judged, failed=True, reason=f"the turn told to it could not start: {exc}")
        finally:
            switch.set_result(None)
            self._switch = None
        self.turn_open = True
        if self.on_turn is not None:
            self.on_turn(self)
        return True, judged

    async def wait_done(self, timeout: float) -> bool:
        """Whether the end has been told within ``timeout`` seconds (waiting does not call it off)."""
        if self.done is None:
            return False
        try:
            await asyncio.wait_for(asyncio.shield(self.done), timeout)
        except TimeoutError:
            return False
        return True

    def read_end(self, code: int, reason: str | None = None) -> Judgement:
        """What the agent's output says of its end with exit status ``code`` (blocking file reads)."""
        if self.reader is not None and reason is None:
            return self.reader.judge(code)
        if self.follower is not None:
            return Judgement(last_words=self.follower.last_words())
        return Judgement()

    def conclude(
        self, code: int, reason: str | None = None, judged: Judgement | None = None, at: float | None = None
    ) -> AttemptVerdict:
        """The verdict of an end with exit status ``code`` (``reason``: the transport's own, which comes first;
        ``judged``: its output's reading, read now when not given; ``at``: when it ended, if not as it is told)."""
        follower = self.follower
        judged = judged if judged is not None else self.read_end(code, reason)
        if follower is not None:
            reason = reason or follower.failure_reason or follower.unexplained(code)
            permanent, limit = follower.permanent_failure, follower.usage_limit if code != 0 else None
        else:
            reason, permanent, limit = reason or judged.reason, judged.permanent, judged.usage_limit
        warnings = judged.warnings + tuple(follower.warnings if follower is not None else ())
        if self.told and not self.stopping:  # a receipt said "queued": its loss is said, never silent
            lost = f"{len(self.told)} tell(s) kept for the end of its turn were not given to it"
            if code != 0 or reason or judged.failed:
                reason = f"{reason or describe_exit(code)}; {lost}"
            elif self.followup is None:  # told to an orchestrator before a restart, which cannot carry them on
                warnings = (
                    *warnings,
                    f"{lost}: the orchestrator restarted during its turn and could not carry them on",
                )
            else:
                warnings = (*warnings, f"{lost}: it reported no thread to carry them on")
        self.verdict = AttemptVerdict(
            code,
            interrupted=follower is not None and follower.interrupted,
            budget_exceeded=follower is not None and follower.budget_exceeded,
            permanent_failure=permanent,
            session_id=self.session_id,
            failure_reason=reason,
            usage_limit=limit,
            agent_failed=judged.failed,
            warnings=warnings,
            last_words=judged.last_words,
            deferred=judged.deferred,
            ended_at=at,
        )
        return self.verdict


async def end_turn_first(agent: Agent, grace: float, log: Log) -> None:
    """End an SDK agent's turn cleanly; the kill ladder follows after ``grace`` if it has not ended."""
    try:
        await agent.interrupt()
    except ControlError:
        if not agent.closing:
            return
        # its last turn is over and the CLI is saving the session: let it finish within the grace period
    if agent.done is not None and not await agent.wait_done(grace):
        log(f"no end of turn within {grace:g}s; using the kill ladder")


class HandleStops:
    """The real spawners' stops: each agent (an adopted one too) is stopped the way its handle knows."""

    async def stop(self, agent: AgentHandle, grace: float, log: Log, interrupt_first: bool) -> KillReport:
        return await agent.stop(grace, log, interrupt_first)

    def left_behind(self, agent: AgentHandle) -> bool:
        return agent.left_behind()

    async def sweep(self, agent: AgentHandle, grace: float) -> KillReport:
        return await agent.sweep(grace)


def _internal(doing: str, exc: BaseException) -> str:
    return f"internal error while {doing}: {type(exc).__name__}: {exc}"
