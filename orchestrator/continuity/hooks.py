"""Continuity as an extension of ``up``: prompt sections and notes, the journal and handoff at each end, holds.

Its hooks (``orchestrator.supervisor.extension``):

- ``sections`` fill ``$context``, ``$handoff`` and ``$journal``; expired
  handoff items are dropped first, and ``notes`` put a plain note at
  the top of the prompt when the handoff is over its cap or cannot be used;
- ``before_finish``: the journal entry first (before the memos move),
  then the handoff (the note of a run that died, or its removal after a
  success that saw it); its fsync and the version snapshot once a role at
  the end of the loop's turn (``handoff_writes``);
- ``check_holds``: a role whose context files are missing starts no new work;
- ``snapshot``: the roles whose journal could not be written (``journal_problems``).
"""

from __future__ import annotations

import os
from datetime import date, datetime
from pathlib import Path
from typing import Any

from orchestrator.agents.backends import capabilities
from orchestrator.config import Role, RoleRun
from orchestrator.continuity import handoff as ho
from orchestrator.continuity import journal as jn
from orchestrator.continuity.context import ContextProblem, context_paths, read_context
from orchestrator.continuity.handoff_writes import HandoffWrites
from orchestrator.core.agent import LastWords
from orchestrator.core.clock import wall_at
from orchestrator.core.states import RunState
from orchestrator.intake import notices
from orchestrator.intake.memo import header_tasks, parse_front_matter
from orchestrator.supervisor.extension import Extension, Host

DIED = (RunState.FAILED, RunState.TIMED_OUT, RunState.CANCELLED, RunState.RETURNED)
NOTE = "NOTE FROM THE ORCHESTRATOR:"
HOLD_SOURCE = "context"
DEATH_LOG_LINES = 5


def _hhmm(moment: str | datetime | None) -> str:
    if moment is None:
        return "-"
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment)
        except ValueError:
            return "-"
    return moment.astimezone().strftime("%H:%M")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "an unknown time"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{hours}h " if hours else "") + (f"{minutes}m " if hours or minutes else "") + f"{secs}s"


