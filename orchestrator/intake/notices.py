"""What the orchestrator writes for people and agents: reason files and notice memos.

A notice memo goes into the ``notify`` role's inbox when work is cancelled or
fails for good, so a coordinator that restarts later still finds the decision
in its own inbox. A memo that replies to cancelled work is delivered with a
plain note in front of its prompt (see ``late_report_note``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.intake.memo import INBOX, NAME_MAX, fit_name, new_memo_id, render_memo, slug, write_atomically

if TYPE_CHECKING:
    from orchestrator.config import Config, RoleRun
    from orchestrator.core.run import MemoRef
    from orchestrator.core.states import RunState
    from orchestrator.store import Store

LOG_TAIL_LINES = 20
NAMES_SHOWN = 20  # memo names a reason file or a notice lists; "and N more" stands for the rest
REASON_MAX = 16 * 1024  # bytes: every reason file stays under this
LINE_MAX = 1000  # characters of one line of a reason (a log line, an attempt's reason) before it is cut
SENDER = "orchestrator"  # the "from" of the notices the orchestrator writes itself


def name_list(names: Sequence[str], shown: int = NAMES_SHOWN) -> str:
    """``a.md, b.md, c.md``; past ``shown`` names, the first ones and ``and N more``."""
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])} and {len(names) - shown} more"


def cut_line(text: str, limit: int = LINE_MAX) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def fit_reason(text: str) -> str:
    """``text`` as it goes into a reason file: whole when under ``REASON_MAX`` bytes, else cut with a last line
    saying so (at a character boundary)."""
    data = text.encode("utf-8", "surrogateescape")
    if len(data) < REASON_MAX:
        return text
    note = f"\n[cut: this reason was {len(data)} bytes; reason files stay under {REASON_MAX}]\n"
    keep = data[: REASON_MAX - len(note.encode()) - 1].decode("utf-8", "ignore")
    return keep.rsplit("\n", 1)[0] + note if "\n" in keep else keep + note


def reason_path(memo_path: Path) -> Path:
    """``failed/<stem>.reason`` beside ``failed/<stem>.md``.

    A stem too long for that (``NAME_MAX`` bytes) is cut at a character boundary and followed by a
    short hash of the whole name: ``x.md`` and its clash name ``x.1.md`` may cut to the same stem.
    """
    stem = memo_path.name.removesuffix(".md")
    name = stem + ".reason"
    if len(os.fsencode(name)) > NAME_MAX:
        digest = hashlib.sha256(os.fsencode(memo_path.name)).hexdigest()[:8]
        name = fit_name(stem, f"-{digest}.reason")
    return memo_path.with_name(name)


def write_reason(memo_path: Path, text: str) -> Path:
    """Write the reason file beside a memo in failed/ (or held/), whole or not at all; returns its path.

    A text of ``REASON_MAX`` bytes or more is cut (``fit_reason``)."""
    path = reason_path(memo_path)
    write_atomically(path, fit_reason(text))
    return path


def log_tail(path: Path | None, lines: int = LOG_TAIL_LINES) -> list[str]:
    if path is None:
        return []
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return data.splitlines()[-lines:]


def failure_reason_text(run: RoleRun, state: RunState, reason: str, attempts: Iterable[dict[str, Any]]) -> str:
    """The reason file: what happened on each attempt and the end of the agent's log (``fit_reason`` cuts it)."""
    out = [
        f"{state.value}: {cut_line(reason)}",
        f"role: {run.role.name}",
        f"run: {run.run_id}",
        f"memos: {name_list([m.name for m in run.memos])}",
        f"log: {run.log_path}",
        "attempts:",
    ]
    for item in attempts:
        code = item.get("exit_code")
        out.append(
            f"  {item['attempt']}: {item.get('outcome') or '?'}, exit code {code if code is not None else '-'}, "
            f"started {item.get('started_at') or '-'}, ended {item.get('ended_at') or '-'}"
            + (f", {cut_line(item['reason'])}" if item.get("reason") else "")
        )
    tail = log_tail(run.log_path)
    if tail:
        out.append(f"last {len(tail)} lines of the log:")
        out.extend(f"  | {cut_line(line)}" for line in tail)
    return "\n".join(out) + "\n"


def _write_notice(
    config: Config, notify: str, header: dict[str, Any], kind: str, about: str, body: str, now: datetime | None = None
) -> Path:
    """``now``: the writer's clock (the supervisor's), for ``created_at``; the id stays on the real clock, which
    orders it among the memos that agents write."""
    memo_id = new_memo_id()
    inbox = config.role_dir(notify) / INBOX
    path = inbox / f"{memo_id}-{kind}-{slug(about)}.md"
    while path.exists():  # two notices within one millisecond
        memo_id = format(int(memo_id, 16) + 1, "x")
        path = inbox / f"{memo_id}-{kind}-{slug(about)}.md"
    front = {
        "id": memo_id,
        **header,
        "created_at": (now or datetime.now().astimezone()).isoformat(timespec="milliseconds"),
    }
    write_atomically(path, render_memo(front, body))
    return path


def _about_run(notify: str, first: MemoRef, subject: str, tag: str) -> dict[str, Any]:
    """The front matter of a notice about a run: from the orchestrator, in reply to the run's first memo."""
    return {
        "subject": subject,
        "from": SENDER,
        "to": notify,
        "reply_to": first.memo_id or first.label,
        "tags": [tag],
    }


