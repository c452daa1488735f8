"""The asks feature: a run that asks a person (``orchestrator ask``) or makes a call an ``approve:`` rule names
waits in ``waiting/`` without a slot, and ``orchestrator answer`` runs it again.

A Claude CLI role (stream-json) is given a ``PreToolUse`` hook (``asks/settings.py``, ``asks/hook.py``) that defers
such a call: the CLI ends at once and its verdict carries the deferred call; ``decide_end`` parks the run in
``waiting/`` (the attempt given back), with ``<stem>.question`` beside its memo. The answer puts the memo back at the
front of its role's queue; its next start (``prepare``) resumes the same session with no new prompt and the answer in
a file the hook and the allowed ``orchestrator ask`` read. Any other agent's ``orchestrator ask`` records the
question here (the ``ask`` request) and tells it to end its run; its end is parked the same way, and the answer
resumes its session with the answer as the next message when its backend can resume (sdk), else runs the memo
again with ``$answers`` in its prompt (at its top when the template has no ``$answers``).
``ask_timeout`` ends an unanswered one in ``failed/`` (or denies an approval, ``on_timeout: deny``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.agents.backends import capabilities
from orchestrator.agents.spec import LaunchSpec
from orchestrator.asks import moving, records, restart
from orchestrator.asks.carrying import Carrying
from orchestrator.asks.records import Ask
from orchestrator.asks.requests import QUESTION_MAX, AnswerRequest, AskRequest, find, own_run
from orchestrator.asks.rules import describe, question_of
from orchestrator.asks.texts import Pending, answer_how, new_ask, question_path, question_text
from orchestrator.config import RoleRun
from orchestrator.control.lookup import finished_message
from orchestrator.core.agent import AttemptVerdict
from orchestrator.core.clock import Timer
from orchestrator.core.errors import MemoFinishedError, UnknownMemoError, UsageError
from orchestrator.core.events import RunFinished
from orchestrator.core.states import RunState
from orchestrator.core.team_events import TeamEvent
from orchestrator.intake.memo import ACTIVE, INBOX, WAITING, free_name, write_atomically
from orchestrator.supervisor.decisions import DEFAULT, EndDecision, Park
from orchestrator.supervisor.extension import Extension, Handler, Host
from orchestrator.supervisor.feature_requests import Command, Needs
from orchestrator.supervisor.outcomes import duration_text

THEN = "`orchestrator answer` runs it again"
ENDED = {state.value for state in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.TIMED_OUT)}
ENDED_NOTE = "End your run now, without doing more: you will be run again with the answer in your prompt."
JOIN = " Also: "  # between two questions of one run, asked together


@dataclass(frozen=True)
class AskDue:
    """The feature's timer: an unanswered question may have passed its ``ask_timeout``."""