def _stamp(path: Path) -> tuple[str, int, int] | None:
    """Which file, how long, when last changed: equal stamps mean the same bytes as far as we can tell."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (str(path), info.st_size, info.st_mtime_ns)


def _defang(text: str) -> str:
    """Agent text inside our section must not close or open it."""
    return text.replace("<!--", "<!\u200b--")


class Continuity(Extension):
    """What one run hands the next: context, journal, handoff; its state is per run and per role."""

    def __init__(self, host: Host) -> None:
        self.config = host.config
        self.store = host.store
        self.console = host.console
        self.clock = host.clock
        self.holds = host.holds
        self.expired: dict[int, list[str]] = {}  # run id -> handoff lines dropped before it read the file
        self.seen_note: dict[int, str] = {}  # run id -> the orchestrator's section it was shown
        self.pending_notes: dict[int, list[str]] = {}  # run id -> notes for the top of its prompt
        self.problems: dict[str, str] = {}  # role -> why its journal could not be written (for status)
        # role -> (the newest journal file's stamp, its newest entries): a start reads nothing while the file
        # is as we last read or wrote it (the orchestrator is its only writer; an edit by hand changes the stamp)
        self.recent: dict[str, tuple[tuple[str, int, int], list[jn.Entry]]] = {}
        self.no_flag: set[str] = set()  # roles whose "told over cap" flag is known not to exist
        self.writes = HandoffWrites(self.config, self.console, self._tell_over_cap)

    def stop(self) -> None:
        """The loop is ending: what its last turn changed in a handoff is written now."""
        self.writes.flush()

    def today(self) -> date:
        return self.clock.now().astimezone().date()

    def snapshot(self, full: bool) -> dict[str, Any]:
        return {"journal_problems": dict(self.problems)}

    # ------------------------------------------------------------ holds
    def check_holds(self) -> None:
        """Hold each role whose context files are missing or over the cap; release it once they are back."""
        for role in self.config.roles.values():
            if not role.context:
                continue
            problem = self._context_problem(role)
            if problem:
                self.holds.hold(role.name, HOLD_SOURCE, problem)
            elif role.name in self.holds.current:
                self.holds.release(role.name, HOLD_SOURCE)

    def _context_problem(self, role: Role) -> str | None:
        total = 0
        for name, path in zip(role.context, context_paths(self.config, role), strict=True):
            try:
                info = os.stat(path)
            except FileNotFoundError:
                return f"context file {name} is missing"
            except OSError as exc:
                return f"context file {name} cannot be read: {exc.strerror or exc}"
            if not os.access(path, os.R_OK) or os.path.isdir(path):
                return f"context file {name} cannot be read"
            total += info.st_size
        if total > role.context_max_bytes:
            return f"context files are {total} bytes together, over context_max_bytes {role.context_max_bytes}"
        return None

    # ------------------------------------------------------------ the prompt
    def sections(self, run: RoleRun) -> dict[str, str]:
        """``$context``, ``$handoff`` and ``$journal`` for the run (expired handoff items are dropped first)."""
        role = run.role
        notes: list[str] = []
        try:
            context = read_context(self.config, role)
        except ContextProblem as exc:  # gone since the hold check: never start without it
            self.holds.hold(role.name, HOLD_SOURCE, str(exc))
            raise
        values = {
            "context": f"# Context\n\n{context}" if context else "",
            "handoff": self._handoff_section(run, notes),
            "journal": self._journal_section(role),
        }
        self.pending_notes[run.run_id] = notes
        return values

    def notes(self, run: RoleRun) -> list[str]:
        """Notes for the very top of the prompt (computed while the sections were filled)."""
        return self.pending_notes.pop(run.run_id, [])

    def _handoff_section(self, run: RoleRun, notes: list[str]) -> str:
        role = run.role.name
        handoff = ho.read_handoff(self.config, role)
        rel = f"memo/{role}/{ho.HANDOFF}"
        if not handoff.usable:
            note = f"{NOTE} {handoff.problem}; $handoff is empty for this run and the file was not touched."
            notes.append(note)
            self.console.line(f"handoff: {handoff.problem}; the run starts without it", role=role)
            return ""
        text, dropped = ho.expire(handoff.text, self.today())
        if dropped:
            try:
                ho.write_handoff(handoff, text)
                self.expired[run.run_id] = dropped
                self.console.line(f"handoff: removed {len(dropped)} expired line(s) from {rel}", role=role)
            except OSError as exc:
                self.console.line(f"handoff: cannot remove expired lines from {rel}: {exc}", role=role)
                text = handoff.text
        seen = ho.section(text)
        if seen:
            self.seen_note[run.run_id] = seen
        size = ho.agents_bytes(text)
        cap = run.role.handoff_max_bytes
        if size > cap:
            notes.append(
                f"{NOTE} the handoff file {rel} is {size} bytes, over its cap of {cap} bytes "
                "(handoff_max_bytes). Before anything else, compact it: keep only the short-lived facts that "
                "change what the next run does, each with a condition for removing it."
            )
        if not text.strip():
            return ""
        return f"# Handoff ({rel})\n\n{text.rstrip()}\n"

    def _journal_section(self, role: Role) -> str:
        if role.journal_in_prompt <= 0:
            return ""
        text = jn.prompt_text(self._recent_entries(role))
        return f"# Journal (the last runs of {role.name}, oldest first)\n\n{text}" if text else ""

    def _recent_entries(self, role: Role) -> list[jn.Entry]:
        """The role's newest ``journal_in_prompt`` entries, read again only when the journal changed under us."""
        folder = self.config.role_dir(role.name) / jn.JOURNAL
        files = jn.day_files(folder)
        stamp = _stamp(files[-1]) if files else None
        cached = self.recent.get(role.name)
        if stamp is not None and cached is not None and cached[0] == stamp:
            return cached[1]
        entries = jn.read_entries(role.name, folder, last=role.journal_in_prompt)
        if stamp is not None:
            self.recent[role.name] = (stamp, entries)
        return entries

    def _remember_entry(self, role: Role, path: Path, before: tuple[str, int, int] | None, text: str) -> None:
        """After our own append: the cached entries gain the new one, if the cache held the file as it was."""
        cached = self.recent.get(role.name)
        if cached is None or before is None or cached[0] != before:
            self.recent.pop(role.name, None)
            return
        after = _stamp(path)
        added = jn.parse(role.name, path.name[:10], text)
        if after is None or len(added) != 1:
            self.recent.pop(role.name, None)
            return
        self.recent[role.name] = (after, (cached[1] + added)[-role.journal_in_prompt :])

    # ------------------------------------------------------------ the end of a run
    def before_finish(self, run: RoleRun, state: RunState, reason: str | None) -> None:
        """Journal entry first, then the handoff (death note or its removal), then the version snapshot."""
        if run.seq is None:  # a memo rejected before any agent: no run of the role to record
            return
        try:
            handoff = ho.read_handoff(self.config, run.role.name)
            warning = self._cap_warning(run, handoff)
            self._journal(run, state, reason, warning)
            if handoff.usable:
                self._handoff_after(run, state, reason, handoff)
        finally:
            self.expired.pop(run.run_id, None)
            self.seen_note.pop(run.run_id, None)
            self.pending_notes.pop(run.run_id, None)

    def _cap_warning(self, run: RoleRun, handoff: ho.Handoff) -> str | None:
        if not handoff.usable:
            return None
        size, cap = ho.agents_bytes(handoff.text), run.role.handoff_max_bytes
        if size <= cap:
            return None
        warning = f"the handoff is {size} bytes, over its cap of {cap} bytes; the next run is asked to compact it"
        self.console.line(f"warning: {warning} (run {run.run_id})", role=run.role.name)
        return warning

    def _journal(self, run: RoleRun, state: RunState, reason: str | None, warning: str | None) -> None:
        role = run.role.name
        folder = self.config.role_dir(role) / jn.JOURNAL
        started = run.started_at  # a first attempt's own start; a later one's run started with its first
        if run.attempt != 1 or started is None:
            attempts = self.store.attempts(run.run_id)
            started = next((a["started_at"] for a in attempts if a.get("started_at")), run.started_at)
        now = wall_at(self.clock, run.ended_mono).astimezone()  # its agent's end (earlier when recorded while down)
        text = self.entry_text(run, state, reason, warning, started, now)
        since = None
        if started:
            try:
                since = datetime.fromisoformat(started).astimezone().date()
            except ValueError:
                since = None
        path = jn.day_file(folder, now.date())
        before = _stamp(path)
        try:
            written = jn.append_entry(folder, now.date(), run.run_id, run.attempt, text, since)
        except OSError as exc:
            self.recent.pop(role, None)
            why = f"cannot write the journal in {folder}: {exc.strerror or exc}"
            self.problems[role] = why
            self.console.line(f"{why}; run {run.run_id} ended {state.value} (on record in the database)", role=role)
            return
        if written:
            self._remember_entry(run.role, path, before, text)
        self.problems.pop(role, None)

    def entry_text(
        self, run: RoleRun, state: RunState, reason: str | None, warning: str | None, started: str | None, now: datetime
    ) -> str:
        """The Markdown of the run's journal entry, its marker line first."""
        start, end = _hhmm(started), _hhmm(now)
        lines = [
            jn.marker(run.run_id, run.attempt, run.seq, state.value, start, end),
            f"## Run {run.seq} ({start}-{end}, {state.value})",
            "",
            f"- Run id {run.run_id}, attempt {run.attempt}",
        ]
        for memo in run.memos:
            lines.append(f'- Memo: {memo.label} "{memo.subject or memo.name}"')
        tasks = self._tasks(run)
        if tasks:
            lines.append("- Tasks: " + "; ".join(tasks))
        can = capabilities(run.role)
        if can.cost or can.tokens:
            row = self.store.run(run.run_id) or {}
            cost = row.get("cost_usd")
            spent = [f"Cost: {f'${cost:.4f}' if cost is not None else 'unknown'}"] if can.cost else []
            if not can.cost and cost is not None:  # it reports no dollars: a cost on its record is our estimate
                spent = [f"Cost: ~${cost:.4f} (estimated from `prices`)"]
            tokens = f"tokens: {row.get('input_tokens') or 0} in, {row.get('output_tokens') or 0} out"
            lines.append("- " + "; ".join([*spent, tokens]))
        if reason and state is not RunState.SUCCEEDED:
            lines.append(f"- Reason: {reason}")
        for line in self.expired.get(run.run_id, []):
            lines.append(f"- Handoff: removed the expired line `{line.strip()}`")
        if warning:
            lines.append(f"- Warning: {warning}")
        closing = self._closing_words(run)
        lines += ["", "Closing words:", "", jn.quote(closing) if closing.strip() else "> (none)", "", ""]
        return "\n".join(lines)

    def _tasks(self, run: RoleRun) -> list[str]:
        out: list[str] = []
        for memo in run.memos:
            if memo.tasks is not None:  # read at the claim
                out += memo.tasks
                continue
            try:  # a run rebuilt at a restart: its memo's front matter is read now
                text = memo.path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            out += header_tasks(parse_front_matter(text).extra)
        return out

    @staticmethod
    def _last_words(run: RoleRun) -> LastWords | None:
        """What the run's last agent last did and said, as its verdict read it at its end (None: its output
        cannot tell, so its log's last lines say it)."""
        verdict = run.agent.verdict if run.agent is not None else None
        return verdict.last_words if verdict is not None else None

    def _closing_words(self, run: RoleRun) -> str:
        """The agent's final result text (an sdk or stream-json Claude run), else the last lines of its log."""
        words = self._last_words(run)
        if words is not None:
            return jn.capped((words.result or "").splitlines())
        return jn.capped(jn.agents_lines(notices.log_tail(run.log_path, jn.CLOSING_LINES + 1)))

    def _handoff_after(self, run: RoleRun, state: RunState, reason: str | None, handoff: ho.Handoff) -> None:
        """The handoff as the run's end leaves it, written now; its fsync and version at the turn's end."""
        text = handoff.text
        if state in DIED:
            text = ho.put_section(text, self.death_note(run, state, reason))
        elif state is RunState.SUCCEEDED:
            seen = self.seen_note.get(run.run_id)
            if seen is not None and ho.section(text) == seen:
                text = ho.remove_section(text)
        self.writes.end(run, handoff, text)

    def death_note(self, run: RoleRun, state: RunState, reason: str | None) -> str:
        """The orchestrator's section after a run died: what it was doing, on what, for how long, where its log is."""
        now = self.clock.now().astimezone()
        ran = run.last_ran if run.last_ran is not None else None
        if ran is None and run.started_mono is not None:
            ran = run.elapsed(self.clock.monotonic())
        lines = [
            f"## The orchestrator: run {run.seq} of {run.role.name} ended {state.value}",
            "",
            f"- Run {run.seq} (run id {run.run_id}, attempt {run.attempt}) ended **{state.value}** at "
            f"{now.strftime('%Y-%m-%d %H:%M')} after {_duration(ran)}.",
        ]
        for memo in run.memos:
            lines.append(f'- Memo: {memo.label} "{_defang(memo.subject or memo.name)}"')
        if reason:
            lines.append(f"- Why: {_defang(reason)}")
        words = self._last_words(run)
        if words is not None:
            lines.append(f"- Last tool use: {_defang(words.tool) if words.tool else '(none)'}")
            lines.append(f"- Last text: {_defang(words.text) if words.text else '(none)'}")
            if run.session_id:
                lines.append(f"- Session: {run.session_id} (resume it to carry on where it stopped)")
        else:
            tail = notices.log_tail(run.log_path, DEATH_LOG_LINES)
            lines.append(f"- Last {len(tail)} log line(s):" if tail else "- Last log lines: (none)")
            lines += [f"      {_defang(line)}" for line in tail]
        log = run.log_path
        rel = log.relative_to(self.config.root) if log is not None and log.is_relative_to(self.config.root) else log
        lines.append(f"- Log: {rel}")
        lines.append("")
        lines.append("(Written by the orchestrator; removed once a later run that saw it succeeds.)")
        return "\n".join(lines)

    def _tell_over_cap(self, run: RoleRun, text: str) -> None:
        """With ``notify`` set, that role is told once that the handoff is over its cap (again once it was under)."""
        role = run.role.name
        flag = ho.versions_dir(self.config, role) / "told-over-cap"
        size, cap = ho.agents_bytes(text), run.role.handoff_max_bytes
        if size <= cap:
            if role not in self.no_flag:  # looked for once; from then on only we write it
                flag.unlink(missing_ok=True)
                self.no_flag.add(role)
            return
        notify = self.config.notify
        if not notify or flag.exists():
            return
        header = {
            "subject": f"Handoff over its cap: {role}",
            "from": "orchestrator",
            "to": notify,
            "tags": ["handoff"],
        }
        body = (
            f"The handoff file of role **{role}** (memo/{role}/{ho.HANDOFF}) is {size} bytes, over its cap of "
            f"{cap} bytes (handoff_max_bytes), after run {run.seq}. Its next run is asked to compact it first.\n"
        )
        notice = notices._write_notice(self.config, notify, header, "handoff", role, body)
        flag.parent.mkdir(parents=True, exist_ok=True)
        flag.write_text(str(run.seq), encoding="utf-8")
        self.no_flag.discard(role)
        self.console.line(f"told {notify}: {Path(notice).name}", role=role)
