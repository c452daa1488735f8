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
from typing import Any, Literal

from pydantic import Field

from orchestrator.agents.backends import capabilities
from orchestrator.agents.spec import LaunchSpec
from orchestrator.asks import records
from orchestrator.asks.hook import ANSWER_ENV, APPROVE_ENV
from orchestrator.asks.records import Ask
from orchestrator.asks.rules import describe, question_of
from orchestrator.asks.settings import hooked, settings_text
from orchestrator.config import RoleRun
from orchestrator.control.authority import Caller
from orchestrator.control.protocol import FeatureRequest
from orchestrator.core.agent import AttemptVerdict
from orchestrator.core.clock import Timer
from orchestrator.core.errors import UnknownMemoError, UsageError
from orchestrator.core.events import RunFinished
from orchestrator.core.states import RunState
from orchestrator.core.team_events import TeamEvent
from orchestrator.intake import memo_index
from orchestrator.intake.memo import INBOX, WAITING, free_name
from orchestrator.prompts import load_template
from orchestrator.supervisor.decisions import DEFAULT, EndDecision, Park
from orchestrator.supervisor.extension import Extension, Handler, Host
from orchestrator.supervisor.feature_requests import Command, Needs
from orchestrator.supervisor.outcomes import duration_text

QUESTION_MAX = 4000
ANSWER_MAX = 64 * 1024
THEN = "`orchestrator answer` runs it again"
ENDED_NOTE = "End your run now, without doing more: you will be run again with the answer in your prompt."


class AskRequest(FeatureRequest):
    """``ask``: the agent of run ``run_id`` asks a person ``question`` (an agent that is not the Claude CLI)."""

    op: Literal["ask"] = "ask"
    run_id: int
    question: str = Field(min_length=1, max_length=QUESTION_MAX)


class AnswerRequest(FeatureRequest):
    """``answer``: a person answers the question ``memo`` waits on (``text``), or allows or denies its call."""

    op: Literal["answer"] = "answer"
    memo: str = Field(min_length=1)
    text: str | None = Field(None, max_length=ANSWER_MAX)
    allow: bool = False
    deny: bool = False
    note: str | None = Field(None, max_length=ANSWER_MAX)


@dataclass(frozen=True)
class AskDue:
    """The feature's timer: an unanswered question may have passed its ``ask_timeout``."""


@dataclass(frozen=True)
class Pending:
    """What a run's end will park: decided by ``decide_end``, recorded once its memos are in ``waiting/``."""

    kind: str
    question: str
    tool: dict[str, Any] | None
    session_id: str | None


def answers_text(ask: Ask) -> str:
    """``$answers``: the question the agent asked and the person's answer."""
    answer = ask.answer or {}
    said = answer.get("text") or ""
    if answer.get("decision") == "deny":
        said = f"(no answer: {answer.get('note') or 'a person declined to answer'})"
    return f"# Answers\n\nYou asked a person: {ask.question}\nThe answer ({ask.answered_by}): {said}\n"


def answer_how(kind: str, memo: str) -> str:
    """The command that answers a question (or an approval) of ``memo``."""
    if kind == "approval":
        return f"orchestrator answer {memo} --allow (or --deny --note TEXT)"
    return f'orchestrator answer {memo} "YOUR ANSWER"'


def question_text(run: RoleRun, pending: Pending, memo: str, when: datetime) -> str:
    """``<stem>.question``: the question (or the call), who asked and when, and how to answer."""
    asked = when.isoformat(timespec="seconds")
    return (
        f"{pending.kind}: {pending.question}\nrole: {run.role.name}\nrun: {run.run_id}\nasked: {asked}\n"
        f"answer: {answer_how(pending.kind, memo)}\n"
    )


def question_path(memo: Path) -> Path:
    """``waiting/<stem>.question`` beside ``waiting/<stem>.md``."""
    return memo.with_name(memo.name.removesuffix(".md") + ".question")


