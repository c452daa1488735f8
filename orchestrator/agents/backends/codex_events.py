"""What ``codex exec --json`` wrote, read once at an attempt's end: its thread, tokens, verdict and last words.

Codex prints one JSON event a line: ``thread.started`` (its ``thread_id``), ``turn.started``, ``item.completed``
(an ``agent_message``'s ``text``, a ``command_execution``'s ``command``, an ``error`` item, which is only a
warning), ``turn.completed`` with its ``usage``, and on failure ``error`` and ``turn.failed``. Its exit status
alone cannot tell a usage limit from a bad key, so the events decide: success needs a completed turn. A usage
limit is said in prose with a local wall-clock time ("Try again at 3:50 PM."), read with an injected clock.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from orchestrator.agents.backends.codex_rollout import thread_spent
from orchestrator.agents.claude_errors import one_line
from orchestrator.config.codex import TokenPrice
from orchestrator.core.agent import Judgement, LastWords, UsageLimit

TAIL_BYTES = 4 * 1024 * 1024  # an attempt's events read back at most this far
HEAD_BYTES = 64 * 1024  # the start of an output whose tail did not reach it, read for its thread
NO_MODEL_CALL = "Codex started but made no model call"
TOKEN_KEYS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
)
Now = Callable[[], datetime]  # the local wall-clock time, aware: the tests replace it

_LIMIT = re.compile(r"hit your usage limit|usage_limit_reached|usage limit", re.I)
_AUTH = re.compile(
    r"\b401\b|unauthori[sz]ed|invalid[_ ]api[_ ]key|incorrect api key|not logged in|codex login|"
    r"missing environment variable|authentication|refresh token",
    re.I,
)
# the account cannot pay for any run (as a billing error is for Claude): no retry helps, until a person acts
_ACCOUNT = re.compile(
    r"quota exceeded|insufficient_quota|plan and billing|upgrade to (?:plus|pro)|out of credits|spend cap", re.I
)
_CONFIG = re.compile(r"^Error loading config|config\.toml", re.I)  # its configuration: no retry helps
_AT_TIME = re.compile(
    r"try again at (?:(?P<date>[A-Z][a-z]{2,8} \d{1,2}(?:st|nd|rd|th)?, \d{4}) )?(?P<time>\d{1,2}:\d{2} ?[AP]M)", re.I
)
_IN = re.compile(r"(?:try again )?in (?P<n>\d+) (?P<unit>second|minute|hour|day)s?", re.I)
_RESETS_AT = re.compile(r'resets_at"?\s*[:=]\s*"?(\d{9,11})')


@dataclass
class Events:
    """What one attempt's events said."""

    thread_id: str | None = None
    turns_started: int = 0
    turns_completed: int = 0
    usage: dict[str, int] = field(default_factory=dict)  # its last completed turn's: the thread's running totals
    errors: list[str] = field(default_factory=list)  # ``error`` events and ``turn.failed`` messages, in order
    warnings: list[str] = field(default_factory=list)  # ``error`` items
    failed_after_last_turn: bool = False  # a turn failed and none completed after it
    last_command: str | None = None
    last_text: str | None = None
    items: int = 0
    said_error: str | None = None  # the last ``Error...`` line outside the events (Codex's standard error)


def read_events(text: str) -> Events:
    """The events of ``text`` (one JSON object a line; of the rest, only the last line that says an error)."""
    events = Events()
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            if line.startswith("Error"):
                events.said_error = line
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            _take(events, event)
    return events


def _message(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("message") or json.dumps(value))
    return str(value or "")


def _take(events: Events, event: dict[str, Any]) -> None:
    kind = event.get("type")
    if kind == "thread.started":
        events.thread_id = str(event.get("thread_id") or "") or events.thread_id
    elif kind == "turn.started":
        events.turns_started += 1
    elif kind == "turn.completed":
        events.turns_completed += 1
        events.failed_after_last_turn = False
        usage = event.get("usage")
        if isinstance(usage, dict):  # the thread's totals so far (a resumed thread's carry on from its first run)
            events.usage = {k: v for k in TOKEN_KEYS if isinstance(v := usage.get(k), int)}
    elif kind == "turn.failed":
        events.errors.append(_message(event.get("error")))
        events.failed_after_last_turn = True
    elif kind == "error":
        events.errors.append(_message(event.get("message") or event))
        events.failed_after_last_turn = True
    elif kind in ("item.completed", "item.started"):
        item = event.get("item")
        if not isinstance(item, dict):
            return
        events.items += kind == "item.completed"
        what = item.get("type")
        if what == "agent_message" and kind == "item.completed":
            events.last_text = str(item.get("text") or "") or events.last_text
        elif what == "command_execution":
            events.last_command = str(item.get("command") or "") or events.last_command
        elif what == "error" and kind == "item.completed":
            events.warnings.append(one_line(str(item.get("message") or ""), 200))


