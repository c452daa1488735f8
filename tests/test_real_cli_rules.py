"""The rules behind the real-CLI behaviours, in process and fast: reasons, amounts, the fuse, tells in a turn.

The same behaviours run end to end against the real CLI in ``test_real_cli.py``; here the session loop
is replayed with a stand-in client, so each rule is shown without a process or real waiting.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agents.claude_cli import explain
from orchestrator.agents.claude_errors import classify, last_meaningful_line
from orchestrator.agents.sdk.fuse import Fuse
from orchestrator.agents.sdk.phases import ControlLine, SdkMessage
from orchestrator.agents.sdk.protocol import RunnerSpec
from orchestrator.agents.sdk.reasons import usd
from orchestrator.agents.sdk.session import Session
from orchestrator.agents.sdk.transcript import Output


@pytest.mark.parametrize(
    ("amount", "text"),
    [(0.1, "$0.10"), (0.25, "$0.25"), (0.001, "$0.001"), (0.0064123, "$0.006412"), (12.3456, "$12.35"), (0, "$0.00")],
)
def test_amounts_have_four_significant_figures_and_at_least_cents(amount: float, text: str) -> None:
    assert usd(amount) == text


@pytest.mark.parametrize(
    ("output", "status", "starts", "permanent"),
    [
        ("Not logged in · Please run /login", None, "Claude Code is not logged in", True),
        ("Invalid API key · Fix external API key", None, "the Anthropic API rejected the API key", True),
        ("anything", 401, "the Anthropic API rejected the API key", True),
        ("API Error: 529 Overloaded. This is a server-side issue", None, "the Anthropic API is overloaded", False),
        ("API Error: Request rejected (429) · rate limit", None, "rate limited by the Anthropic API", False),
        (
            "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons",
            None,
            "Claude Code refused the permission mode",
            True,
        ),
    ],
)
def test_each_known_cli_failure_has_its_own_reason_and_permanence(
    output: str, status: int | None, starts: str, permanent: bool
) -> None:
    problem = classify(output, None, status)
    assert problem is not None and problem.reason.startswith(starts), problem
    assert problem.permanent is permanent
    assert "set ANTHROPIC_API_KEY" not in problem.reason or starts.startswith("Claude Code is not logged in")


@pytest.mark.parametrize(
    ("output", "kind", "resets_at"),
    [
        ("API Error: Request rejected (429) · rate limit", "rate_limit", None),
        ("Claude AI usage limit reached|1767225600", "usage_limit", 1767225600.0),
        ("5-hour limit reached ∙ resets 2pm", "five_hour", None),
        ("Weekly limit reached ∙ resets Mon 9am", "weekly", None),
    ],
)
def test_a_command_roles_usage_limit_is_read_from_its_output(
    tmp_path: Path, output: str, kind: str, resets_at: float | None
) -> None:
    log = tmp_path / "run.log"
    log.write_text(f"=== run 1 attempt 1: claude -p\n{output}\n", encoding="utf-8")
    problem = explain(log.read_text(encoding="utf-8"), 1)
    assert problem is not None and problem.limit_kind == kind and problem.resets_at == resets_at, problem
    assert not problem.permanent
    assert classify("Invalid API key · Fix external API key").limit_kind is None  # type: ignore[union-attr]


def test_the_last_meaningful_line_skips_headers_and_blank_lines() -> None:
    log = "\n=== run 3 attempt 1: claude -p\nworking\nInvalid API key · Fix external API key\n\n"
    assert last_meaningful_line(log) == "Invalid API key · Fix external API key"
    assert last_meaningful_line("\n=== run 3 attempt 1: claude -p\n") is None


def start(message_id: str, model: str, input_tokens: int) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {"id": message_id, "model": model, "usage": {"input_tokens": input_tokens, "output_tokens": 1}},
    }


def text(chunk: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": chunk}}


def test_the_fuse_estimates_a_streaming_call_and_learns_prices_from_results() -> None:
    fuse = Fuse()
    fuse.observe(start("m1", "claude-sonnet-4-5", 1000))
    assert fuse.estimate() == pytest.approx((1000 * 3 + 1 * 15) / 1e6)
    fuse.observe(text("x" * 300))  # about 100 tokens
    assert fuse.estimate() == pytest.approx((1000 * 3 + 100 * 15) / 1e6)
    fuse.observe({"type": "message_delta", "usage": {"output_tokens": 250}})  # the stream's own count wins if higher
    assert fuse.estimate() == pytest.approx((1000 * 3 + 250 * 15) / 1e6)

    class Result:
        total_cost_usd = 0.05
        model_usage = {"claude-x": {"inputTokens": 1000, "outputTokens": 200, "costUSD": 0.008}}

    fuse.result(Result())
    assert fuse.estimate() == 0.05  # the reported total replaces the estimate
    fuse.observe(start("m2", "claude-x", 1000))  # priced as learned: $4/M in, $20/M out
    assert fuse.estimate() == pytest.approx(0.05 + (1000 * 4 + 1 * 20) / 1e6)
    assert Fuse((1.0, 2.0)).price("claude-x") == (1.0, 2.0)  # price_per_mtok overrides
    assert Fuse().price("claude-unheard-of") == (15.0, 75.0)  # unknown: the highest, so it blows early


def test_a_resumed_sessions_fuse_starts_from_what_the_session_had_spent() -> None:
    """A session an answered run resumes reports its earlier runs' spend again (``carried_usd``): the estimate of its
    first call is on top of it, as the CLI's totals will be, and so is the cap it is held to."""
    fuse = Fuse(spent=0.2)
    fuse.observe(start("m1", "claude-sonnet-4-5", 1000))
    assert fuse.estimate() == pytest.approx(0.2 + (1000 * 3 + 1 * 15) / 1e6)
    assert RunnerSpec(prompt="p", per_run_usd=0.1, carried_usd=0.2).session_cap == 0.3  # 0.1 + 0.2, rounded
    assert RunnerSpec(prompt="p", per_run_usd=0.1).session_cap == 0.1
    assert RunnerSpec(prompt="p", carried_usd=0.2).session_cap is None


