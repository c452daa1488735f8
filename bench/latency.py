"""latency: memo renamed into an inbox -> its agent's first instruction, beside two baselines run the same way.

The floor is what any Python supervisor built on the same parts pays: a watchdog observer on the inbox that
``Popen``s the agent for each memo renamed in (the target: the orchestrator's median within 1.5x of it). The bare
`inotifywait -m | sh` loop is the least any watcher pays; its ratio is a figure, as it swings more from run to run
than the orchestrator's own cost does.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from bench.common import Context, Outcome, Row, check_once, latencies, paced_drops, wait_drained
from bench.harness import (
    INOTIFY_HELP,
    BenchError,
    Orchestrator,
    Stats,
    child_env,
    count_lines,
    inotifywait_path,
    memo_name,
    orchestrator_python,
    read_records,
    wait_for,
)


def latency(ctx: Context) -> Outcome:
    s = ctx.sizes
    out = Outcome("latency")
    total = s.warmup + s.latency_memos
    names = [memo_name(i) for i in range(total)]
    measured = set(names[s.warmup :])
    outside = [memo_name(i) for i in range(total, total + s.latency_outside)]

    project = ctx.project("latency")
    project.configure({"r0": {}})
    staging = project.root / "outbox"
    staging.mkdir()
    orch = Orchestrator(project).start()
    orch.wait_ready()
    ctx.say(
        f"latency: {total} memos paced {s.latency_pace * 1000:g} ms apart into a running orchestrator, "
        f"then {len(outside)} renamed in from another folder"
    )
    inbox = project.folder("r0", "inbox")
    renamed = paced_drops(inbox, names, s.latency_pace, orch.check_alive)
    renamed.update(paced_drops(inbox, outside, s.latency_pace, orch.check_alive, staging))
    wait_drained(project, ["r0"], total + len(outside), orch, timeout=60 + total * 0.1)
    orch.stop()
    records = project.records()
    out.notes += check_once(records, set(names) | set(outside), "orchestrator")
    st = Stats.of(latencies(records, renamed, measured))
    ost = Stats.of(latencies(records, renamed, set(outside)))
    out.details.append(f"orchestrator, rename within the inbox -> agent start (ms): {st.line('ms', 2)}")
    out.details.append(f"orchestrator, rename from another folder -> agent start (ms): {ost.line('ms', 2)}")

    base = base_out = None
    missing = ""
    if inotifywait_path() is None:
        missing = "inotifywait"
        out.notes.append(INOTIFY_HELP)
    else:
        ctx.say("latency: the same memos into a bare `inotifywait -m | sh` loop")
        base_root = ctx.scratch / "latency-baseline"
        inbox, staging = base_root / "inbox", base_root / "outbox"
        inbox.mkdir(parents=True)
        staging.mkdir()
        record = base_root / "records.txt"
        with _InotifyLoop(inbox, ctx.agent, record, base_root / "inotifywait.err"):
            base_renamed = paced_drops(inbox, names, s.latency_pace, lambda: None)
            base_renamed.update(paced_drops(inbox, outside, s.latency_pace, lambda: None, staging))
            wait_for(
                lambda: count_lines(record) >= total + len(outside), 60 + total * 0.1, "the baseline's agent starts"
            )
        base_records = read_records(record)
        out.notes += check_once(base_records, set(names) | set(outside), "inotify baseline")
        base = Stats.of(latencies(base_records, base_renamed, measured))
        base_out = Stats.of(latencies(base_records, base_renamed, set(outside)))
        out.details.append(f"`inotifywait -m | sh` baseline, rename within the inbox (ms): {base.line('ms', 2)}")
        out.details.append(f"`inotifywait -m | sh` baseline, rename from another folder (ms): {base_out.line('ms', 2)}")
    ctx.say("latency: the same memos into the floor, a watchdog observer that Popens the agent")
    floor = _floor(ctx, names, measured)
    out.details.append(f"floor, watchdog + `Popen` in Python, rename within the inbox (ms): {floor.line('ms', 2)}")
    out.rows.append(
        Row(
            "latency",
            "rename -> agent start, p50",
            st.p50,
            "ms",
            floor.p50,
            "watchdog + Popen floor",
            f"ratio <= {FLOOR_RATIO:g}",
            st.p50 <= FLOOR_RATIO * floor.p50,
            2,
        )
    )
    out.rows.append(
        Row("latency", "rename -> agent start, p99", st.p99, "ms", floor.p99, "watchdog + Popen floor", digits=2)
    )
    bname = "inotifywait -m piped to sh"
    for figure, value, against in (
        ("rename -> agent start, p50, against the bare loop", st.p50, base.p50 if base else None),
        (f"the same, renamed in from another folder, p50 (n={ost.n})", ost.p50, base_out.p50 if base_out else None),
    ):
        out.rows.append(Row("latency", figure, value, "ms", against, bname, "", None, 2, missing=missing))
    out.details.append(
        f"{s.latency_memos} measured memos after {s.warmup} warm-up memo(s), one role, each written under a hidden "
        "name in the inbox and renamed into place, one every "
        f"{s.latency_pace * 1000:g} ms; then {len(outside)} written in a folder beside memo/ and renamed into the "
        "inbox. Latency = the agent's own CLOCK_REALTIME at its first instruction minus the writer's clock read "
        "just before rename(2)."
    )
    return out


FLOOR_RATIO = 1.5
FLOOR = """
import subprocess, sys, time
from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer

class Start(FileSystemEventHandler):
    def on_moved(self, event):
        if event.dest_path.endswith(".md"):
            subprocess.Popen([sys.argv[1], event.dest_path])

observer = Observer()
observer.schedule(Start(), sys.argv[2])
observer.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


def _floor(ctx: Context, names: list[str], measured: set[str]) -> Stats:
    """The latency of the watchdog + ``Popen`` floor for the same paced memos (ms), on the measured install's
    interpreter (whose watchdog the orchestrator uses)."""
    root = ctx.scratch / "latency-floor"
    inbox = root / "inbox"
    inbox.mkdir(parents=True)
    record = root / "records.txt"
    proc = subprocess.Popen(
        [orchestrator_python(), "-c", FLOOR, str(ctx.agent), str(inbox)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=child_env(record),
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise BenchError(f"the watchdog floor did not start (status {proc.wait(10)})")
        renamed = paced_drops(inbox, names, ctx.sizes.latency_pace, lambda: None)
        wait_for(lambda: count_lines(record) >= len(names), 60 + len(names) * 0.1, "the floor's agent starts")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    return Stats.of(latencies(read_records(record), renamed, measured))


class _InotifyLoop:
    """``inotifywait -m`` piping into a shell that starts the agent for each memo renamed into ``inbox``."""

    SCRIPT = '"$3" -m -e moved_to --format "%w%f" "$1" | while IFS= read -r f; do "$2" "$f"; done'

    def __init__(self, inbox: Path, agent: Path, record: Path, err: Path) -> None:
        self.inbox, self.agent, self.record, self.err = inbox, agent, record, err
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> _InotifyLoop:
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                ["sh", "-c", self.SCRIPT, "sh", str(self.inbox), str(self.agent), str(inotifywait_path())],
                stdout=subprocess.DEVNULL,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=child_env(self.record),
                start_new_session=True,
            )
        wait_for(
            lambda: "Watches established" in self.err.read_text(errors="replace") or self.proc.poll() is not None,
            20,
            "inotifywait to set up its watch",
        )
        if self.proc.poll() is not None:
            raise BenchError(f"the inotifywait baseline ended at once: {self.err.read_text(errors='replace')}")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
