"""The reading of ``codex exec --json`` output: recorded event lines, judged at an attempt's end with a fixed clock.

The lines are as Codex 0.169 writes them against a stand-in of the Responses API (see tests/codex_cli.py);
the usage-limit texts are the three forms the issue recorded.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agents.backends.codex_events import NO_MODEL_CALL, CodexOutput, read_events, usage_limit

ZONE = timezone(timedelta(hours=-5))  # a local zone that is not UTC: the times in the texts are local
NOW = datetime(2026, 12, 3, 15, 0, 30, tzinfo=ZONE)
THREAD = {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"}
TURN = {"type": "turn.started"}
USAGE = {
    "input_tokens": 1200,
    "cached_input_tokens": 200,
    "cache_write_input_tokens": 50,
    "output_tokens": 300,
    "reasoning_output_tokens": 120,
}
DONE = {"type": "turn.completed", "usage": USAGE}
WARNING = {
    "type": "item.completed",
    "item": {"id": "item_0", "type": "error", "message": "Model metadata for `m` not found"},
}
SHELL = {
    "type": "item.completed",
    "item": {
        "id": "item_1",
        "type": "command_execution",
        "command": "bash -lc 'touch made.txt'",
        "aggregated_output": "",
        "exit_code": 0,
        "status": "completed",
    },
}
ANSWER = {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message", "text": "Done.\nMade made.txt"}}
LIMIT_TEXT = "You\u2019ve hit your usage limit. Try again at 3:50 PM."


def failure(message: str) -> list[dict[str, Any]]:
    return [THREAD, TURN, {"type": "error", "message": message}, {"type": "turn.failed", "error": {"message": message}}]


def judged(tmp_path: Path, events: list[dict[str, Any]], code: int) -> tuple[CodexOutput, Any]:
    """The judgement of ``events`` written after a header and another attempt's output, as in a run's log."""
    log = tmp_path / "run.log"
    before = "=== run 1 attempt 1: codex\n" + json.dumps(failure("an earlier attempt")[2]) + "\n"
    header = "\n=== run 1 attempt 2: codex exec --json -\n"
    log.write_text(before + header + "stray print\n" + "".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    output = CodexOutput(log, len((before + header).encode()), now=lambda: NOW)
    return output, output.judge(code)


def test_a_completed_turn_succeeds_with_its_thread_tokens_and_last_words(tmp_path: Path) -> None:
    output, judgement = judged(tmp_path, [THREAD, TURN, WARNING, SHELL, ANSWER, DONE], 0)
    assert not judgement.failed and judgement.reason is None and judgement.usage_limit is None
    assert output.result == {"session_id": THREAD["thread_id"], "num_turns": 1, **USAGE}
    words = judgement.last_words
    assert words is not None
    assert words.tool == "shell: bash -lc 'touch made.txt'"
    assert words.text == "Made made.txt"
    assert words.result == "Done. Made made.txt"


def test_a_thread_codex_keeps_not_is_no_session_to_resume(tmp_path: Path) -> None:
    """``--ephemeral``: Codex keeps no rollout, so a retry or an answer that resumed its thread would fail."""
    log = tmp_path / "run.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in [THREAD, TURN, ANSWER, DONE]), encoding="utf-8")
    kept, ephemeral = CodexOutput(log, 0, now=lambda: NOW), CodexOutput(log, 0, now=lambda: NOW, thread_kept=False)
    assert not kept.judge(0).failed and not ephemeral.judge(0).failed
    assert kept.result["session_id"] == THREAD["thread_id"] and "session_id" not in ephemeral.result
    assert ephemeral.result["num_turns"] == 1


def test_a_failure_codex_says_only_on_its_standard_error_is_the_reason(tmp_path: Path) -> None:
    """Before any event: a resume of a thread that is gone (retried as any failure), a configuration Codex cannot read
    (no retry helps: permanent)."""
    for said, permanent in (
        ("Error: thread/resume failed: no rollout found for thread id t-1", False),
        ("Error loading config.toml: unknown variant `bogus`, expected one of `read-only`", True),
    ):
        log = tmp_path / "run.log"
        log.write_text(
            f"=== run 1 attempt 2: codex exec --json -\nReading prompt from stdin...\n{said}\n", encoding="utf-8"
        )
        judgement = CodexOutput(log, 0, now=lambda: NOW).judge(1)
        assert judgement.failed and judgement.reason == f"Codex failed: {said}" and judgement.permanent is permanent


def test_no_completed_turn_is_a_failure_whatever_the_exit_status(tmp_path: Path) -> None:
    _, judgement = judged(tmp_path, [THREAD, TURN, SHELL], 0)
    assert judgement.failed and judgement.reason == "Codex completed no turn"
    _, judgement = judged(tmp_path, [THREAD], 0)
    assert judgement.failed and judgement.reason == NO_MODEL_CALL


def test_a_failed_turn_gives_its_reason_in_one_line(tmp_path: Path) -> None:
    _, judgement = judged(tmp_path, failure("stream disconnected before completion:\n  idle timeout"), 1)
    assert judgement.failed and not judgement.permanent and judgement.usage_limit is None
    assert judgement.reason == "Codex failed: stream disconnected before completion: idle timeout"


def test_an_auth_failure_is_permanent(tmp_path: Path) -> None:
    message = "unexpected status 401 Unauthorized: Incorrect API key provided"
    _, judgement = judged(tmp_path, failure(message), 1)
    assert judgement.failed and judgement.permanent
    assert judgement.reason is not None and "codex login" in judgement.reason and "401" in judgement.reason


@pytest.mark.parametrize(
    "message",
    [
        "Quota exceeded. Check your plan and billing details.",
        "To use Codex with your ChatGPT plan, upgrade to Plus: https://openai.com/chatgpt/pricing.",
        "Your workspace is out of credits. Add credits to continue.",
        "You hit your spend cap for this workspace.",
    ],
)
def test_an_account_that_cannot_pay_is_permanent_as_a_claude_billing_error_is(tmp_path: Path, message: str) -> None:
    _, judgement = judged(tmp_path, failure(message), 1)
    assert judgement.failed and judgement.permanent and judgement.usage_limit is None
    assert judgement.reason == f"the OpenAI account cannot run it ({message}); see its plan, credits or spend limit"


def test_a_usage_limit_pauses_until_its_local_time(tmp_path: Path) -> None:
    _, judgement = judged(tmp_path, failure(LIMIT_TEXT), 1)
    assert judgement.failed and not judgement.permanent
    limit = judgement.usage_limit
    assert limit is not None
    assert limit.resets_at == datetime(2026, 12, 3, 15, 50, tzinfo=ZONE).timestamp()


@pytest.mark.parametrize(
    ("text", "resets"),
    [
        (LIMIT_TEXT, datetime(2026, 12, 3, 15, 50, tzinfo=ZONE)),
        (
            "You\u2019ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit "
            "https://chatgpt.com/settings/usage to purchase more credits or try again at 3:20 PM.",
            datetime(2026, 12, 3, 15, 20, tzinfo=ZONE),
        ),
        (
            "You\u2019ve hit your usage limit. Try again at Dec 4th, 2026 4:21 PM.",
            datetime(2026, 12, 4, 16, 21, tzinfo=ZONE),
        ),
        ("You've hit your usage limit. Try again at 3:00 PM.", NOW),  # this minute, shown rounded down: now
        ("You've hit your usage limit. Try again at 2:10 PM.", NOW),  # already past: probe now, not in a day
        ("You've hit your usage limit. Try again in 5 minutes.", NOW + timedelta(minutes=5)),
        ("You've hit your usage limit, try again in 2 hours", NOW + timedelta(hours=2)),
        ('{"error":{"type":"usage_limit_reached","resets_at":1796000000}}', datetime.fromtimestamp(1796000000, ZONE)),
        ("You've hit your usage limit.", None),
    ],
)
def test_the_usage_limit_texts(text: str, resets: datetime | None) -> None:
    limit = usage_limit(text, NOW)
    assert limit is not None
    assert limit.resets_at == (resets.timestamp() if resets else None)


def test_other_errors_are_no_usage_limit() -> None:
    assert usage_limit("stream disconnected before completion", NOW) is None


def test_an_error_after_the_last_turn_fails_the_attempt(tmp_path: Path) -> None:
    events = [THREAD, TURN, DONE, TURN, {"type": "turn.failed", "error": {"message": "the model refused"}}]
    _, judgement = judged(tmp_path, events, 1)
    assert judgement.failed and judgement.reason == "Codex failed: the model refused"


def test_a_signal_leaves_the_reason_to_the_stop(tmp_path: Path) -> None:
    _, judgement = judged(tmp_path, [THREAD, TURN, SHELL], -15)
    assert not judgement.failed and judgement.reason is None
    assert judgement.last_words is not None and judgement.last_words.tool is not None


def test_only_the_tail_of_a_long_output_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.agents.backends import codex_events

    monkeypatch.setattr(codex_events, "TAIL_BYTES", 4096)
    noise = [SHELL] * 200
    output, judgement = judged(tmp_path, [THREAD, TURN, *noise, ANSWER, DONE], 0)
    assert not judgement.failed
    assert output.result["session_id"] == THREAD["thread_id"]  # from the head, which the tail did not reach
    assert read_events(json.dumps(DONE)).turns_completed == 1


def test_errors_it_got_over_do_not_fail_a_completed_turn(tmp_path: Path) -> None:
    retry = {"type": "error", "message": "Reconnecting... 1/5 (stream disconnected before completion)"}
    _, judgement = judged(tmp_path, [THREAD, TURN, retry, ANSWER, DONE], 0)
    assert not judgement.failed and judgement.reason is None


def test_a_rejected_key_after_its_retries_is_permanent(tmp_path: Path) -> None:
    said = "unexpected status 401 Unauthorized: Incorrect API key provided, url: http://127.0.0.1:1/v1/responses"
    retries = [{"type": "error", "message": f"Reconnecting... {n}/5 ({said})"} for n in range(1, 6)]
    events = [
        THREAD,
        TURN,
        *retries,
        {"type": "error", "message": said},
        {"type": "turn.failed", "error": {"message": said}},
    ]
    _, judgement = judged(tmp_path, events, 1)
    assert judgement.failed and judgement.permanent and judgement.usage_limit is None


def test_a_price_makes_an_estimated_cost(tmp_path: Path) -> None:
    from orchestrator.config.codex import TokenPrice

    log = tmp_path / "run.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in (THREAD, TURN, ANSWER, DONE)), encoding="utf-8")
    output = CodexOutput(log, 0, now=lambda: NOW, price=TokenPrice(input=1.25, cached_input=0.125, output=10.0))
    assert not output.judge(0).failed
    # 1000 fresh input tokens at $1.25, 200 cached at $0.125 and 300 output at $10, per million
    assert output.result["cost_usd"] == pytest.approx((1000 * 1.25 + 200 * 0.125 + 300 * 10.0) / 1e6)
    assert output.result["cost_estimated"] is True
    unpriced = CodexOutput(log, 0, now=lambda: NOW)
    unpriced.judge(0)
    assert "cost_usd" not in unpriced.result


def rollout(home: Path, thread: str, *totals: dict[str, int], day: str = "2026/12/03") -> Path:
    """A rollout file as Codex 0.169 writes one: a ``token_count`` event with the thread's totals after each model
    response, among the thread's other records."""
    path = home / "sessions" / day / f"rollout-2026-12-03T15-00-00-{thread}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"type": "session_meta", "payload": {"id": thread}}]
    for total in totals:
        count = {"type": "token_count", "info": {"total_token_usage": {**total, "total_tokens": 1}}}
        lines += [
            {"type": "response_item", "payload": {"type": "function_call"}},
            {"type": "event_msg", "payload": count},
        ]
    lines.append({"type": "event_msg", "payload": {"type": "task_complete"}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_a_turn_that_failed_counts_what_its_thread_spent_by_codexs_rollout(tmp_path: Path) -> None:
    from orchestrator.config.codex import TokenPrice

    home, thread = tmp_path / "codex-home", str(THREAD["thread_id"])
    first = {**USAGE, "input_tokens": 600, "output_tokens": 100}
    rollout(home, thread, first, USAGE)
    rollout(home, "0199a213-0000-7800-8aa1-bbab2a035a53", {**USAGE, "input_tokens": 99999})  # another thread's
    log = tmp_path / "run.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in (THREAD, TURN, SHELL, *failure("500")[2:])), encoding="utf-8")
    price = TokenPrice(input=1.25, cached_input=0.125, output=10.0)
    output = CodexOutput(log, 0, now=lambda: NOW, price=price, rollouts=home)
    assert output.judge(1).failed
    assert {k: output.result[k] for k in USAGE} == USAGE  # the thread's last totals, not the other thread's
    assert output.result["cost_usd"] == pytest.approx((1000 * 1.25 + 200 * 0.125 + 300 * 10.0) / 1e6)
    assert "num_turns" not in output.result  # no turn completed

    stopped = CodexOutput(log, 0, now=lambda: NOW, rollouts=home)
    log.write_text("".join(json.dumps(e) + "\n" for e in (THREAD, TURN, SHELL)), encoding="utf-8")
    stopped.judge(-15)  # cancelled or timed out in the middle of its turn: what it spent counts the same
    assert stopped.result["input_tokens"] == 1200 and stopped.result["output_tokens"] == 300


def test_a_completed_turn_and_a_thread_codex_keeps_no_file_of_read_no_rollout(tmp_path: Path) -> None:
    home, thread = tmp_path / "codex-home", str(THREAD["thread_id"])
    rollout(home, thread, {**USAGE, "input_tokens": 5000})  # a later turn's count: not this attempt's to take
    log = tmp_path / "run.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in (THREAD, TURN, ANSWER, DONE)), encoding="utf-8")
    done = CodexOutput(log, 0, now=lambda: NOW, rollouts=home)
    assert not done.judge(0).failed and done.result["input_tokens"] == 1200  # the stream's own, when it says them
    log.write_text("".join(json.dumps(e) + "\n" for e in (THREAD, TURN, *failure("500")[2:])), encoding="utf-8")
    ephemeral = CodexOutput(log, 0, now=lambda: NOW, rollouts=home, thread_kept=False)
    ephemeral.judge(1)
    assert "input_tokens" not in ephemeral.result
    nowhere = CodexOutput(log, 0, now=lambda: NOW, rollouts=tmp_path / "no-such-home")
    nowhere.judge(1)  # a thread run on another machine (Ray), or whose file is gone: nothing, as before
    assert "input_tokens" not in nowhere.result


def test_a_rollout_that_cannot_be_read_leaves_the_verdict_as_the_events_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    home, thread = tmp_path / "codex-home", str(THREAD["thread_id"])
    path = rollout(home, thread, USAGE)
    lines = path.read_text(encoding="utf-8").splitlines()
    empty = {"type": "event_msg", "payload": {"type": "token_count", "info": None}}  # Codex writes such counts too
    path.write_text("\n".join([*lines[:-1], json.dumps(empty), lines[-1]]) + "\n", encoding="utf-8")
    log = tmp_path / "run.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in (THREAD, TURN, *failure(LIMIT_TEXT)[2:])), encoding="utf-8")
    counted = CodexOutput(log, 0, now=lambda: NOW, rollouts=home)
    assert counted.judge(1).usage_limit is not None and counted.result["input_tokens"] == 1200

    def broken(self: Path, pattern: str) -> Any:
        raise OSError(5, "Input/output error", str(self))  # a home on a network disk that failed under us

    monkeypatch.setattr(Path, "glob", broken)
    unread = CodexOutput(log, 0, now=lambda: NOW, rollouts=home)
    judgement = unread.judge(1)
    assert judgement.usage_limit is not None, judgement  # still a usage limit, not an error reading the report
    assert unread.result["session_id"] == thread and "input_tokens" not in unread.result
    monkeypatch.undo()

    path.unlink()
    os.mkfifo(path)  # a pipe in its place: not read, so nothing waits on a writer that never comes
    fifo = CodexOutput(log, 0, now=lambda: NOW, rollouts=home)
    assert fifo.judge(1).usage_limit is not None and "input_tokens" not in fifo.result


def test_orchestrator_logs_renders_codex_events_for_a_person() -> None:
    from orchestrator.tools.logs import render

    text = "=== run 1 attempt 1: codex exec --json -\n" + "".join(
        json.dumps(e) + "\n" for e in (THREAD, TURN, WARNING, SHELL, ANSWER, DONE, *failure("the model refused")[2:])
    )
    assert render(text) == [
        "=== run 1 attempt 1: codex exec --json -",
        f"thread {THREAD['thread_id']}",
        "warning: Model metadata for `m` not found",
        "→ shell: bash -lc 'touch made.txt'",
        "← exit 0: ",
        "assistant: Done. Made made.txt",
        "turn completed: 1200 input, 200 cached input, 50 cache write input, 300 output, 120 reasoning output tokens",
        "error: the model refused",
        "turn failed: the model refused",
    ]
