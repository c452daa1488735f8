"""Nothing slow on the loop: the real supervisor loop, with asyncio's slow-callback report at 50 ms, through the end
of a Claude run whose stream-json output is tens of megabytes."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

from harness import write_team
from orchestrator.compose import build_supervisor
from orchestrator.config import load_config
from orchestrator.console import Console

BIG_STREAM = Path(__file__).parent / "agents" / "big_stream.py"
SLOW = 0.05  # seconds: a callback that holds the loop longer is reported


class SlowCallbacks(logging.Handler):
    """The asyncio logger's ``Executing <handle> took N seconds`` reports, with when each came."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reports: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith("Executing ") and " took " in text:
            self.reports.append((time.monotonic(), text))


def test_a_big_stream_json_end_holds_the_loop_for_no_callback_over_50_ms(tmp_path: Path) -> None:
    claude = tmp_path / "bin" / "claude"  # named claude: its output is read as Claude's
    claude.parent.mkdir()
    claude.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{BIG_STREAM}" "$@"\n', encoding="utf-8")
    claude.chmod(0o755)
    command = [str(claude), "-p", "--output-format", "stream-json", "--mb", "40"]
    write_team(tmp_path, {"big": {"command": command}}, {"retry": {"max": 0}}, lambda _name: "$memo\n")
    inbox = tmp_path / "memo" / "big" / "inbox"
    inbox.mkdir(parents=True)
    memo = inbox / "B-1.md"
    memo.write_text("---\nid: B-1\n---\nread it all\n", encoding="utf-8")
    old = time.time() - 60
    os.utime(memo, (old, old))  # waiting since before the start: its writer is long gone
    config = load_config(tmp_path)
    console = Console(config.state_dir / "orchestrator.log", live=False)
    supervisor = build_supervisor(config, console, until_idle=True)
    log = logging.getLogger("asyncio")
    slow = SlowCallbacks()
    log.addHandler(slow)
    window: dict[str, float] = {}  # from the agent's first output to its memo archived: its end is within
    threading.Thread(target=watch, args=(tmp_path, window), daemon=True).start()

    async def serve() -> int:
        asyncio.get_running_loop().slow_callback_duration = SLOW
        return await supervisor.serve()

    try:
        code = asyncio.run(serve(), debug=True)
    finally:
        log.removeHandler(slow)
        console.close()
    assert code == 0
    assert [p.name for p in (tmp_path / "memo" / "big" / "archive").iterdir()] == ["B-1.md"]
    log_file = next((tmp_path / ".orchestrator" / "logs").iterdir())
    assert log_file.stat().st_size > 40 * 1024 * 1024, "the agent wrote its whole stream"
    transcript = tmp_path / ".orchestrator" / "runs" / "1" / "transcript.jsonl"
    kept = [json.loads(line)["type"] for line in transcript.read_text(encoding="utf-8").splitlines()]
    assert kept == ["system", "result"], "the transcript keeps the attempt's start and result, not a copy of the log"
    entry = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "memo" / "big" / "journal").iterdir())
    assert "> Read the whole repository.\n> Done." in entry, "the journal quotes the result, told by the verdict"
    assert window.keys() == {"output", "archived"}
    during = [text for at, text in slow.reports if window["output"] <= at <= window["archived"] + SLOW]
    assert during == [], "callbacks held the loop over 50 ms at the run's end:\n" + "\n".join(during)


def watch(root: Path, window: dict[str, float]) -> None:
    """Note when the run's log first grows and when its memo reaches archive/ (at most 60 s)."""
    logs, archive = root / ".orchestrator" / "logs", root / "memo" / "big" / "archive"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "archived" not in window:
        if "output" not in window and any(p.stat().st_size > 1024 * 1024 for p in _files(logs)):
            window["output"] = time.monotonic()
        if "output" in window and _files(archive):
            window["archived"] = time.monotonic()
        time.sleep(0.002)


def _files(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except FileNotFoundError:
        return []