class Asks(Extension):
    """Questions and approvals: runs parked in ``waiting/``, answered, resumed; the one owner of the ``asks`` table."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.db = host.store.db
        records.ensure(self.db)
        self.folder = host.config.state_dir / "asks"
        self.asked: dict[int, str] = {}  # run -> the question its agent asked with the `ask` request
        self.parking: dict[int, Pending] = {}  # run -> what its end parks (decided, not yet recorded)
        self.resuming: dict[int, Ask] = {}  # run -> the answered ask it carries on
        self.notes_due: dict[int, list[str]] = {}
        self.timer: Timer | None = None
        self.waiting: list[Ask] | None = None  # the waiting asks, read again after each change
        self.uses_answers: dict[str, bool] = {}

    # ------------------------------------------------------------ wiring
    def handlers(self) -> Mapping[type, Handler]:
        return {AskDue: self.due}

    def requests(self) -> Sequence[Command[Any]]:
        return [
            Command(AskRequest, self.ask, Needs("ask", own=_own_run)),
            Command(AnswerRequest, self.answer, Needs("answer")),
        ]

    def start(self) -> None:
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
        self.asked[run.run_id] = " ".join(request.question.split())
        return {"run_id": run.run_id, "memo": run.label, "recorded": True, "note": ENDED_NOTE}

    def decide_end(self, run: RoleRun, verdict: AttemptVerdict) -> EndDecision:
        call = verdict.deferred
        if call is not None:
            command = call.input.get("command")
            asked = question_of(command) if call.name == "Bash" and isinstance(command, str) else None
            kind = "question" if asked is not None else "approval"
            question = (asked or "(no question given)") if kind == "question" else describe(call.name, call.input)
            tool = {"id": call.id, "name": call.name, "input": call.input}
            pending = Pending(kind, question, tool, verdict.session_id)
        elif run.run_id in self.asked:  # an agent that can go on in its session (sdk) is resumed with the answer
            session = verdict.session_id if capabilities(run.role).resume else None
            pending = Pending("question", self.asked.pop(run.run_id), None, session)
        else:
            return DEFAULT
        self.parking[run.run_id] = pending
        what = "asks a person" if pending.kind == "question" else "needs an approval of"
        return Park(f"{what}: {pending.question}", folder=WAITING, uses_attempt=False, then=THEN)

    def before_finish(self, run: RoleRun, state: RunState, reason: str | None) -> None:
        """A run about to be parked: its question written where its memo is about to appear (a person who sees the
        memo in ``waiting/`` sees why). A waiting memo cancelled or failed (not by its answer): its question is over."""
        pending = self.parking.get(run.run_id)
        if pending is not None and state is RunState.RETURNED and run.memos:
            target = self.host.config.role_dir(run.role.name) / WAITING / run.memos[0].name
            if not target.exists():  # else the move gives it another name: ``_record`` writes that one's
                with contextlib.suppress(OSError):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    question_path(target).write_text(
                        question_text(run, pending, target.name, self.host.clock.now()), encoding="utf-8"
                    )
        gone = {memo.name for memo in run.memos if memo.path.parent.name == WAITING}
        for ask in self._waiting():
            if ask.role == run.role.name and ask.memo in gone:
                self._forget(ask)

    def on_finished(self, event: RunFinished) -> None:
        run: RoleRun = event.run
        self.asked.pop(run.run_id, None)
        self.notes_due.pop(run.run_id, None)
        pending = self.parking.pop(run.run_id, None)
        carried = self.resuming.pop(run.run_id, None)
        if carried is not None and (event.state is not RunState.RETURNED or pending is not None):
            self._forget(carried)  # its answer was taken (a memo back in the inbox still carries it, as answered)
        if pending is not None and event.state is RunState.RETURNED and event.moved:
            self._record(run, pending, list(event.moved))

    def _record(self, run: RoleRun, pending: Pending, moved: list[Path]) -> None:
        first = moved[0]
        now = self.host.clock.now()
        ask = Ask(
            0,
            run.role.name,
            first.name,
            [path.name for path in moved],
            run.memos[0].memo_id if run.memos else None,
            run.memos[0].subject if run.memos else None,
            run.run_id,
            pending.kind,
            pending.question,
            pending.tool,
            pending.session_id,
            now.isoformat(timespec="seconds"),
            now.timestamp() + run.role.ask_timeout,
            "waiting",
            None,
            None,
            None,
        )
        records.add(self.db, ask)
        self.waiting = None
        how = answer_how(pending.kind, first.name)
        if not question_path(first).exists():
            with contextlib.suppress(OSError):
                question_path(first).write_text(question_text(run, pending, first.name, now), encoding="utf-8")
        subject = run.memos[0].subject if run.memos else None
        self.host.tell(TeamEvent("needs_input", run.role.name, first.name, subject, pending.question))
        self.host.console.line(f"{first.name} needs input: {pending.question}; {how}", role=run.role.name)
        self._arm()

    # ------------------------------------------------------------ answering
    def answer(self, request: AnswerRequest) -> dict[str, Any]:
        ask = self._find(request.memo)
        if request.allow and request.deny:
            raise UsageError("orchestrator answer: --allow or --deny, not both")
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
        name = os.path.basename(query)
        found = [
            ask
            for ask in self._waiting()
            if query in (ask.memo, ask.memo.removesuffix(".md"), ask.memo_id) or name == ask.memo
        ]
        if not found:
            waiting = ", ".join(ask.memo for ask in self._waiting()) or "none"
            raise UnknownMemoError(f"orchestrator answer: no memo waiting for an answer matches {query!r} ({waiting})")
        return found[0]

    def _answer(self, ask: Ask, decision: str, text: str, note: str | None, who: str) -> dict[str, Any]:
        tool_id = (ask.tool or {}).get("id") or ""
        answer = {"decision": decision, "text": text, "note": note, "tool_use_id": tool_id}
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{ask.ask_id}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(answer, out)
        role_dir = self.host.config.role_dir(ask.role)
        inbox = role_dir / INBOX
        back: list[Path] = []
        for name in ask.memos:
            src = role_dir / WAITING / name
            target = free_name(inbox, name)
            try:
                os.rename(src, target)
            except FileNotFoundError:
                continue
            memo_index.moved(self.db, src, target, self.host.clock.now().timestamp())
            with contextlib.suppress(FileNotFoundError):
                question_path(src).unlink()
            back.append(target)
        if not back:
            self._forget(ask)
            raise UnknownMemoError(f"orchestrator answer: {ask.memo} is no longer in memo/{ask.role}/{WAITING}/")
        when = self.host.clock.now().isoformat(timespec="seconds")
        records.answered(self.db, ask.ask_id, back[0].name, answer, who, when)
        self.waiting = None
        self.host.put_back(ask.role, back)
        said = "denied" if decision == "deny" else "allowed" if ask.kind == "approval" else "answered"
        self.host.console.line(f"{ask.memo} {said} by {who}; queued to run again", role=ask.role)
        return {**ask.to_json(), "state": "answered", "decision": decision, "queued": str(back[0]), "who": who}

    def _forget(self, ask: Ask) -> None:
        records.forget(self.db, ask.ask_id)
        self.waiting = None
        with contextlib.suppress(OSError):
            (self.folder / f"{ask.ask_id}.json").unlink()
        with contextlib.suppress(OSError):
            question_path(self.host.config.role_dir(ask.role) / WAITING / ask.memo).unlink()

    # ------------------------------------------------------------ the run that takes the answer
    def _carried(self, run: RoleRun) -> Ask | None:
        """The answered ask ``run`` carries on: its first memo is the one that waited."""
        if run.run_id in self.resuming:
            return self.resuming[run.run_id]
        if not run.memos:
            return None
        first = run.memos[0]
        for ask in records.every(self.db, "answered"):
            if ask.role == run.role.name and (ask.memo == first.name or (ask.memo_id and ask.memo_id == first.memo_id)):
                self.resuming[run.run_id] = ask
                return ask
        return None

    def sections(self, run: RoleRun) -> dict[str, str]:
        ask = self._carried(run)
        if ask is None or ask.session_id:  # a resumed session is given the answer itself (``prepare``)
            return {"answers": ""}
        text = answers_text(ask)
        if self._uses_answers(run):
            return {"answers": text}
        self.notes_due[run.run_id] = [text]
        return {"answers": ""}

    def notes(self, run: RoleRun) -> list[str]:
        return self.notes_due.pop(run.run_id, [])

    def _uses_answers(self, run: RoleRun) -> bool:
        name = run.role.name
        if name not in self.uses_answers:
            template = load_template(self.host.config.root / run.role.prompt)
            self.uses_answers[name] = "answers" in template.template.get_identifiers()
        return self.uses_answers[name]

    async def prepare(self, run: RoleRun, spec: LaunchSpec) -> LaunchSpec:
        role = run.role
        ask = self.resuming.get(run.run_id)
        if spec.adopted:
            return spec
        if not hooked(role):
            if ask is None or not ask.session_id:
                return spec
            return dataclasses.replace(spec, resume=ask.session_id, prompt=answers_text(ask))  # its session goes on
        env = {**spec.env, APPROVE_ENV: json.dumps(role.approve)}
        args = (*spec.args, "--settings", settings_text(role, spec.cwd))
        prompt = spec.prompt
        if ask is not None and ask.session_id:
            env[ANSWER_ENV] = str(self.folder / f"{ask.ask_id}.json")
            args = (*args, "--resume", ask.session_id)
            prompt = ""  # no new prompt: the session goes on from the deferred call, which the hook now answers
        return dataclasses.replace(spec, env=env, args=args, prompt=prompt)

    # ------------------------------------------------------------ ask_timeout
    def _arm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        waiting = self._waiting()
        if not waiting:
            return
        delay = max(0.0, min(ask.due for ask in waiting) - self.host.clock.now().timestamp())
        self.timer = self.host.clock.call_later(delay + 0.5, self.host.post, AskDue())

    def due(self, _event: AskDue) -> None:
        """End every question past its ``ask_timeout``: failed, or an approval denied (``on_timeout: deny``)."""
        self.timer = None
        now = self.host.clock.now().timestamp()
        for ask in list(self._waiting()):
            role = self.host.config.roles.get(ask.role)
            if ask.due > now or role is None:
                continue
            waited = duration_text(role.ask_timeout)
            if ask.kind == "approval" and role.on_timeout == "deny":
                self._answer(ask, "deny", "", f"no answer within {waited}: denied", "orchestrator (ask_timeout)")
                continue
            self._forget(ask)
            for name in ask.memos:
                path = self.host.config.role_dir(ask.role) / WAITING / name
                if path.exists():
                    self.host.fail_memo(ask.role, path, f"no answer within {waited}")
        self._arm()


def _own_run(request: AskRequest, caller: Caller) -> bool:
    """An agent asks about its own run only."""
    return caller.run_id == request.run_id
