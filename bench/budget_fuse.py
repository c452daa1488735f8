"""The ``fuse`` scenario: how far past a per-run budget one slow model call gets before the live fuse stops it.

The real Claude Code CLI that claude-agent-sdk bundles runs an ``sdk`` role with
``budget: {per_run_usd: 0.001}`` against the stand-in Messages API of the tests
(``tests/messages_api.py``, on 127.0.0.1; nothing reaches Anthropic). Each memo
asks for one answer of 400 tokens streamed over 40 s ($0.008 at the CLI's
$20/M output price). The spend is what the stand-in really streamed before the
CLI hung up (input and output tokens at the CLI's prices), never the
orchestrator's own estimate. The baseline is the whole call: what a fuse that
acts only at the end of a call (the CLI's own ``--max-budget-usd``) lets through.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.common import Outcome, Row
from bench.harness import BenchError, Orchestrator, Stats, wait_for
from tests.messages_api import MessagesApi

HERE = Path(__file__).resolve().parent
CAP = 0.001
PRICE_IN, PRICE_OUT = 4.0, 20.0  # $/M tokens the bundled CLI charges for its default model
WHOLE_CALL = (10 * PRICE_IN + 400 * PRICE_OUT) / 1e6


def fuse(ctx):  # type: ignore[no-untyped-def]  # bench/ is outside mypy's files, like its siblings
    """One slow call at a time, ``samples`` times; the spend of each, as a multiple of the cap."""

    out = Outcome("fuse")
    try:
        import claude_agent_sdk
    except ImportError:
        out.notes.append("skipped: claude-agent-sdk is not installed")
        return out
    bundled = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    if not bundled.is_file():
        out.notes.append("skipped: this claude-agent-sdk bundles no CLI")
        return out
    samples = 1 if ctx.sizes.latency_memos < 100 else 5
    project = ctx.project("fuse")
    home = project.root / "home"
    home.mkdir(parents=True, exist_ok=True)
    api = MessagesApi(project.root / "api.jsonl", cwd=project.root)
    try:
        project.configure(
            {
                "writer": {
                    "backend": "sdk",
                    "budget": {"per_run_usd": CAP},
                    "permission_mode": "acceptEdits",
                    "grace": "5s",
                }
            }
        )
        env = {
            "ANTHROPIC_BASE_URL": api.url,
            "ANTHROPIC_API_KEY": "test",
            "HOME": str(home),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
        orch = Orchestrator(project, env_extra=env).start()
        orch.wait_ready()
        ctx.say(f"fuse: {samples} slow call(s) against a per-run budget of ${CAP}")
        ratios, seconds = [], []
        for i in range(samples):
            name = f"F-{i}.md"
            inbox = project.folder("writer", "inbox")
            (inbox / f".{name}.tmp").write_text(f"[slow:40] write at length ({i})\n", encoding="utf-8")
            t0 = time.monotonic()
            (inbox / f".{name}.tmp").rename(inbox / name)
            failed = project.folder("writer", "failed")
            done = failed / name
            wait_for(done.exists, 90, f"{name} in failed/")
            seconds.append(time.monotonic() - t0)
            streams = wait_for(lambda: [r for r in api.requests() if "streamed" in r], 10, "the stand-in's record")
            last = streams[-1]
            if not last["aborted"]:
                raise BenchError(f"{name}: the call was not cut off: {last}")
            spent = (last["input_tokens"] * PRICE_IN + last["streamed"] * PRICE_OUT) / 1e6
            ratios.append(spent / CAP)
        orch.stop()
    finally:
        api.close()
    st = Stats.of(ratios)
    out.rows.append(
        Row(
            "fuse",
            f"one slow call, per_run_usd ${CAP}: spend / cap, worst of {samples}",
            st.high,
            "x",
            WHOLE_CALL / CAP,
            "the whole call: a check at the end of the call",
            "<= 1.25x",
            st.high <= 1.25,
            3,
        )
    )
    out.details.append(f"spend / cap per call: {st.line('x', 3)}")
    out.details.append(f"memo renamed in -> memo in failed/ (s): {Stats.of(seconds).line('s', 2)}")
    return out
