"""The head's side of the Ray executor: each attempt is one detached Ray actor running the wrapper.

The head takes each actor's messages in a long poll; the next ``up`` after a crash re-attaches to the actors of its
unfinished runs (``reattach``) and halts the others (``halt_others``). The rules on time (``start_timeout``,
``lost_after``) read the supervisor's clock; the bounds on waiting for Ray itself (``BOARD_WAIT``, ``CANCEL_WAIT``)
are real time. See docs/operations.md, Running on a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

from orchestrator.agents import procs
from orchestrator.agents.backends import capabilities
from orchestrator.agents.handle import Agent, HandleStops, OnExit
from orchestrator.agents.ray import first_line, lost_reason, pending
from orchestrator.agents.ray.agent import BoardCarrier, RayAttempt, append_transcript
from orchestrator.agents.ray.board import TAKE_WAIT, WrapperActor
from orchestrator.agents.ray.cluster import connect
from orchestrator.agents.ray.names import NAMESPACE, Names
from orchestrator.agents.ray.payload import log_header, options_of, payload_of
from orchestrator.agents.ray.stopping import BOARD_WAIT, CANCEL_WAIT, AttemptStops, ask_stop, stop_slack
from orchestrator.agents.ray.sweep import sweep_report
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
from orchestrator.agents.sdk.follow import SdkFollow
from orchestrator.agents.spec import LaunchSpec, SpawnError, open_log, transcript_path
from orchestrator.config.ray import ExecutorSettings
from orchestrator.core.agent import KillReport, Log
from orchestrator.core.clock import Clock, SystemClock

SESSION_NODES = 1000  # how many runs' last sdk node are remembered (for a retry that resumes the session)
ACTOR_CALLS = 8  # calls one wrapper actor serves at once: the head's take, a stop, a control, a halt
HALT_WAIT = 10.0  # how long a halted actor of an earlier head may take to report its agent dead


class RaySpawner(HandleStops):
    """Agents as Ray actors, one per attempt, under the head's limits, retry policy and logs."""

    def __init__(
        self, root: Path, state_dir: Path, settings: ExecutorSettings, say: Log, clock: Clock | None = None
    ) -> None:
        self.root = str(root)
        self.settings = settings
        self.say = say
        self.clock: Clock = clock or SystemClock()
        self.ray = connect(settings)
        self.names = Names(self.root, state_dir)  # once the cluster is reached: the start that makes the key counts
        self.leases: set[str] = set()  # the attempts whose results the head still accepts
        self.session_nodes: dict[int, str] = {}  # run id -> the node of its last sdk attempt (its session files)
        self.actor = self.ray.remote(WrapperActor)  # one per attempt; its retries are the role's, never Ray's
        self.stops = AttemptStops(self.ray, self.root, self.names, settings, self._end, self._cancel)

    # ------------------------------------------------------------ start
    async def start(self, spec: LaunchSpec, on_exit: OnExit) -> Agent:
        """Create the attempt's actor; return once its wrapper has started the agent on a worker."""
        lease = uuid.uuid4().hex
        payload = payload_of(spec, lease, self.root, self.settings, self.names.key)
        attempt = RayAttempt(self.stops.stop, self._release, spec, lease, None, stop_slack(self.settings))
        agent = Agent(spec, attempt, capabilities=capabilities(spec.role), follower=self._follow(attempt))
        self.leases.add(lease)
        os.close(open_log(spec.log_path, log_header(spec)))
        try:
            attempt.actor = await self._create(spec, payload)
            first = await self._started(attempt)
        except SpawnError:
            self._revoke(attempt)
            raise
        self._begin(attempt, first)
        agent.watch(on_exit)
        return agent

    async def _create(self, spec: LaunchSpec, payload: Payload) -> Any:
        """The attempt's detached actor, named after it, told to start its wrapper. A name already taken is an
        actor of this attempt that no head took back: halted first, since only one may run the memo."""
        name = self.names.actor(spec.run_id, spec.attempt)
        options = dict(
            options_of(spec, self.session_nodes.get(spec.run_id)),
            name=name,
            namespace=NAMESPACE,
            lifetime="detached",
            max_restarts=0,
            max_concurrency=ACTOR_CALLS,
        )
        try:
            try:
                actor = self.actor.options(**options).remote(payload.model_dump())
            except ValueError:
                await self._halt(name)
                actor = self.actor.options(**options).remote(payload.model_dump())
            actor.start.remote()
        except Exception as exc:  # noqa: BLE001 - Ray's errors creating an actor, in one line for a person
            raise SpawnError(f"cannot create the Ray actor of the attempt: {first_line(exc)}") from None
        return actor

    def _begin(self, attempt: RayAttempt, first: Started) -> None:
        """The wrapper has started the agent: note where, and read its messages from now on."""
        spec = attempt.spec
        attempt.pid, attempt.node, attempt.node_id = first.pid, first.node, first.node_id
        if spec.role.backend == "sdk" and first.node_id:
            self.session_nodes[spec.run_id] = first.node_id
            while len(self.session_nodes) > SESSION_NODES:
                self.session_nodes.pop(next(iter(self.session_nodes)))
        if first.orphans:
            self.say(f"run {spec.run_id}: killed orphaned agent processes {first.orphans} on {first.node}")
        attempt.pump = asyncio.ensure_future(self._pump(attempt))

    async def _started(self, attempt: RayAttempt) -> Started:
        """The wrapper's first message, which says the agent started; else ``SpawnError`` with why not."""
        first_word = pending(self._first(attempt))
        if not await self._within(first_word, self.settings.start_timeout):
            self._cancel(attempt)
            raise SpawnError(
                f"no Ray node could take it within {self.settings.start_timeout:g}s "
                f"(it asks for {options_of(attempt.spec, None)})"
            )
        try:
            first = first_word.result()
        except self.ray.exceptions.RayError as exc:
            self._cancel(attempt)
            raise SpawnError(f"the Ray actor failed before the agent started: {first_line(exc)}") from None
        if isinstance(first, StartFailed):
            attempt.node = first.node
            self._cancel(attempt)
            raise SpawnError(first.reason)
        if not isinstance(first, Started):
            raise SpawnError(f"the wrapper said {first.type!r} before it started the agent")
        return first

    def _follow(self, attempt: RayAttempt) -> SdkFollow | None:
        """An sdk attempt's session follower, its controls carried by the wrapper's actor."""
        spec = attempt.spec
        if spec.role.backend != "sdk":
            return None
        attempt.board = BoardCarrier(attempt, self._post, self.settings.poll * 10 + BOARD_WAIT)
        attempt.follow = SdkFollow(spec.run_id, transcript_path(spec), spec.log_path, attempt.board)
        return attempt.follow

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
        await asyncio.wait_for(attempt.actor.post.remote(control), BOARD_WAIT)

    async def _take(self, attempt: RayAttempt) -> list[tuple[int, dict[str, Any]]]:
        """The messages a head that came back has yet to read, else the actor's next ones (a long poll)."""
        if attempt.backlog:
            batch, attempt.backlog = attempt.backlog, []
            return batch
        return list(await attempt.actor.take.remote(max(attempt.seq, attempt.floor), TAKE_WAIT))

    async def _first(self, attempt: RayAttempt) -> AnyMessage:
        """The wrapper's first message; the rest stay with the actor for the pump."""
        while True:
            for seq, data in await self._take(attempt):
                attempt.seq = seq
                return parse(data)

    def _revoke(self, attempt: RayAttempt) -> None:
        self.leases.discard(attempt.lease)

    def _cancel(self, attempt: RayAttempt) -> None:
        """Kill the attempt's actor, and so its wrapper (``sweep`` kills an agent it leaves)."""
        with contextlib.suppress(Exception):
            self.ray.kill(attempt.actor, no_restart=True)

    def _release(self, attempt: RayAttempt) -> None:
        """The head has the attempt's end: its actor, which kept it, is let go (a lost one is, by its pump)."""
        if attempt.finished and attempt.lost is None:
            self._cancel(attempt)

    # ------------------------------------------------------------ the stream
    def _watchdog(self, attempt: RayAttempt) -> None:
        """Give the attempt up after ``lost_after`` with no word from its wrapper, on the supervisor's clock."""
        lost_after = self.settings.lost_after

        def check() -> None:
            if attempt.finished or attempt.given_up is not None:
                return
            quiet = self.clock.monotonic() - attempt.heard
            if quiet < lost_after:
                attempt.watchdog = self.clock.call_later(lost_after - quiet, check)
                return
            attempt.watchdog = None
            attempt.given_up = (
                f"no word from the wrapper on {attempt.node} for {lost_after:g}s (a partition or a lost node)"
            )
            self._revoke(attempt)  # from now on its words are logged, never acted on
            pending(self._settle_given_up(attempt))

        attempt.watchdog = self.clock.call_later(lost_after, check)

    async def _settle_given_up(self, attempt: RayAttempt) -> None:
        """End an attempt given up for its silence once its agent is stopped, so that its retry never runs beside
        it: the wrapper is asked to stop the tree at once (one that is only silent does, and says so); one that
        does not say so within the bound (hung) has its agent killed by a task on its node (``sweep``; else by the
        next wrapper that starts there, before its own agent), then its actor killed through Ray, which ends the
        attempt. Its actor is let go either way."""
        ask_stop(attempt, 0.0)
        if attempt.pump is not None:
            await asyncio.wait({attempt.pump}, timeout=procs.KILL_WAIT + self.settings.poll * 10 + BOARD_WAIT)
            if not attempt.pump.done():
                said = f"run {attempt.spec.run_id}: "
                await sweep_report(self.ray, attempt, self.root, self.names.key, lambda t: self.say(said + t))
                self._cancel(attempt)
                await asyncio.wait({attempt.pump}, timeout=CANCEL_WAIT)
        self._cancel(attempt)
        self._end(attempt, None, attempt.given_up)

    async def _pump(self, attempt: RayAttempt) -> None:
        """Read the wrapper's messages to its last; the attempt ends once, at the first of its report, Ray's error or
        ``lost_after`` of silence. An attempt given up is read on to its end (late words are logged, never acted
        on), then its actor is let go."""
        attempt.heard = self.clock.monotonic()
        self._watchdog(attempt)
        log_fd = open_log(attempt.spec.log_path, "")
        try:
            said_last = False
            while not said_last:
                word = pending(self._take(attempt))
                await asyncio.wait({word})
                try:
                    batch = word.result()
                except self.ray.exceptions.RayError as exc:
                    self._end(attempt, None, lost_reason(exc, attempt.node))
                    break
                for seq, data in batch:
                    attempt.seq = seq
                    said_last = self._read(attempt, parse(data), log_fd) or said_last
        except Exception as exc:  # noqa: BLE001 - a full disk, a message of another version: the run must still end
            why = f"reading the wrapper's messages on {attempt.node} failed: {type(exc).__name__}: {exc}"
            self.say(f"run {attempt.spec.run_id}: {why}; its agent is stopped")
            attempt.given_up = why
            self._revoke(attempt)
            if attempt.watchdog is not None:  # given up already: no silence gives it up again, with another reason
                attempt.watchdog.cancel()
            ask_stop(attempt, 0.0)  # then its actor is killed (``finally``): once it said it stopped, or late
            await self._heard_last(attempt, procs.KILL_WAIT + self.settings.poll * 10 + BOARD_WAIT)
            self._end(attempt, None, why)
        finally:
            os.close(log_fd)
            if attempt.watchdog is not None:
                attempt.watchdog.cancel()
            if attempt.lost is not None:
                self._cancel(attempt)
        if not attempt.finished:
            self._end(attempt, None, f"the wrapper on {attempt.node} ended without reporting the agent's exit")

    async def _heard_last(self, attempt: RayAttempt, bound: float) -> None:
        """Take the wrapper's words, acted on no more, until its last (its tree stopped), for at most ``bound``
        seconds (real time, as every wait for Ray itself)."""
        deadline = time.monotonic() + bound
        while (left := deadline - time.monotonic()) > 0:
            word = pending(self._take(attempt))
            done, _ = await asyncio.wait({word}, timeout=left)
            if not done or word.exception() is not None:
                return
            for seq, data in word.result():
                attempt.seq = seq
                if data.get("type") == "ended":
                    return

    def _read(self, attempt: RayAttempt, message: AnyMessage, log_fd: int) -> bool:
        """Act on one of the wrapper's messages; True for its last (``ended``)."""
        spec = attempt.spec
        attempt.heard = self.clock.monotonic()
        if attempt.lease not in self.leases or message.lease != attempt.lease:
            self.say(
                f"run {spec.run_id} attempt {spec.attempt}: a {message.type!r} message from {attempt.node} came "
                "after the head gave this attempt up; ignored"
            )
            return isinstance(message, Ended)
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
            # an end said before a head came back (at most its last number then) ended while no head heard it: at its
            # wrapper's time; any later one is heard now, on the head's own clock
            at = message.at if attempt.seq <= attempt.floor else None
            self._end(attempt, message.code, lost if message.why == "lost the head" else None, at)
            return True
        return False

    def _end(self, attempt: RayAttempt, code: int | None, reason: str | None, at: float | None = None) -> None:
        """End the attempt and give its lease up, once (``reason``: why it failed; an attempt given up for its
        silence ends as such, whatever ended its stream; ``at``: when it ended, if not now)."""
        if attempt.given_up is not None:
            code, reason, at = None, attempt.given_up, None
        if attempt.end(code, reason, at):
            self._revoke(attempt)

    # ------------------------------------------------------------ a restart
    async def reattach(self, spec: LaunchSpec) -> Agent | None:
        """The attempt of ``spec`` as an earlier head left it: its live agent, or its kept end, read from its actor;
        None when no actor of it lives (its wrapper, its node or its wait for a head is over)."""
        kept = None
        for name in self.names.candidates(spec.run_id, spec.attempt):
            try:
                actor = self.ray.get_actor(name, namespace=NAMESPACE)
                kept = await asyncio.wait_for(actor.resume.remote(), BOARD_WAIT + self.settings.poll * 10)
                self.names.took_back(name, spec.run_id, spec.attempt)
                break
            except Exception:  # noqa: BLE001 - no such actor, or one that no longer answers: nothing to take back
                continue
        if kept is None:
            return None
        attempt = RayAttempt(self.stops.stop, self._release, spec, kept["lease"], actor, stop_slack(self.settings))
        agent = Agent(spec, attempt, capabilities=capabilities(spec.role), follower=self._follow(attempt))
        self.leases.add(attempt.lease)
        if attempt.follow is not None:
            for data in kept["events"]:  # the session's figures, from its first event
                attempt.follow.apply_line(parse(data).line)  # type: ignore[union-attr]
        attempt.floor, attempt.backlog = kept["last"], [tuple(item) for item in kept["said"]]
        if not kept["first"]:  # the last head may have died before it told the wrapper to start: started once
            attempt.actor.start.remote()
        try:
            first = parse(kept["first"]) if kept["first"] else await self._started(attempt)
        except SpawnError:
            self._revoke(attempt)
            return None
        if not isinstance(first, Started):
            self._revoke(attempt)
            self._cancel(attempt)
            return None
        self._begin(attempt, first.model_copy(update={"orphans": []}))  # those were told by the last head
        return agent

    async def halt_others(self, kept: set[tuple[int, int]]) -> list[str]:
        """Halt every actor of this project but the attempts in ``kept`` (run id, attempt): those of runs
        recovery did not take back, or whose attempt had moved on. Return their names."""
        try:
            named = self.ray.util.list_named_actors(all_namespaces=True)
        except Exception:  # noqa: BLE001 - the cluster's directory did not answer: the wrappers fence themselves
            return []
        names = [
            entry["name"]
            for entry in named
            if entry.get("namespace") == NAMESPACE
            and (found := self.names.parse(entry["name"])) is not None
            and found not in kept
        ]
        await asyncio.gather(*(self._halt(name) for name in names))
        try:
            self.names.settle()
        except OSError as exc:  # the next start looks for them again: harmless
            self.say(f"recovery: cannot note in {self.names.path} which names of before the key are over: {exc}")
        return names

    async def _halt(self, name: str) -> None:
        """Stop the agent of the named actor at once, wait (bounded) for its wrapper to say so, then kill it."""
        try:
            actor = self.ray.get_actor(name, namespace=NAMESPACE)
        except Exception:  # noqa: BLE001 - gone meanwhile
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(actor.halt.remote(HALT_WAIT), HALT_WAIT + BOARD_WAIT)
        with contextlib.suppress(Exception):
            self.ray.kill(actor, no_restart=True)
