"""Claude's stream-json result judged beyond the exit status (``orchestrator/agents/claude_stream.py``), on the
lines the real CLI 2.1 writes (cut to the fields read)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.agents.claude_stream import NO_MODEL_CALL, TAIL_BYTES, judge, last_words, read_end, read_stream
from orchestrator.agents.sdk.follow import SdkFollow
from orchestrator.agents.sdk.reasons import result_limit
from orchestrator.core.agent import LastWords

INIT = {"type": "system", "subtype": "init", "session_id": "s-1"}
CALL = {"type": "assistant", "message": {"content": [{"type": "text", "text": "done"}]}, "session_id": "s-1"}


def result(**fields: Any) -> dict[str, Any]:
    return {"type": "result", "subtype": "success", "is_error": False, "num_turns": 1, "session_id": "s-1", **fields}


def text(*events: dict[str, Any]) -> str:
    return "\n=== run 1 attempt 1: claude -p\n" + "".join(json.dumps(e) + "\n" for e in events)


def test_an_error_result_fails_the_run_whatever_the_exit_status() -> None:
    said = result(is_error=True, subtype="success", result="API Error: 529 Overloaded")
    verdict = judge(read_stream(text(INIT, CALL, said)), 0, "fail")
    assert (
        verdict.failed and verdict.reason is not None and verdict.reason.startswith("the Anthropic API is overloaded")
    )


def test_an_error_result_is_known_by_its_result_when_its_errors_say_something_else() -> None:
    said = result(is_error=True, subtype="error_during_execution", errors=["tool failed"], result="Not logged in")
    verdict = judge(read_stream(text(INIT, CALL, said)), 1, "fail")
    assert verdict.failed and verdict.permanent
    assert verdict.reason is not None and verdict.reason.startswith("Claude Code is not logged in (Not logged in)")
    plain = judge(read_stream(text(INIT, CALL, {**said, "result": "something else"})), 1, "fail")
    assert not plain.permanent and plain.reason == "Claude Code reported an error (error_during_execution): tool failed"


def test_a_run_that_made_no_model_call_fails() -> None:
    verdict = judge(read_stream(text(INIT, result(num_turns=0))), 0, "fail")
    assert verdict.failed and verdict.reason == NO_MODEL_CALL


def test_a_rate_limit_is_read_as_a_usage_limit() -> None:
    limit = {"status": "rejected", "resetsAt": 1_800_000_000, "rateLimitType": "five_hour"}
    event = {"type": "rate_limit_event", "rate_limit_info": limit, "session_id": "s-1", "uuid": "u"}
    verdict = judge(read_stream(text(INIT, event, CALL, result(is_error=True, api_error_status=429))), 1, "fail")
    assert verdict.usage_limit is not None
    assert (verdict.usage_limit.kind, verdict.usage_limit.resets_at) == ("five_hour", 1_800_000_000.0)
    bare = judge(read_stream(text(INIT, CALL, result(is_error=True, api_error_status=429, result="x"))), 1, "fail")
    assert bare.usage_limit is not None and bare.usage_limit.kind == "rate_limit" and bare.usage_limit.resets_at is None


def test_a_429_names_the_same_limit_in_a_stream_json_run_and_an_sdk_session() -> None:
    """Both backends read a 429 result's words the same way: a weekly limit is "weekly" in the pause line; a 429
    whose words name no limit is a plain "rate_limit"."""
    words = "Claude AI usage limit reached: your weekly limit will reset on Monday"
    fields = {"is_error": True, "api_error_status": 429, "result": words}
    stream = judge(read_stream(text(INIT, CALL, result(**fields))), 1, "fail")
    assert stream.usage_limit is not None and stream.usage_limit.kind == "weekly"
    assert result_limit({"errors": None, **fields}, None, None) == ("weekly", None)
    plain = {"is_error": True, "api_error_status": 429, "result": "x"}
    assert result_limit(plain, None, None) == ("rate_limit", None)
    said = {"is_error": True, "api_error_status": 429, "result": "Claude AI usage limit reached|1767225600"}
    stream = judge(read_stream(text(INIT, CALL, result(**said))), 1, "fail")
    assert stream.usage_limit is not None and stream.usage_limit.resets_at == 1767225600.0  # the reset the CLI said
    assert result_limit(said, None, None) == ("usage_limit", 1767225600.0)


def test_denials_are_listed_a_line_each_cut() -> None:
    denials = [
        {"tool_name": "Bash", "tool_input": {"command": "rm -rf build\n" + "x" * 400}},
        {"tool_name": "Write", "tool_input": {"file_path": "/etc/passwd", "content": "no"}},
    ]
    verdict = judge(read_stream(text(INIT, CALL, result(permission_denials=denials))), 0, "fail")
    assert verdict.failed and verdict.permanent and verdict.reason is not None
    assert "2 tool calls refused by the permissions: Bash: rm -rf build x" in verdict.reason
    assert "…; Write: /etc/passwd;" in verdict.reason and "\n" not in verdict.reason
    warned = judge(read_stream(text(INIT, CALL, result(permission_denials=denials))), 0, "warn")
    assert not warned.failed and warned.warnings and "Write: /etc/passwd" in warned.warnings[0]


def test_a_clean_result_is_a_success() -> None:
    assert not judge(read_stream(text(INIT, CALL, result(permission_denials=[]))), 0, "fail").failed


def test_background_work_still_live_at_the_end_is_a_warning() -> None:
    turn = {"type": "system", "subtype": "turn_duration", "pending_background_agent_count": 2, "session_id": "s-1"}
    verdict = judge(read_stream(text(INIT, CALL, turn, result())), 0, "fail")
    assert not verdict.failed
    assert verdict.warnings and verdict.warnings[0].startswith("2 background task(s) were still running"), verdict


# ---------------------------------------------------------------- the end read from the output's tail
def tool(command: str) -> dict[str, Any]:
    block = {"type": "tool_use", "name": "Bash", "input": {"command": command}}
    return {"type": "assistant", "message": {"content": [{"type": "text", "text": "a\nlast line"}, block]}}


def write(path: Path, *parts: str) -> int:
    """The log: ``parts`` one after the other; the offset where the last part starts."""
    before = "".join(parts[:-1]).encode()
    path.write_bytes(before + parts[-1].encode())
    return len(before)


def test_a_long_stream_is_read_from_its_tail_its_init_from_its_start(tmp_path: Path) -> None:
    filler = json.dumps({"type": "user", "message": {"content": "x" * 1000}}) + "\n"
    log = tmp_path / "run.log"
    body = text(INIT, CALL) + filler * 3000 + "".join(json.dumps(e) + "\n" for e in (tool("ls -l"), result()))
    offset = write(log, "an earlier attempt's output\n", body)
    stream = read_end(log, offset)
    assert stream.truncated and stream.init == INIT and stream.result == result()
    assert stream.model_calls == 1, "only the tail's calls are counted"
    verdict = judge(stream, 0, "fail")
    assert not verdict.failed
    assert verdict.last_words == LastWords("Bash: ls -l", "last line", None)


def test_a_result_longer_than_the_first_window_is_still_found(tmp_path: Path) -> None:
    said = "y" * (TAIL_BYTES + 10)
    log = tmp_path / "run.log"
    write(log, text(INIT, CALL, result(result=said)))
    stream = read_end(log)
    assert stream.result is not None and stream.result["result"] == said
    assert last_words(stream).result == said


def test_no_model_call_is_judged_on_a_whole_stream_only(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    write(log, text(INIT) + json.dumps({"type": "user", "message": {"content": "z" * 100}}) + "\n" * 2)
    whole = read_end(log)
    assert whole.result is None and not whole.truncated
    assert judge(whole, 0, "fail").reason == NO_MODEL_CALL


def test_an_sdk_sessions_last_words_come_from_its_transcripts_tail(tmp_path: Path) -> None:
    transcript = tmp_path / "transcript.jsonl"
    lines = [
        {"type": "prompt", "text": "do it"},
        {"type": "assistant", "content": [{"type": "tool_use", "name": "Read", "input": {"file_path": "a.py"}}]},
        {"type": "assistant", "content": [{"type": "text", "text": "Found it.\nAll done."}]},
        {"type": "result", "result": "Fixed a.py."},
    ]
    transcript.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    follow = SdkFollow(1, transcript, tmp_path / "run.log", carrier=None)  # type: ignore[arg-type]
    assert follow.last_words() == LastWords("Read: a.py", "All done.", "Fixed a.py.")
    assert SdkFollow(2, tmp_path / "none.jsonl", tmp_path / "run.log", None).last_words() == LastWords()  # type: ignore[arg-type]


def test_the_last_tool_use_is_looked_for_further_back_than_the_first_window(tmp_path: Path) -> None:
    filler = json.dumps({"type": "user", "message": {"content": "x" * 1000}}) + "\n"
    log = tmp_path / "run.log"
    write(log, text(INIT, tool("make test")) + filler * 300 + text(CALL, result(result="Tested.")))
    words = last_words(read_end(log))
    assert words == LastWords("Bash: make test", "done", "Tested.")