class UuidClient:
    """The SDK client as the session sees it: messages go as dicts with a uuid."""

    def __init__(self, options: Any) -> None:
        self.sent: list[dict[str, Any]] = []
        self.interrupts = 0

    async def connect(self) -> None:
        pass

    async def query(self, prompt: Any) -> None:
        async for message in prompt:
            self.sent.append(message)

    async def interrupt(self) -> None:
        self.interrupts += 1

    async def receive_messages(self) -> Any:
        await asyncio.Event().wait()
        yield

    async def disconnect(self) -> None:
        pass


class Collected(Output):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def event(self, event: Any) -> None:
        self.events.append(event.wire())

    def note(self, text: str) -> None:
        pass


def result(cost: float = 0.01, uuids: list[str] | None = None, subtype: str = "success") -> SdkMessage:
    from claude_agent_sdk import ResultMessage

    message = ResultMessage(
        subtype=subtype,
        duration_ms=1,
        duration_api_ms=1,
        is_error=subtype != "success",
        num_turns=1,
        session_id="s",
        total_cost_usd=cost,
        user_message_uuids=uuids,
    )
    return SdkMessage(message)


def tool_use() -> SdkMessage:
    from claude_agent_sdk import AssistantMessage, ToolUseBlock

    block = ToolUseBlock(id="t1", name="Bash", input={"command": "make"})
    return SdkMessage(AssistantMessage(content=[block], model="m", parent_tool_use_id=None))


async def settle(condition: Any) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the session did not get there")


def test_a_tell_during_a_tool_is_written_into_the_running_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    import claude_agent_sdk

    monkeypatch.setattr(claude_agent_sdk, "ClaudeSDKClient", UuidClient)
    out = Collected()

    async def replay() -> tuple[int, UuidClient]:
        events: asyncio.Queue[Any] = asyncio.Queue()
        session = Session(RunnerSpec(prompt="p"), None, events, out)
        run = asyncio.ensure_future(session.run())
        await settle(lambda: session.client is not None and session.client.sent)
        events.put_nowait(tool_use())
        events.put_nowait(ControlLine('{"op": "tell", "text": "also this"}'))
        await settle(lambda: len(session.client.sent) == 2)  # written while the tool runs, not after the turn
        assert [e for e in out.events if e["event"] == "tells"] == [{"event": "tells", "pending": 1}]
        both = [m["uuid"] for m in session.client.sent]
        events.put_nowait(result(uuids=both))  # the CLI answered both within the one turn
        return await asyncio.wait_for(run, 5.0), session.client

    code, client = asyncio.run(replay())
    assert code == 0
    assert [m["message"]["content"] for m in client.sent] == ["p", "also this"]
    assert [e for e in out.events if e["event"] == "tells"][-1] == {"event": "tells", "pending": 0}
    assert len([e for e in out.events if e["event"] == "result"]) == 1