def _memo_lines(run: RoleRun, moved: list[Path], root: Path) -> list[str]:
    """One line per memo, the first ``NAMES_SHOWN`` of them, then one saying how many more and where they are."""
    lines = []
    for memo, path in zip(run.memos[:NAMES_SHOWN], moved, strict=False):
        rel = path.relative_to(root) if path.is_relative_to(root) else path
        lines.append(f"- {memo.name} (id {memo.memo_id or '-'}, subject: {memo.subject or '-'}), now at {rel}")
    if len(run.memos) > NAMES_SHOWN:
        folders = sorted({str(p.parent.relative_to(root) if p.is_relative_to(root) else p.parent) for p in moved})
        lines.append(f"- and {len(run.memos) - NAMES_SHOWN} more, in {', '.join(folders) or '-'}")
    return lines


def write_cancel_notice(
    config: Config,
    notify: str,
    run: RoleRun,
    moved: list[Path],
    *,
    who: str,
    reason: str,
    previous: str,
    ran_seconds: float | None,
    pids: list[int],
    when: str,
    now: datetime | None = None,
) -> Path:
    """Tell the coordinator that work was called off, so it remembers after any restart."""
    first = run.memos[0]
    subject = first.subject or first.name
    if previous == "waiting":
        ran = "its run had ended with a question for a person, now withdrawn"
        log = "the asking run's (`orchestrator trace` names it)"
    else:
        ran = f"{ran_seconds:.1f} s" if ran_seconds is not None else "it had not started"
        log = str(run.log_path) if run.log_path and ran_seconds is not None else "none (it never started)"
    body = "\n".join(
        [
            f"The orchestrator cancelled work of role **{run.role.name}** on request.",
            "",
            f"- Reason: {reason or '(none given)'}",
            f"- Cancelled by: {who}",
            f"- When: {when}",
            f"- State when cancelled: {previous} (run {run.run_id}, attempt {run.attempt})",
            f"- How long the agent had run: {ran}",
            f"- Processes ended: {', '.join(map(str, pids)) or 'none'}",
            f"- Agent log: {log}",
            "",
            "Memos of this work:",
            *_memo_lines(run, moved, config.root),
            "",
            f"This decision stands: any later memo that replies to {first.memo_id or first.name} reports on work "
            "that was called off and must not be accepted as done.",
        ]
    )
    header = _about_run(notify, first, f"Cancelled: {subject}", "cancelled")
    return _write_notice(config, notify, header, "cancelled", subject, body, now)


def write_failure_notice(
    config: Config,
    notify: str,
    run: RoleRun,
    state: RunState,
    reason: str,
    moved: list[Path],
    now: datetime | None = None,
) -> Path:
    """Tell the coordinator that work failed for good (retries ran out, timed out, undeliverable)."""
    first = run.memos[0]
    subject = first.subject or first.name
    ran = run.attempt > 0  # else a memo that could not run, or whose question nobody answered in time
    tail = log_tail(run.log_path, 10) if ran else []
    body = "\n".join(
        [
            f"Work of role **{run.role.name}** ended as `{state.value}` "
            + (f"after {run.attempt} attempt(s)." if ran else "with no attempt of its own (the reason says why)."),
            "",
            f"- Reason: {reason}",
            f"- Run: {run.run_id}",
            f"- Agent log: {run.log_path if ran else 'none of this run'}",
            "",
            "Memos of this work (a `.reason` file beside each says more):",
            *_memo_lines(run, moved, config.root),
            *(["", "Last lines of the agent's log:", "", "```", *tail, "```"] if tail else []),
        ]
    )
    header = _about_run(notify, first, f"Failed: {subject}", state.value)
    return _write_notice(config, notify, header, state.value.replace("_", "-"), subject, body, now)


def write_warning_notice(
    config: Config, notify: str, run: RoleRun, warning: str, moved: list[Path], now: datetime | None = None
) -> Path:
    """Tell the coordinator that work was archived as done with a warning (tool calls refused, ``on_denied: warn``)."""
    first = run.memos[0]
    subject = first.subject or first.name
    body = "\n".join(
        [
            f"Work of role **{run.role.name}** was archived as done, with a warning.",
            "",
            f"- Warning: {warning}",
            f"- Run: {run.run_id}",
            f"- Agent log: {run.log_path}",
            "",
            "Memos of this work:",
            *_memo_lines(run, moved, config.root),
        ]
    )
    header = _about_run(notify, first, f"Warning: {subject}", "warning")
    return _write_notice(config, notify, header, "warning", subject, body, now)


def late_report_note(store: Store, memo: MemoRef) -> str | None:
    """A note put in front of the prompt when the memo replies to cancelled work, else None."""
    if not memo.reply_to or memo.sender == "orchestrator":
        return None  # our own notices reply to the cancelled memo by design: they are the record, not a late report
    record = store.cancellation_of(memo.reply_to)
    if record is None:
        return None
    return (
        f"NOTE FROM THE ORCHESTRATOR: memo {memo.name} replies to memo {memo.reply_to} "
        f'("{record.get("subject") or record["memo"]}"), which was CANCELLED at {record["cancelled_at"]} '
        f"by {record.get('who') or 'someone'} (reason: {record.get('reason') or 'none given'}). "
        "It reports on work that was called off: do not accept or build on its results unless a new "
        "decision asks for them."
    )


def write_pause_notice(
    config: Config, notify: str, account: str, roles: list[str], subject: str, line: str, now: datetime | None = None
) -> Path:
    """Tell the coordinator that an account was paused by a usage limit, or resumed after one."""
    body = "\n".join(
        [
            f"Account **{account}** {line}.",
            "",
            f"- Roles on this account: {name_list(roles)}",
            "- Memos wait in their inboxes, with no attempt used; runs already going keep going.",
        ]
    )
    header = {"subject": subject, "from": SENDER, "to": notify, "tags": ["usage-limit"]}
    return _write_notice(config, notify, header, "usage-limit", account, body, now)
