"""The head's side of the Ray executor: each attempt is one Ray task running the wrapper.

The rules on time (``start_timeout``, ``lost_after``) read the supervisor's clock; the bounds on waiting for Ray
itself (``BOARD_WAIT``, ``CANCEL_WAIT``) are real time. See docs/operations.md, Running on a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.agents import memo_list, procs
from orchestrator.agents.backends import capabilities
from orchestrator.agents.handle import Agent, HandleStops, OnExit, end_turn_first
from orchestrator.agents.ray import first_line
from orchestrator.agents.ray.agent import BoardCarrier, RayAttempt, append_transcript
from orchestrator.agents.ray.board import StopBoard, wrapper_task
from orchestrator.agents.ray.cluster import connect
from orchestrator.agents.ray.wire import (
    AnyMessage,
    ControlAnswer,
    Ended,
    Output,
    Payload,
    SdkEvent,
    Started,
    StartFailed,
    TranscriptLines,
    parse,
)
from orchestrator.agents.sdk.backend import runner_spec, session_header
from orchestrator.agents.sdk.follow import SdkFollow
from orchestrator.agents.sdk.protocol import explain
from orchestrator.agents.spec import LaunchSpec, SpawnError, open_log, transcript_path
from orchestrator.config.ray import ExecutorSettings
from orchestrator.core.agent import KillReport, Log
from orchestrator.core.clock import Clock, SystemClock

BOARD_WAIT = 5.0  # how long a stop request may take to reach the stop board
CANCEL_WAIT = 5.0  # after ray.cancel(force=True), how long to wait for Ray to say the task is gone
SESSION_NODES = 1000  # how many runs' last sdk node are remembered (for a retry that resumes the session)


class RaySpawner(HandleStops):
    """Agents as Ray tasks, one per attempt, under the head's limits, retry policy and logs."""

    def __init__(self, root: Path, settings: ExecutorSettings, say: Log, clock: Clock | None = None) -> None:
        self.root = str(root)
        self.settings = settings
        self.say = say
        self.clock: Clock = clock or SystemClock()
        self.ray = connect(settings)
        self.leases: set[str] = set()  # the attempts whose results the head still accepts
        self.session_nodes: dict[int, str] = {}  # run id -> the node of its last sdk attempt (its session files)
        here = self.ray.get_runtime_context().get_node_id()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.board = (
            self.ray.remote(StopBoard)
            .options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True))
            .remote()
        )
        self.task = self.ray.remote(num_returns="streaming", max_retries=0)(wrapper_task)  # retries are the role's

    # ------------------------------------------------------------ start
    def _payload(self, spec: LaunchSpec, lease: str) -> Payload:
        role = spec.role
        memos = {}
        for path in spec.memo_paths:
            try:
                memos[path.name] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise SpawnError(f"cannot read {path.name} to send it to the worker: {exc}") from None
        if not memos:
            raise SpawnError("no memo to send to the worker")
        # what differs from the head's own environment: the role's env and the ORCHESTRATOR_* variables
        env = {k: v for k, v in spec.env.items() if os.environ.get(k) != v or k in role.env}
        for key in memo_list.MEMO_KEYS:  # the wrapper names its own copies
            env.pop(key, None)
        sdk: dict[str, Any] = {}
        if role.backend == "sdk":
            sdk = {"backend": "sdk", "sdk_spec": _sdk_spec(spec), "cli_path": role.cli_path}
        return Payload(
            run_id=spec.run_id,
            attempt=spec.attempt,
            lease=lease,
            role=role.name,
            root=self.root,
            argv=[*role.command, *spec.args],
            prompt=spec.prompt,
            prompt_via=role.prompt_via,
            cwd=_relative_to(spec.cwd, spec.root),
            env=env,
            memos=memos,
            batch=role.batch,
            poll=self.settings.poll,
            beat=self.settings.beat,
            lost_after=self.settings.lost_after,
            **sdk,
        )

    def _options(self, spec: LaunchSpec) -> dict[str, Any]:
        """The task's resources and placement for this attempt."""
        res = spec.role.resources
        options: dict[str, Any] = {"num_cpus": res.cpu, "num_gpus": res.gpu}
        if res.custom:
            options["resources"] = dict(res.custom)
        if res.node_labels:
            options["label_selector"] = dict(res.node_labels)
        node = self.session_nodes.get(spec.run_id)
        if spec.resume and node and not res.node_labels:
            # the session's files are on the node that ran it: prefer that node (soft: another one if it is gone)
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True)
        return options

    async def start(self, spec: LaunchSpec, on_exit: OnExit) -> Agent:
        """Submit the attempt's task; return once the wrapper has started the agent on a worker."""
        lease = uuid.uuid4().hex
        payload = self._payload(spec, lease)
        gen = self.task.options(**self._options(spec)).remote(payload.model_dump(), self.board)
        attempt = RayAttempt(self.stop_attempt, spec, lease, gen)
        agent = Agent(spec, attempt, capabilities=capabilities(spec.role), follower=self._follow(attempt))
        self.leases.add(lease)
        os.close(open_log(spec.log_path, self._header(spec)))
        try:
            first = await self._started(attempt)
        except SpawnError:
            self._revoke(attempt)
            raise
        attempt.pid, attempt.node = first.pid, first.node
        if spec.role.backend == "sdk" and first.node_id:
            self.session_nodes[spec.run_id] = first.node_id
            while len(self.session_nodes) > SESSION_NODES:
                self.session_nodes.pop(next(iter(self.session_nodes)))
        if first.orphans:
            self.say(f"run {spec.run_id}: killed orphaned agent processes {first.orphans} on {first.node}")
        agent.watch(on_exit)
        attempt.pump = asyncio.ensure_future(self._pump(attempt))
        return agent

    async def _started(self, attempt: RayAttempt) -> Started:
        """The wrapper's first message, which says the agent started; else ``SpawnError`` with why not."""
        first_word = _pending(self._next(attempt.gen))
        if not await self._within(first_word, self.settings.start_timeout):
            self._cancel(attempt.gen)
            raise SpawnError(
                f"no Ray node could take it within {self.settings.start_timeout:g}s "
                f"(it asks for {self._options(attempt.spec)})"
            )
        try:
            first = first_word.result()
        except StopAsyncIteration:
            raise SpawnError("the Ray task ended before the agent started") from None
        except self.ray.exceptions.RayError as exc:
            raise SpawnError(f"the Ray task failed before the agent started: {first_line(exc)}") from None
        if isinstance(first, StartFailed):
            attempt.node = first.node
            raise SpawnError(first.reason)
        if not isinstance(first, Started):
            raise SpawnError(f"the wrapper said {first.type!r} before it started the agent")
        return first

    def _follow(self, attempt: RayAttempt) -> SdkFollow | None:
        """An sdk attempt's session follower, its controls carried by the stop board."""
        spec = attempt.spec
        if spec.role.backend != "sdk":
            return None
        attempt.board = BoardCarrier(attempt, self._post, self.settings.poll * 10 + BOARD_WAIT)
        attempt.follow = SdkFollow(spec.run_id, transcript_path(spec), spec.log_path, attempt.board)
        return attempt.follow

    @staticmethod
    def _header(spec: LaunchSpec) -> str:
        if spec.role.backend == "sdk":
            return session_header(spec, " (ray)") + "\n"
        return f"\n=== run {spec.run_id} attempt {spec.attempt} (ray): " + " ".join(spec.role.command[:8]) + "\n"

    async def _within(self, future: asyncio.Future[Any], seconds: float) -> bool:
        """Whether ``future`` is done within ``seconds`` on the supervisor's clock."""
        late = asyncio.ensure_future(self.clock.sleep(seconds))
        try:
            await asyncio.wait({future, late}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            late.cancel()
        return future.done()

    async def _post(self, attempt: RayAttempt, control: dict[str, Any]) -> None:
        """Leave a control message in the attempt's mailbox, which its wrapper empties at its next poll."""
        await asyncio.wait_for(self.board.post.remote(attempt.lease, control), BOARD_WAIT)

    async def _next(self, gen: Any) -> AnyMessage:
        ref = await gen.__anext__()
        return parse(await ref)

    def _revoke(self, attempt: RayAttempt) -> None:
        self.leases.discard(attempt.lease)
        with contextlib.suppress(Exception):
            self.board.forget.remote(attempt.lease)

    def _cancel(self, gen: Any) -> None:
        with contextlib.suppress(Exception):
            self.ray.cancel(gen, force=True)

    # ------------------------------------------------------------ the stream
    def _watchdog(self, attempt: RayAttempt) -> None:
        """Give the attempt up after ``lost_after`` with no word from its wrapper, on the supervisor's clock."""
        lost_after = self.settings.lost_after

        def check() -> None:
            if attempt.finished:
                return
            quiet = self.clock.monotonic() - attempt.heard
            if quiet < lost_after:
                attempt.watchdog = self.clock.call_later(lost_after - quiet, check)
                return
            why = f"no word from the wrapper on {attempt.node} for {lost_after:g}s (a partition or a lost node)"
            self._end(attempt, None, why)
            self._ask_stop(attempt, 0.0)

        attempt.watchdog = self.clock.call_later(lost_after, check)

    async def _pump(self, attempt: RayAttempt) -> None:
        """Read the wrapper's stream to its end; the attempt ends once, at the first of its report, Ray's error or
        ``lost_after`` of silence."""
        spec = attempt.spec
        attempt.heard = self.clock.monotonic()
        self._watchdog(attempt)
        log_fd = open_log(spec.log_path, "")
        try:
            while True:
                word = _pending(self._next(attempt.gen))
                await asyncio.wait({word})
                try:
                    message = word.result()
                except StopAsyncIteration:
                    break
                except self.ray.exceptions.RayError as exc:
                    self._end(attempt, None, _lost_reason(exc, attempt.node))
                    break
                attempt.heard = self.clock.monotonic()
                if attempt.lease not in self.leases or message.lease != attempt.lease:
                    self.say(
                        f"run {spec.run_id} attempt {spec.attempt}: a {message.type!r} message from {attempt.node} came "
                        "after the head gave this attempt up; ignored"
                    )
                    continue
                if isinstance(message, Output):
                    os.write(log_fd, message.data.encode("utf-8"))
                elif isinstance(message, SdkEvent) and attempt.follow is not None:
                    attempt.follow.apply_line(message.line)  # the figures, as locally
                elif isinstance(message, TranscriptLines) and attempt.follow is not None:
                    append_transcript(attempt.follow.transcript, message.data)
                elif isinstance(message, ControlAnswer) and attempt.board is not None:
                    attempt.board.answered(message.id, message.refused)
                elif isinstance(message, Ended):
                    if message.stopped:
                        attempt.report = KillReport(message.pids, message.seconds, message.escalated, message.survivors)
                    else:
                        attempt.exit_pids = list(message.pids)
                    lost = f"the wrapper on {attempt.node} could not reach the head"
                    self._end(attempt, message.code, lost if message.why == "lost the head" else None)
        finally:
            os.close(log_fd)
            if attempt.watchdog is not None:
                attempt.watchdog.cancel()
        if not attempt.finished:
            self._end(attempt, None, f"the wrapper on {attempt.node} ended without reporting the agent's exit")

    def _end(self, attempt: RayAttempt, code: int | None, reason: str | None) -> None:
        """End the attempt and give its lease up, once (``reason``: why it failed)."""
        if attempt.end(code, reason):
            self._revoke(attempt)

    def _ask_stop(self, attempt: RayAttempt, grace: float) -> Any:
        try:
            return self.board.stop.remote(attempt.lease, grace)
        except Exception:  # noqa: BLE001 - the board is unreachable: the wrapper fences itself after lost_after
            return None

    # ------------------------------------------------------------ stop
    async def stop_attempt(
        self, attempt: RayAttempt, agent: Agent, grace: float, log: Log, interrupt_first: bool
    ) -> KillReport:
        """Ask the wrapper to stop the tree and wait for its report; if it is gone, ``ray.cancel(force=True)``.

        An sdk agent is first asked to end its turn (as locally); if the runner then exits by itself within
        ``grace``, the wrapper's sweep of what it left is the last step."""
        started = time.monotonic()
        if interrupt_first and agent.capabilities.interrupt and not attempt.finished:
            await end_turn_first(agent, grace, log)
            if attempt.finished and attempt.lost is None and attempt.report is None:
                log(f"the session on {attempt.node} ended its turn; the wrapper swept what it left")
                pids = sorted(pid for pid in {attempt.pid, *attempt.exit_pids} if pid is not None)
                return KillReport(pids=pids, seconds=time.monotonic() - started)
        if not attempt.finished and attempt.pump is not None:
            sent = self._ask_stop(attempt, grace)
            if sent is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(sent, BOARD_WAIT)
            log(f"asked the wrapper on {attempt.node} to stop the agent's tree (SIGTERM, {grace:g}s grace, SIGKILL)")
            bound = grace + procs.KILL_WAIT + self.settings.poll * 10 + BOARD_WAIT
            await asyncio.wait({attempt.pump}, timeout=bound)
        if attempt.report is not None:
            log(
                f"the wrapper on {attempt.node} reported the tree dead: {len(attempt.report.pids)} process(es) "
                f"{attempt.report.pids} in {attempt.report.seconds:.2f}s"
            )
            return attempt.report
        if attempt.finished and attempt.lost is None:
            return KillReport()  # it exited by itself before the stop reached it; the wrapper swept its group
        why = attempt.lost or f"no report within {grace + procs.KILL_WAIT:g}s"
        log(f"the wrapper on {attempt.node} did not report the tree dead ({why}); ray.cancel(force=True)")
        self._cancel(attempt.gen)
        if attempt.pump is not None:
            await asyncio.wait({attempt.pump}, timeout=CANCEL_WAIT)
        self._end(attempt, None, why)
        log(
            f"forced cancel of the Ray task done; the agent (pid {attempt.pid}) could not be checked and is killed by "
            f"the next wrapper that runs on {attempt.node}"
        )
        pids = [attempt.pid] if attempt.pid else []
        return KillReport(pids=pids, survivors=list(pids))


def _sdk_spec(spec: LaunchSpec) -> dict[str, Any]:
    """The runner's spec as the head knows it; the wrapper fills in ``cwd``, ``transcript`` and ``cli_path``."""
    try:
        return runner_spec(spec, None, spec.cwd, transcript_path(spec))
    except ValidationError as exc:
        raise SpawnError(f"cannot describe the run to the sdk runner: {explain(exc, 'the spec')}") from None


def _relative_to(cwd: Path, root: Path) -> str:
    """The agent's folder as the worker joins it to the root: relative when it lies under the root (the worker's
    copy of the project may have another real path), else as it is."""
    try:
        return str(cwd.relative_to(root.resolve()))
    except ValueError:
        return str(cwd)


def _pending(coro: Any) -> asyncio.Future[Any]:
    """A task whose error is always retrieved, even when nobody waits for it any more (a start given up): asyncio
    would otherwise print it with a traceback at exit."""
    task = asyncio.ensure_future(coro)
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    return task


def _lost_reason(exc: BaseException, node: str | None) -> str:
    """A Ray error as a failed attempt's reason."""
    name = type(exc).__name__
    if "NodeDied" in name:
        return f"the Ray node {node} died"
    if "WorkerCrashed" in name or "ActorDied" in name or "OwnerDied" in name:
        return f"the Ray worker on {node} died (its agent is killed by the next wrapper on that node)"
    if "Cancelled" in name:
        return f"the Ray task on {node} was cancelled"
    return f"Ray lost the task on {node}: {name}: {first_line(exc)}"