def test_a_result_that_leaves_a_tell_unanswered_waits_for_its_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    import claude_agent_sdk

    monkeypatch.setattr(claude_agent_sdk, "ClaudeSDKClient", UuidClient)
    out = Collected()

    async def replay() -> int:
        events: asyncio.Queue[Any] = asyncio.Queue()
        session = Session(RunnerSpec(prompt="p"), None, events, out)
        run = asyncio.ensure_future(session.run())
        await settle(lambda: session.client is not None and session.client.sent)
        events.put_nowait(tool_use())
        events.put_nowait(ControlLine('{"op": "tell", "text": "late"}'))
        await settle(lambda: len(session.client.sent) == 2)
        prompt, tell = (m["uuid"] for m in session.client.sent)
        events.put_nowait(result(uuids=[prompt]))  # told too late for the turn's last call
        await asyncio.sleep(0.05)
        assert not run.done(), "the session must wait for the CLI's turn of the tell"
        events.put_nowait(result(uuids=[tell]))
        return await asyncio.wait_for(run, 5.0)

    assert asyncio.run(replay()) == 0


def test_the_fuse_interrupts_a_turn_whose_estimate_passes_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    import claude_agent_sdk
    from claude_agent_sdk import StreamEvent

    monkeypatch.setattr(claude_agent_sdk, "ClaudeSDKClient", UuidClient)
    out = Collected()

    def streamed(event: dict[str, Any]) -> SdkMessage:
        return SdkMessage(StreamEvent(uuid="u", session_id="s", event=event, parent_tool_use_id=None))

    async def replay() -> tuple[int, UuidClient]:
        events: asyncio.Queue[Any] = asyncio.Queue()
        session = Session(RunnerSpec(prompt="p", per_run_usd=0.001), None, events, out)
        run = asyncio.ensure_future(session.run())
        await settle(lambda: session.client is not None and session.client.sent)
        events.put_nowait(streamed(start("m1", "claude-opus-5-5", 10)))
        for _ in range(5):
            events.put_nowait(streamed(text("slow " * 10)))  # 50 characters: about 17 tokens, $0.00033 each
        await settle(lambda: session.client.interrupts == 1)
        events.put_nowait(result(cost=0.0, subtype="error_during_execution"))
        return await asyncio.wait_for(run, 5.0), session.client

    code, client = asyncio.run(replay())
    assert code == 4 and client.interrupts == 1
    failure = next(e for e in out.events if e["event"] == "failure")
    assert failure["budget"] is True
    assert failure["reason"].startswith("per-run budget of $0.001 exceeded: the turn was interrupted at about $0.001")
    costs = [e["usd"] for e in out.events if e["event"] == "cost"]
    live, recorded = costs[:-1], costs[-1]
    assert live == sorted(live) and live[0] < 0.001 < live[-1]  # the running estimate was shown as it grew
    assert recorded == 0.0  # then the CLI's own figure, from the result


def test_api_retries_show_as_activity(monkeypatch: pytest.MonkeyPatch) -> None:
    import claude_agent_sdk
    from claude_agent_sdk import SystemMessage

    monkeypatch.setattr(claude_agent_sdk, "ClaudeSDKClient", UuidClient)
    out = Collected()
    retry = {"type": "system", "subtype": "api_retry", "attempt": 2, "max_retries": 2, "error_status": 529}

    async def replay() -> int:
        events: asyncio.Queue[Any] = asyncio.Queue()
        events.put_nowait(SdkMessage(SystemMessage(subtype="api_retry", data=retry)))
        events.put_nowait(result())
        return await asyncio.wait_for(Session(RunnerSpec(prompt="p"), None, events, out).run(), 5.0)

    assert asyncio.run(replay()) == 0
    assert {"event": "activity", "text": "API retry 2/2 after 529"} in out.events