class Asks(Extension):
    """Questions and approvals: runs parked in ``waiting/``, answered, resumed; the one owner of the ``asks`` table.

    Each step is on record before the files move, so a restart of ``up`` at any point finds it: what an agent
    asked (before its run ends), the question (committed with the run's end, before its memo is in ``waiting/``)
    and the answer (before the memo goes back to its inbox; ``start`` finishes a move a restart cut short)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.db = host.store.db
        records.ensure(self.db)
        self.folder = host.config.state_dir / "asks"
        # run -> the question its agent asked with the `ask` request, and when (or its end parked: a restart may end
        # it again)
        self.asked = {
            ask.run_id: (ask.question, ask.asked_at)
            for ask in records.every(self.db)
            if ask.state in ("asked", "waiting")
        }
        self.parking: dict[int, Pending] = {}  # run -> what its end parks (decided, not yet recorded)
        self.recorded: dict[int, tuple[int, list[str]]] = {}  # run -> its ask on record, and the names it expects
        self.leaving: dict[int, list[Ask]] = {}  # run -> the waiting asks whose memos it ends (a cancel, a timeout)
        self.ending: dict[int, list[tuple[str, str]]] = {}  # run -> its memos' names and folders before its end
        self.timing_out: set[int] = set()  # asks whose memos their ask_timeout is failing
        self.carrying = Carrying(host, self.folder)
        self.timer: Timer | None = None
        self.waiting: list[Ask] | None = None  # the waiting asks, read again after each change

    # ------------------------------------------------------------ wiring
    def handlers(self) -> Mapping[type, Handler]:
        return {AskDue: self.due}

    def requests(self) -> Sequence[Command[Any]]:
        return [
            Command(AskRequest, self.ask, Needs("ask", own=own_run)),
            Command(AnswerRequest, self.answer, Needs("answer")),
        ]

    def start(self) -> None:
        """Finish the answers a restart cut short (on record, their memos still in ``waiting/``), tell again of
        every question still waiting (no channel remembers it across a restart), then arm."""
        for ask in records.every(self.db, "answered"):
            if ask.role in self.host.config.roles and moving.left_waiting(self.host.config, ask, self._waiting()):
                back = self._back(ask)
                if back:
                    self.host.put_back(ask.role, back)
                    self.host.console.line(f"{ask.memo} was answered before the restart; queued to run again")
        restart.heal(self.db, self.host.config, self.host.runs().keys(), self.host.clock.now(), self.host.console.line)
        self.waiting = None
        now = self.host.clock.now().timestamp()
        for ask in self._waiting():
            if ask.role in self.host.config.roles:
                if ask.due > now:  # one past its ask_timeout is ended at once (``due``): no page for it first
                    self.host.tell(TeamEvent("needs_input", ask.role, ask.memo, ask.subject, ask.question))
            else:
                self.host.console.line(
                    f"{ask.memo} waits in memo/{ask.role}/{WAITING}/, but role {ask.role} is no longer in roles.yaml"
                )
        self._arm()

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def snapshot(self, full: bool) -> dict[str, Any]:
        return {"needs_input": [ask.to_json() for ask in self._waiting()]}

    def _waiting(self) -> list[Ask]:
        if self.waiting is None:
            self.waiting = records.every(self.db, "waiting")
        return self.waiting

    # ------------------------------------------------------------ asking
    def ask(self, request: AskRequest) -> dict[str, Any]:
        run = self.host.runs().get(request.run_id)
        if run is None or not run.state.live:
            raise UsageError(f"orchestrator ask: run {request.run_id} is not running; ask from inside a run")
        question = " ".join(request.question.split())
        earlier, at = self.asked.get(run.run_id) or (None, self.host.clock.now().isoformat(timespec="seconds"))
        if earlier is not None and question in earlier.split(JOIN):  # asked already: a person reads it once
            question = earlier
        elif earlier is not None:  # a second question of the same run: asked together, none lost
            question = f"{earlier}{JOIN}{question}"
            if len(question) > QUESTION_MAX:
                raise UsageError(
                    f"orchestrator ask: this run's questions together pass {QUESTION_MAX} characters; they stay as "
                    "they were: end your run, or ask once what matters most"
                )
        self.asked[run.run_id] = (question, at)  # asked when first asked
        records.add(
            self.db, new_ask(run, "asked", Pending("question", question, None, None, at), [], self.host.clock.now())
        )
        return {"run_id": run.run_id, "memo": run.label, "recorded": True, "note": ENDED_NOTE}

    def decide_end(self, run: RoleRun, verdict: AttemptVerdict) -> EndDecision:
        call = verdict.deferred
        if call is not None:
            command = call.input.get("command")
            asked = question_of(command) if call.name == "Bash" and isinstance(command, str) else None
            kind = "question" if asked is not None else "approval"
            question = (asked or "(no question given)") if kind == "question" else describe(call.name, call.input)
            tool = {"id": call.id, "name": call.name, "input": call.input}
            ended = verdict.ended_at  # a kept end, read after a restart: asked when its agent ended, not now
            zone = self.host.clock.now().tzinfo
            at = datetime.fromtimestamp(ended, zone).isoformat(timespec="seconds") if ended is not None else None
            pending = Pending(kind, question, tool, verdict.session_id, at)
        elif run.run_id in self.asked:  # an agent that can go on in its session (sdk) is resumed with the answer
            session = verdict.session_id if capabilities(run.role).resume else None
            question, at = self.asked.pop(run.run_id)
            pending = Pending("question", question, None, session, at)
        else:
            return DEFAULT
        self.parking[run.run_id] = pending
        what = "asks a person" if pending.kind == "question" else "needs an approval of"
        return Park(f"{what}: {pending.question}", folder=WAITING, uses_attempt=False, then=THEN)

    def before_finish(self, run: RoleRun, state: RunState, reason: str | None) -> None:
        """A run about to be parked: its question on record (committed before its memos move) and written where its
        memo is about to appear. Nothing is forgotten here: another hook may make the end wait (a workspace's
        commit), and what is written now is committed before the end is; what the end makes over is forgotten in
        the end's own transaction (``on_transition``, once its memos have moved)."""
        role = run.role.name
        waiting = self.host.config.role_dir(role) / WAITING
        pending = self.parking.get(run.run_id)
        if pending is not None and state is RunState.RETURNED and run.memos:
            self._park(run, pending, waiting)
        gone = {memo.name for memo in run.memos if memo.path.parent.name == WAITING}
        self.leaving[run.run_id] = [ask for ask in self._waiting() if ask.role == role and gone & set(ask.memos)]
        self.ending[run.run_id] = [(memo.name, memo.path.parent.name) for memo in run.memos]  # before the move

    def _park(self, run: RoleRun, pending: Pending, waiting: Path) -> None:
        """The run's question on record, in place of what it asked, with the names its memos are about to take in
        ``waiting/`` (or, parked already before a restart cut its end short, the names they have there)."""
        already = [ask for ask in self._waiting() if ask.run_id == run.run_id and moving.any_in(waiting, ask.memos)]
        if already:
            self.recorded[run.run_id] = (already[0].ask_id, already[0].memos)
            return
        names = [free_name(waiting, memo.name).name for memo in run.memos]  # where the move puts them
        now = self.host.clock.now()
        self.recorded[run.run_id] = (records.add(self.db, new_ask(run, "waiting", pending, names, now)), names)
        self.waiting = None
        with contextlib.suppress(OSError):
            waiting.mkdir(parents=True, exist_ok=True)
            named = self._named(run.role.name, waiting / names[0])
            write_atomically(question_path(waiting / names[0]), question_text(run, pending, named, now), sync=False)

    def _named(self, role: str, memo: Path) -> str:
        """How ``answer`` is told which memo: its name, or its path when another role's question has that name."""
        others = [other for other in self.host.config.roles if other != role]
        namesake = any((self.host.config.role_dir(other) / WAITING / memo.name).exists() for other in others)
        return str(memo) if namesake else memo.name

    def on_transition(self, run: RoleRun, old: RunState, new: RunState) -> None:
        """The run's end is being recorded, its memos moved: what it makes over is forgotten (and an answer follows
        its memo's new name) in the same transaction, so no restart can find one without the other."""
        if new.live or run.run_id not in self.ending:
            return
        before = self.ending.pop(run.run_id)
        pending, recorded = self.parking.get(run.run_id), self.recorded.get(run.run_id)
        waiting = self.host.config.role_dir(run.role.name) / WAITING
        if recorded is None:  # not parked: what its agent asked is over
            records.drop_asked(self.db, run.run_id)
        for ask in self.leaving.pop(run.run_id, []):
            if not moving.any_in(waiting, ask.memos):  # its memos left waiting/: its question is over
                self.timing_out.discard(ask.ask_id)
                self._forget(ask)
        self._answers_after(run, new is RunState.RETURNED and pending is None, before)
        if recorded is not None:
            ask_id, names = recorded
            moved = _parked(run, waiting, names)
            if new is RunState.RETURNED and moved:
                if [path.name for path in moved] != names:  # a name there was taken meanwhile: the move chose another
                    records.named(self.db, ask_id, [path.name for path in moved])
            else:  # its memos did not reach waiting/: nothing waits
                records.forget(self.db, ask_id)
                self.recorded.pop(run.run_id)
                with contextlib.suppress(OSError):
                    question_path(waiting / names[0]).unlink()
            self.waiting = None

    def on_finished(self, event: RunFinished) -> None:
        run: RoleRun = event.run
        self.asked.pop(run.run_id, None)
        self.carrying.over(run.run_id)
        pending = self.parking.pop(run.run_id, None)
        recorded = self.recorded.pop(run.run_id, None)
        if recorded is not None and pending is not None:
            waiting = self.host.config.role_dir(run.role.name) / WAITING
            self._announce(run, pending, _parked(run, waiting, recorded[1]))

    def _answers_after(self, run: RoleRun, returned: bool, before: list[tuple[str, str]]) -> None:
        """The answers a run carried (or its memos') after its end: over, unless it was returned to its inbox, where
        they go on with its memos, under the names the move gave them (``before``: the names and folders it had)."""
        after = {name: memo.path.name for (name, _), memo in zip(before, run.memos, strict=False)}
        names = {name for name, folder in before if folder != WAITING}  # a waiting memo's name is not an answer's
        for ask in records.every(self.db, "answered"):
            if ask.role != run.role.name:
                continue
            if returned:
                if ask.taken_by == run.run_id and after.get(ask.memo, ask.memo) != ask.memo:
                    records.moved_to(self.db, ask.ask_id, after[ask.memo])
            elif ask.taken_by == run.run_id or (ask.memo in names and not self.carrying.held_elsewhere(ask, run)):
                self._forget(ask)

    def _announce(self, run: RoleRun, pending: Pending, moved: list[Path]) -> None:
        """The run's memos are in ``waiting/``: its question is told, and its timeout armed."""
        if not moved:
            return
        first = moved[0]
        named = self._named(run.role.name, first)
        how = answer_how(pending.kind, named)
        if not question_path(first).exists():
            with contextlib.suppress(OSError):
                now = self.host.clock.now()
                write_atomically(question_path(first), question_text(run, pending, named, now), sync=False)
        subject = run.memos[0].subject if run.memos else None
        self.host.tell(TeamEvent("needs_input", run.role.name, first.name, subject, pending.question))
        self.host.console.line(f"{first.name} needs input: {pending.question}; {how}", role=run.role.name)
        self._arm()

    # ------------------------------------------------------------ answering
    def answer(self, request: AnswerRequest) -> dict[str, Any]:
        ask = self._find(request.memo)
        if request.allow and request.deny:
            raise UsageError("orchestrator answer: --allow or --deny, not both")
        if ask.role not in self.host.config.roles:
            raise UsageError(
                f"orchestrator answer: {ask.memo} waits in memo/{ask.role}/{WAITING}/, but role {ask.role} is no "
                "longer in roles.yaml: add it back to run the memo again"
            )
        if ask.kind == "approval" and not (request.allow or request.deny):
            raise UsageError(
                f"orchestrator answer: {ask.memo} waits for an approval of {ask.question}: "
                "answer --allow, or --deny [--note TEXT]"
            )
        if ask.kind == "question" and not request.deny and not (request.text or "").strip():
            raise UsageError(f'orchestrator answer: {ask.memo} asks "{ask.question}": give the answer as TEXT')
        decision = "deny" if request.deny else "allow"
        return self._answer(ask, decision, request.text or "", request.note, request.who)

    def _find(self, query: str) -> Ask:
        ending = self.timing_out | {ask.ask_id for asks in self.leaving.values() for ask in asks}
        parking = {ask_id for ask_id, _ in self.recorded.values()}  # on record, its memo not in waiting/ yet
        try:
            return find(self._waiting(), query, ending, parking, lambda: records.every(self.db, "answered"))
        except UnknownMemoError:
            # a memo that was waiting and has ended since (cancelled, failed at its ask_timeout): say how, as cancel does
            row = self.host.store.last_run_of_memo(os.path.basename(query))
            if row is None or row["state"] not in ENDED:
                raise
            raise MemoFinishedError(f"orchestrator answer: {finished_message(self.host.store, query)}") from None

    def _answer(self, ask: Ask, decision: str, text: str, note: str | None, who: str) -> dict[str, Any]:
        """The answer on record (and in its file) before the memos go back to their inbox: a restart between the two
        finishes the move (``start``), so the answer is never lost and never asked again."""
        tool = ask.tool or {}
        answer = {"decision": decision, "text": text, "note": note, "tool_use_id": tool.get("id") or ""}
        answer.update(tool_name=tool.get("name"), tool_input=tool.get("input"))  # the same call in a fresh session
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{ask.ask_id}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(answer, out)
        role_dir = self.host.config.role_dir(ask.role)
        # the name the answered memo runs under, matched at its start: free in its inbox and in active/ (its claim
        # would rename it on a clash there, and another memo of that name could then take its answer)
        target = free_name(role_dir / INBOX, ask.memos[0], also=[role_dir / ACTIVE]).name
        when = self.host.clock.now().isoformat(timespec="seconds")
        records.answered(self.db, ask.ask_id, target, answer, who, when)
        self.host.store.checkpoint()
        self.waiting = None
        back = self._back(dataclasses.replace(ask, memo=target))
        if not back:
            self._forget(ask)
            raise UnknownMemoError(f"orchestrator answer: {ask.memo} is no longer in memo/{ask.role}/{WAITING}/")
        self.host.put_back(ask.role, back)
        said = "denied" if decision == "deny" else "allowed" if ask.kind == "approval" else "answered"
        self.host.console.line(f"{ask.memo} {said} by {who}; queued to run again", role=ask.role)
        return {**ask.to_json(), "state": "answered", "decision": decision, "queued": str(back[0]), "who": who}

    def _back(self, ask: Ask) -> list[Path]:
        return moving.send_back(self.db, self.host.config, ask, self.host.clock.now().timestamp())

    def _forget(self, ask: Ask) -> None:
        records.forget(self.db, ask.ask_id)
        self.waiting = None
        with contextlib.suppress(OSError):
            (self.folder / f"{ask.ask_id}.json").unlink()
        if ask.state == "waiting":  # an answered one's name is its inbox's: a question there is another memo's
            with contextlib.suppress(OSError):
                question_path(self.host.config.role_dir(ask.role) / WAITING / ask.memo).unlink()

    # ------------------------------------------------------------ the run that takes the answer (``Carrying``)
    def sections(self, run: RoleRun) -> dict[str, str]:
        return self.carrying.sections(run)

    def notes(self, run: RoleRun) -> list[str]:
        return self.carrying.notes(run)

    async def prepare(self, run: RoleRun, spec: LaunchSpec) -> LaunchSpec:
        return await self.carrying.prepare(run, spec)

    # ------------------------------------------------------------ ask_timeout
    def _arm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        waiting = [  # no rule times out a gone role's; one being ended is no longer due
            ask for ask in self._waiting() if ask.role in self.host.config.roles and ask.ask_id not in self.timing_out
        ]
        if not waiting:
            return
        delay = max(0.0, min(ask.due for ask in waiting) - self.host.clock.now().timestamp())
        self.timer = self.host.clock.call_later(delay + 0.5, self.host.post, AskDue())

    def due(self, _event: AskDue) -> None:
        """End every question past its ``ask_timeout``: failed, or an approval denied (``on_timeout: deny``); one
        that cannot be ended is forgotten with a line, and the others are still ended and armed."""
        self.timer = None
        now = self.host.clock.now().timestamp()
        try:
            for ask in list(self._waiting()):
                role = self.host.config.roles.get(ask.role)
                if ask.due > now or role is None or ask.ask_id in self.timing_out:
                    continue
                try:
                    self._time_out(ask, duration_text(role.ask_timeout), role.on_timeout)
                except (UnknownMemoError, OSError) as exc:
                    self._forget(ask)
                    self.host.console.line(f"{ask.memo}: its ask_timeout could not end it ({exc}); forgotten")
        finally:
            self._arm()

    def _time_out(self, ask: Ask, waited: str, on_timeout: str) -> None:
        if ask.kind == "approval" and on_timeout == "deny":
            self._answer(ask, "deny", "", f"no answer within {waited}: denied", "orchestrator (ask_timeout)")
            return
        folder = self.host.config.role_dir(ask.role) / WAITING
        if not moving.any_in(folder, ask.memos):
            self._forget(ask)
            return
        self.timing_out.add(ask.ask_id)  # forgotten once its memos have left waiting/ (``on_finished``)
        for name in ask.memos:
            if (folder / name).exists():
                self.host.fail_memo(ask.role, folder / name, f"no answer within {waited}")


def _parked(run: RoleRun, waiting: Path, names: list[str]) -> list[Path]:
    """Where the run's memos are in ``waiting/``: where its end moved them, or (parked before a restart cut its end
    short) where they were already."""
    return [memo.path for memo in run.memos if memo.path.parent == waiting] or [
        waiting / name for name in names if (waiting / name).exists()
    ]