def usage_limit(text: str, now: datetime) -> UsageLimit | None:
    """The usage limit ``text`` names, with its reset as epoch seconds when it says one; None when it names none.

    A bare time ("Try again at 3:50 PM.") is today's, shown rounded down to the minute: one already past means
    the limit lifts within the minute, so its reset is now (the account is probed, not paused for a day)."""
    if not _LIMIT.search(text):
        return None
    detail = one_line(text, 200)
    epoch = _RESETS_AT.search(text)
    if epoch:
        return UsageLimit("usage_limit", float(epoch.group(1)), detail)
    at = _AT_TIME.search(text)
    if at:
        return UsageLimit("usage_limit", _clock_time(at.group("date"), at.group("time"), now), detail)
    within = _IN.search(text)
    if within:
        unit = within.group("unit").lower()
        seconds = int(within.group("n")) * {"second": 1, "minute": 60, "hour": 3600, "day": 86400}[unit]
        return UsageLimit("usage_limit", (now + timedelta(seconds=seconds)).timestamp(), detail)
    return UsageLimit("usage_limit", None, detail)


def _clock_time(date: str | None, clock: str, now: datetime) -> float:
    """Epoch seconds of a wall-clock time in ``now``'s zone, on ``date`` ("Dec 4th, 2026") or today."""
    clock = clock.upper().replace(" ", "")
    moment = datetime.strptime(clock, "%I:%M%p").time()
    if date:
        day = datetime.strptime(re.sub(r"(\d)(st|nd|rd|th)", r"\1", date), "%b %d, %Y").date()
    else:
        day = now.date()
    when = datetime.combine(day, moment, tzinfo=now.tzinfo)
    if when + timedelta(minutes=1) <= now:  # already past: it lifts now (or within the minute)
        return now.timestamp()
    return max(when.timestamp(), now.timestamp())


def judge(events: Events, code: int, now: datetime) -> Judgement:
    """How the attempt went, by its events and its exit ``code``: success needs a completed turn."""
    words = LastWords(
        tool=f"shell: {one_line(events.last_command, 200)}" if events.last_command else None,
        text=one_line(events.last_text.strip().splitlines()[-1], 200)
        if events.last_text and events.last_text.strip()
        else None,
        result=one_line(events.last_text, 200) if events.last_text and events.turns_completed else None,
    )
    if code < 0:
        return Judgement(last_words=words)  # ended by a signal: the transport's reason (a stop, a timeout) stands
    if events.turns_completed and not events.failed_after_last_turn:
        return Judgement(last_words=words)  # its errors were retries it got over: the exit status decides
    said = " ".join(events.errors)
    limit = next((found for e in reversed(events.errors) if (found := usage_limit(e, now)) is not None), None)
    if limit is not None:
        reason = f"Codex hit the account's usage limit ({limit.detail})"
        return Judgement(True, reason, usage_limit=limit, last_words=words)
    last_error = one_line(events.errors[-1], 200) if events.errors else None
    if last_error and _ACCOUNT.search(events.errors[-1]):
        reason = f"the OpenAI account cannot run it ({last_error}); see its plan, credits or spend limit"
        return Judgement(True, reason, permanent=True, last_words=words)
    if last_error and _AUTH.search(said):
        return Judgement(
            True,
            f"Codex could not log in ({last_error}); run `codex login`, or set OPENAI_API_KEY or CODEX_API_KEY "
            "(or the env_key of the role's model provider)",
            permanent=True,
            last_words=words,
        )
    if last_error:
        return Judgement(True, f"Codex failed: {last_error}", last_words=words)
    if events.said_error and not events.turns_completed:  # it failed before any event said why (its config, a resume)
        said_error = one_line(events.said_error, 200)
        permanent = _CONFIG.search(said_error) is not None
        return Judgement(True, f"Codex failed: {said_error}", permanent=permanent, last_words=words)
    if not events.items and not events.turns_started:
        return Judgement(True, NO_MODEL_CALL, last_words=words)
    return Judgement(True, "Codex completed no turn", last_words=words)


def figures(events: Events, price: TokenPrice | None = None) -> dict[str, Any]:
    """The thread as the session, its tokens (input with the cached ones among them, output with the reasoning
    ones among them), and with a ``price`` its cost as an estimate (``cost_estimated``)."""
    result: dict[str, Any] = {}
    if events.thread_id:
        result["session_id"] = events.thread_id
    result.update(events.usage)
    if events.turns_completed:
        result["num_turns"] = events.turns_completed
    if price is not None and events.usage:
        result["cost_usd"] = estimate(events.usage, price)
        result["cost_estimated"] = True
    return result


def estimate(usage: dict[str, int], price: TokenPrice) -> float:
    """Dollars for ``usage`` at ``price`` (per million tokens): cached input at its own price, the rest of the
    input (cache writes among it) at ``input``, output (reasoning among it) at ``output``."""
    cached = usage.get("cached_input_tokens", 0)
    fresh = max(usage.get("input_tokens", 0) - cached, 0)
    cached_price = price.input if price.cached_input is None else price.cached_input
    return (fresh * price.input + cached * cached_price + usage.get("output_tokens", 0) * price.output) / 1e6


