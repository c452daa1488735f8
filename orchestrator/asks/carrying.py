"""The run that takes an answer: the answered asks it carries (one per memo of it, taken by it alone), what its
prompt says of them (``$answers``, or the prompt's top), and how it starts (its session resumed with the answer, or
a fresh session whose hook is given the answers to the very calls they allowed or denied)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from orchestrator.agents.spec import LaunchSpec
from orchestrator.asks import records
from orchestrator.asks.hook import ANSWER_ENV, APPROVE_ENV, BY_INPUT_ENV
from orchestrator.asks.records import Ask
from orchestrator.asks.settings import hooked, settings_text
from orchestrator.asks.texts import answers_text
from orchestrator.config import RoleRun
from orchestrator.prompts import load_template
from orchestrator.supervisor.extension import Host


class Carrying:
    """The answered runs of the asks feature (``Asks`` hands it its ``sections``, ``notes`` and ``prepare``)."""

    def __init__(self, host: Host, folder: Path) -> None:
        self.host = host
        self.db = host.store.db
        self.folder = folder  # the answers' files
        self.resuming: dict[int, list[Ask]] = {}  # run -> the answered asks it carries on (one per memo of it)
        self.notes_due: dict[int, list[str]] = {}
        self.uses_answers: dict[str, bool] = {}

    def over(self, run_id: int) -> None:
        """The run has ended: what it carried is the records' to settle."""
        self.resuming.pop(run_id, None)
        self.notes_due.pop(run_id, None)

    def carried(self, run: RoleRun) -> list[Ask]:
        """The answered asks ``run`` carries on: those of its memos (by the name each went back to its inbox under, in
        the same role: a memo id may repeat) that no other live run carries."""
        if run.run_id not in self.resuming:
            names = {memo.name for memo in run.memos}
            taken = []
            for ask in records.every(self.db, "answered"):
                if ask.role == run.role.name and ask.memo in names and not self.held_elsewhere(ask, run):
                    records.take(self.db, ask.ask_id, run.run_id)
                    taken.append(ask)
            self.resuming[run.run_id] = taken
        return self.resuming[run.run_id]

    def held_elsewhere(self, ask: Ask, run: RoleRun) -> bool:
        """Another run, still live, took this answer."""
        return ask.taken_by is not None and ask.taken_by != run.run_id and ask.taken_by in self.host.runs()

    def resumed(self, run: RoleRun) -> Ask | None:
        """The ask whose session the run goes on with: the one it carries, when it carries one alone, with a session,
        and the run holds no memo besides that ask's (a session resumed with no new prompt would never see it)."""
        asks = self.resuming.get(run.run_id, [])
        alone = len(asks) == 1 and len(asks[0].memos) == len(run.memos)  # no other memo the session never saw
        return asks[0] if alone and asks[0].session_id else None

    def sections(self, run: RoleRun) -> dict[str, str]:
        carried = self.carried(run)
        resumed = self.resumed(run)
        told = [ask for ask in carried if ask is not resumed]  # a resumed session is told in ``prepare``
        if not told:
            return {"answers": ""}
        text = answers_text(told)
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
        ask = self.resumed(run)
        if spec.adopted:
            return spec
        if ask is not None and spec.resume not in (None, ask.session_id):
            # a retry going on from its failed attempt's session, which went on from the ask's with the answer:
            # resuming the ask's again would redo that attempt's work and count its spend as carried on
            ask = None
        if not hooked(role):
            if ask is not None and ask.session_id:  # its session goes on
                spec = dataclasses.replace(spec, resume=ask.session_id, prompt=answers_text([ask]))
            if spec.resume and self.resuming.get(run.run_id):  # the ask's session, or a retry's that went on from it
                return dataclasses.replace(spec, carried_usd=self._spent(run, spec.resume))
            return spec
        env = {**spec.env, APPROVE_ENV: json.dumps(role.approve)}
        args = (*spec.args, "--settings", settings_text(role, spec.cwd))
        prompt = spec.prompt
        if ask is not None and ask.session_id:
            env[ANSWER_ENV] = str(self.folder / f"{ask.ask_id}.json")
            args = (*args, "--resume", ask.session_id)
            prompt = ""  # no new prompt: the session goes on from the deferred call, which the hook now answers
            # nothing carried: the CLI's only cap (--max-budget-usd) counts what its own process spends
        elif calls := [a for a in self.resuming.get(run.run_id, []) if a.tool]:  # a fresh session: the hook answers
            env[ANSWER_ENV] = os.pathsep.join(str(self.folder / f"{a.ask_id}.json") for a in calls)  # the same calls
            env[BY_INPUT_ENV] = "1"  # again, by their tool and input (a call's id is new)
        return dataclasses.replace(spec, env=env, args=args, prompt=prompt)

    def _spent(self, run: RoleRun, session: str) -> float:
        """What the runs before ``run`` spent of ``session``: its running totals report it again, so ``run``'s
        per-run budget counts on top of it."""
        return float(self.host.store.session_spent(session, run.run_id).get("cost_usd") or 0.0)
