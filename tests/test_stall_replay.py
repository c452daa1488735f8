"""Stalls on the injected clock (``tests/replay.py``): an attempt that writes nothing for its ``stall_timeout`` is
stopped by the kill ladder and retried; output moves the deadline; roles that may rightly be silent are left be."""

from __future__ import annotations

import asyncio
from pathlib import Path

from replay import Replay

REASON = "stalled: no output for 10m (the CLI may be waiting for a prompt it cannot show)"


def test_an_sdk_attempt_silent_for_ten_minutes_is_stopped_and_retried(tmp_path: Path) -> None:
    async def scenario() -> None:
        r = Replay(tmp_path, {"writer": {"backend": "sdk", "grace": "3s", "retry": {"max": 1, "backoff": ["1s"]}}})
        await r.drop("writer", "S-1.md")
        agent = r.agent("S-1")
        agent.output_at = r.clock.now().timestamp()
        await r.advance(5 * 60)
        agent.output_at = r.clock.now().timestamp()  # it wrote something: ten minutes from here
        await r.advance(10 * 60 - 1)
        assert r.state("S-1") == "running" and r.spawner.stops == []
        await r.advance(1)
        assert r.spawner.stops == [(agent.spec.run_id, 3.0, False)]
        assert f"S-1 {REASON}; stopping it" in r.console.text
        assert f"attempt 1 failed: {REASON}" in r.console.text
        assert r.state("S-1") == "retry_wait"
        await r.advance(1)
        assert r.agent("S-1").spec.attempt == 2
        r.close()

    asyncio.run(scenario())


def test_stall_timeout_is_a_role_key_and_off_turns_it_off(tmp_path: Path) -> None:
    async def scenario() -> None:
        r = Replay(
            tmp_path,
            {
                "quick": {"backend": "sdk", "stall_timeout": "90s"},
                "patient": {"backend": "sdk", "stall_timeout": "off", "timeout": "2h"},
                "plain": {"timeout": "2h"},  # a command that is not stream-json Claude: off by default
                "claude": {"command": ["claude", "-p", "--output-format", "stream-json"], "timeout": "2h"},
            },
        )
        for role in ("quick", "patient", "plain", "claude"):
            await r.drop(role, f"{role}.md")
            r.agent(role).output_at = r.clock.now().timestamp()
        await r.advance(90)
        assert [s[0] for s in r.spawner.stops] == [r.agent("quick").spec.run_id]
        assert "stalled: no output for 90s" in r.console.text
        await r.advance(60 * 60)
        stopped = {s[0] for s in r.spawner.stops}
        assert r.agent("claude").spec.run_id in stopped  # stream-json Claude: 10m by default
        assert r.agent("patient").spec.run_id not in stopped and r.agent("plain").spec.run_id not in stopped
        r.close()

    asyncio.run(scenario())
