"""Nothing slow on the loop: the real supervisor loop, with asyncio's slow-callback report at 50 ms, through the end
of a Claude run whose stream-json output is tens of megabytes."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
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
    window: dict[str, float] = {}  # from the agent's first output to its memo archived: its end is within
    slow = serve_watched(tmp_path, watch, window)
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


def serve_watched(
    root: Path, watcher: Callable[[Path, dict[str, float]], None], window: dict[str, float]
) -> SlowCallbacks:
    """The real loop of ``up`` at ``root`` until it is idle, in asyncio's debug mode with the slow-callback report
    at ``SLOW``, while ``watcher`` notes the window of interest on a thread; the reports."""
    config = load_config(root)
    console = Console(config.state_dir / "orchestrator.log", live=False)
    supervisor = build_supervisor(config, console, until_idle=True)
    log = logging.getLogger("asyncio")
    slow = SlowCallbacks()
    log.addHandler(slow)
    threading.Thread(target=watcher, args=(root, window), daemon=True).start()

    async def serve() -> int:
        asyncio.get_running_loop().slow_callback_duration = SLOW
        return await supervisor.serve()

    try:
        code = asyncio.run(serve(), debug=True)
    finally:
        log.removeHandler(slow)
        console.close()
    assert code == 0
    return slow


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


# an agent of a worktree role: 50 files edited and 50 new in its workspace, a line in its log, then it ends a moment
# later (so both runs are up before either ends), failing when its memo says so
HUNDRED = """
import os, pathlib, sys, time
for i in range(50):
    pathlib.Path(f"d{i % 100:03d}/f{i:05d}.txt").write_text("edited\\n")
    pathlib.Path(f"new{i}.txt").write_text("new\\n")
print("wrote", flush=True)
time.sleep(0.5)
sys.exit(1 if "fail" in pathlib.Path(os.environ["ORCHESTRATOR_MEMO"]).read_text() else 0)
"""
FILES = 5000


def test_a_workspace_attempts_commit_and_set_aside_hold_the_loop_for_no_callback_over_50_ms(tmp_path: Path) -> None:
    role = {"command": [sys.executable, "-c", HUNDRED], "workspace": {"mode": "worktree", "key": "memo"}}
    write_team(tmp_path, {"builder": role}, {"retry": {"max": 0}, "max_concurrent": 2}, lambda _name: "$memo\n")
    for i in range(FILES):
        folder = tmp_path / f"d{i % 100:03d}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i:05d}.txt").write_text(f"file {i}\n", encoding="utf-8")
    (tmp_path / ".gitignore").write_text("memo/\n.orchestrator/\n.orchestrator-workspaces/\n", encoding="utf-8")
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "."],
    ):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
    inbox = tmp_path / "memo" / "builder" / "inbox"
    inbox.mkdir(parents=True)
    old = time.time() - 60
    for name, body in (("W-ok", "do it"), ("W-fail", "fail it")):
        (inbox / f"{name}.md").write_text(f"---\nid: {name}\n---\n{body}\n", encoding="utf-8")
        os.utime(inbox / f"{name}.md", (old, old))
    window: dict[str, float] = {}  # from both agents' files written to both memos ended
    slow = serve_watched(tmp_path, watch_ends, window)
    memos = tmp_path / "memo" / "builder"
    assert [p.name for p in (memos / "archive").glob("*.md")] == ["W-ok.md"]
    assert [p.name for p in (memos / "failed").glob("*.md")] == ["W-fail.md"]
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)"], cwd=tmp_path, capture_output=True, text=True)
    assert any(ref.startswith("refs/orchestrator/attempts/W-fail/") for ref in refs.stdout.split()), refs.stdout
    shown = subprocess.run(["git", "show", "orchestrator/W-ok:new0.txt"], cwd=tmp_path, capture_output=True, text=True)
    assert shown.stdout == "new\n", "the success is committed on its branch"
    assert not (tmp_path / "new0.txt").exists(), "the root is untouched"
    assert window.keys() == {"up", "ended"}
    during = [text for at, text in slow.reports if window["up"] <= at <= window["ended"] + SLOW]
    assert during == [], "callbacks held the loop over 50 ms at the attempts' ends:\n" + "\n".join(during)


def watch_ends(root: Path, window: dict[str, float]) -> None:
    """Note when both agents have written their files and when both memos have ended (at most 120 s)."""
    logs, memos = root / ".orchestrator" / "logs", root / "memo" / "builder"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "ended" not in window:
        wrote = [p for p in _files(logs) if p.stat().st_size and b"wrote" in p.read_bytes()]
        if "up" not in window and len(wrote) == 2:
            window["up"] = time.monotonic()
        ended = [p for folder in ("archive", "failed") for p in _files(memos / folder) if p.suffix == ".md"]
        if "up" in window and len(ended) >= 2:
            window["ended"] = time.monotonic()
        time.sleep(0.002)