CODEX_EVENTS = frozenset({"thread.started", "turn.started", "turn.completed", "turn.failed", "item.completed", "error"})


def describe(event: dict[str, Any]) -> list[str]:
    """One of Codex's events as lines for a person (``orchestrator logs``); none for those that say nothing."""
    kind = event.get("type")
    if kind == "thread.started":
        return [f"thread {event.get('thread_id')}"]
    if kind == "turn.completed":
        given = event.get("usage")
        usage: dict[str, Any] = given if isinstance(given, dict) else {}
        said = ", ".join(f"{usage.get(k, 0)} {k.removesuffix('_tokens').replace('_', ' ')}" for k in TOKEN_KEYS)
        return [f"turn completed: {said} tokens"]
    if kind in ("turn.failed", "error"):
        return [
            f"{'turn failed' if kind == 'turn.failed' else 'error'}: {one_line(_message(event.get('error') or event.get('message')), 200)}"
        ]
    item = event.get("item") if kind == "item.completed" else None
    if not isinstance(item, dict):
        return []
    what = item.get("type")
    if what == "agent_message":
        return [f"assistant: {one_line(str(item.get('text') or ''), 200)}"]
    if what == "command_execution":
        mark = "←" if item.get("exit_code") == 0 else "✗"
        output = one_line(str(item.get("aggregated_output") or ""), 200)
        return [
            f"→ shell: {one_line(str(item.get('command') or ''), 200)}",
            f"{mark} exit {item.get('exit_code')}: {output}",
        ]
    if what == "file_change":
        listed = item.get("changes")
        changes: list[Any] = listed if isinstance(listed, list) else []
        return [f"→ files: {', '.join(str(c.get('path')) for c in changes if isinstance(c, dict))}"]
    if what == "error":
        return [f"warning: {one_line(str(item.get('message') or ''), 200)}"]
    return []


class CodexOutput:
    """One attempt's events in the run's log from ``offset``, read at its end in a worker thread (its tail only);
    ``earlier``: the figures of the same attempt's turns before (a resumed thread's usage already counts them);
    ``before``: for an attempt taken back at a restart, what its earlier processes wrote, read at the end (blocking)
    for the turns they completed; ``thread_kept`` False: Codex keeps no thread (``--ephemeral``), so none is told as
    a session to resume; ``rollouts``: the Codex home whose rollout of the thread says what a turn that did not
    complete spent (``codex_rollout``)."""

    def __init__(
        self,
        log_path: Path,
        offset: int,
        now: Now | None = None,
        price: TokenPrice | None = None,
        earlier: dict[str, Any] | None = None,
        before: Callable[[], str] | None = None,
        thread_kept: bool = True,
        rollouts: Path | None = None,
    ) -> None:
        self.log_path = log_path
        self.offset = offset
        self.price = price
        self.now = now or (lambda: datetime.now().astimezone())
        self.earlier = earlier or {}  # the figures of the attempt's turns before this one (a tell's next turn)
        self.before = before
        self.thread_kept = thread_kept
        self.rollouts = rollouts if thread_kept else None
        self.result: dict[str, Any] = dict(self.earlier)
        self.events = Events()

    def judge(self, code: int) -> Judgement:
        """Read the attempt's events and judge its end with exit ``code``. Blocking."""
        try:
            with open(self.log_path, "rb") as log:
                size = os.fstat(log.fileno()).st_size
                start = max(self.offset, size - TAIL_BYTES)
                log.seek(start)
                text = log.read().decode("utf-8", "replace")
                if start > self.offset:
                    text = text.split("\n", 1)[-1]  # the first line is cut
                    log.seek(self.offset)
                    head = read_events(log.read(HEAD_BYTES).decode("utf-8", "replace").rsplit("\n", 1)[0])
                else:
                    head = Events()
        except OSError:
            return Judgement()  # nothing to read: the exit status decides
        if self.before is not None:
            turns = read_events(self.before()).turns_completed
            self.earlier = {"num_turns": turns} if turns else {}
        self.events = read_events(text)
        self.events.thread_id = self.events.thread_id or head.thread_id
        self._count_unfinished_turn()
        self.result = {**self.earlier, **figures(self.events, self.price)}  # its usage is the thread's total so far
        if not self.thread_kept:
            self.result.pop("session_id", None)
        if self.events.turns_completed and self.earlier.get("num_turns"):
            self.result["num_turns"] = self.earlier["num_turns"] + self.events.turns_completed
        return judge(self.events, code, self.now())

    def _count_unfinished_turn(self) -> None:
        """A turn that failed or was stopped spent what its model responses cost, which only the thread's rollout
        says: its totals, when they are past those of the last completed turn."""
        events = self.events
        if self.rollouts is None or not events.thread_id:
            return
        if not events.failed_after_last_turn and events.turns_started <= events.turns_completed:
            return
        spent = thread_spent(self.rollouts, events.thread_id, TOKEN_KEYS)
        if _tokens(spent) > _tokens(events.usage):
            events.usage = spent


def _tokens(usage: dict[str, int]) -> int:
    return usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
