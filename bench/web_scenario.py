"""The web scenario: what the dashboard costs the loop, and how fast it answers.

**Latency with pages open.** The latency scenario's measure (rename into an inbox -> the agent's first
instruction, by its own clock), in one orchestrator with the dashboard on: first with no page connected, then
with ``PAGES`` pages holding the ``events`` stream open (each reading every event), the two halves alternated
in rounds so drift in the machine's load falls on both. Target: p50 with the pages within 10 % of without.

**State with 100 live runs.** ``GET /api/v1/state`` (the ``status --json`` object) over a kept-alive
connection while 100 agents run, p50 of ``STATE_GETS``. Target <= 5 ms.

**Pages with 100,000 runs of history.** The record generated as the history scenario does (runs, attempts,
memos), then the overview and the history page (its newest page of 100, and one deep in the record) served by
a running orchestrator: each the p50 of several loads. Target: every page < 300 ms.
"""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time
from datetime import datetime
from typing import Any

from bench import history_scenario
from bench.common import Context, Outcome, Row
from bench.harness import Orchestrator, Project, Stats, drop_atomically, memo_name, memo_text, wait_for

PAGES = 20
STATE_GETS = 200
LIVE_RUNS = 100
HISTORY_RUNS = 100_000
PAGE_LOADS = 7


def _client(project: Project) -> Any:
    import httpx

    info = json.loads((project.root / ".orchestrator" / "web.json").read_text())
    return httpx.Client(base_url=info["url"], headers={"Authorization": f"Bearer {info['token']}"}, timeout=30)


def _web_json(project: Project, orch: Orchestrator) -> None:
    def ready() -> bool:
        orch.check_alive()
        return (project.root / ".orchestrator" / "web.json").exists()

    wait_for(ready, 60, "the dashboard's web.json")


class _Pages:
    """``count`` connected pages: each a thread reading the events stream over its own socket until told to
    stop (then it closes, so the next round without pages really has none)."""

    def __init__(self, project: Project, count: int) -> None:
        info = json.loads((project.root / ".orchestrator" / "web.json").read_text())
        self.address = info["url"].split("//", 1)[1].rstrip("/")
        self.token = info["token"]
        self.count = count
        self.events = 0
        self.connected = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._read, daemon=True) for _ in range(count)]

    def _read(self) -> None:
        host, port = self.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                f"GET /api/v1/events HTTP/1.1\r\nHost: {self.address}\r\nAuthorization: Bearer {self.token}\r\n"
                "Accept: text/event-stream\r\n\r\n".encode()
            )
            sock.settimeout(0.1)
            first = True
            while not self.stop.is_set():
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    return
                with self.lock:
                    if first:
                        self.connected += 1
                        first = False
                    self.events += data.count(b"\ndata:") + data.startswith(b"data:")

    def __enter__(self) -> _Pages:
        for thread in self.threads:
            thread.start()
        wait_for(lambda: self.connected == self.count, 30, f"{self.count} pages connected")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(5)


def _latencies(project: Project, renamed: dict[str, int]) -> list[float]:
    starts = {r.name: r.ns for r in project.records()}
    return [(starts[n] - at) / 1e6 for n, at in renamed.items() if n in starts]


def _round(project: Project, orch: Orchestrator, names: list[str], pace: float) -> dict[str, int]:
    inbox = project.folder("r0", "inbox")
    renamed = {}
    for name in names:
        renamed[name] = drop_atomically(inbox, name, memo_text(0, "r0"))
        orch.check_alive()
        time.sleep(pace)
    wait_for(lambda: {r.name for r in project.records()} >= set(names), 60, "the round's agents")
    return renamed


def latency_with_pages(ctx: Context, out: Outcome) -> None:
    s = ctx.sizes
    project = ctx.project("web-latency")
    project.configure({"r0": {}}, web={"port": 0})
    orch = Orchestrator(project).start()
    orch.wait_ready()
    _web_json(project, orch)
    rounds = 4 if s.latency_memos >= 100 else 1
    per = max(2, s.latency_memos // (2 * rounds))
    ctx.say(f"web: latency, {rounds} rounds of {per} memos without and with {PAGES} connected pages")
    without: dict[str, int] = {}
    with_pages: dict[str, int] = {}
    seen_events = 0
    counter = 0
    _round(project, orch, [memo_name(counter + i) for i in range(s.warmup)], s.latency_pace)
    counter += s.warmup
    for _ in range(rounds):
        names = [memo_name(counter + i) for i in range(per)]
        counter += per
        without.update(_round(project, orch, names, s.latency_pace))
        names = [memo_name(counter + i) for i in range(per)]
        counter += per
        with _Pages(project, PAGES) as pages:
            with_pages.update(_round(project, orch, names, s.latency_pace))
            time.sleep(0.2)
            seen_events += pages.events
    orch.stop()
    base = Stats.of(_latencies(project, without))
    loaded = Stats.of(_latencies(project, with_pages))
    out.details.append(f"no page connected, rename -> agent start (ms): {base.line('ms', 2)}")
    out.details.append(
        f"{PAGES} pages on the events stream (ms): {loaded.line('ms', 2)}; {seen_events} events read by them"
    )
    out.rows.append(
        Row(
            "web",
            f"rename -> agent start with {PAGES} pages connected, p50",
            loaded.p50,
            "ms",
            base.p50,
            "the same orchestrator, no page connected",
            "ratio <= 1.1",
            loaded.p50 <= 1.1 * base.p50,
            2,
        )
    )


def state_with_live_runs(ctx: Context, out: Outcome) -> None:
    live = LIVE_RUNS if ctx.sizes.latency_memos >= 100 else 10  # a smoke run only checks that it works
    project = ctx.project("web-state")
    project.configure({"r0": {"command": ["sleep", "600"], "grace": "1s"}}, max_concurrent=live, web={"port": 0})
    orch = Orchestrator(project).start()
    orch.wait_ready()
    _web_json(project, orch)
    inbox = project.folder("r0", "inbox")
    for i in range(live):
        drop_atomically(inbox, memo_name(i), memo_text(i, "r0"))
    with _client(project) as client:
        wait_for(
            lambda: sum(r["state"] == "running" for r in client.get("/api/v1/state").json()["runs"]) == live,
            120,
            f"{live} runs running",
        )
        times, inside = [], []
        for _ in range(STATE_GETS):
            began = time.perf_counter()
            answer = client.get("/api/v1/state")
            times.append((time.perf_counter() - began) * 1000)
            assert answer.status_code == 200
            inside.append(float(answer.headers["server-timing"].split("dur=")[1]))
        client.post("/api/v1/cancel", json={"role": "r0"})
    orch.stop()
    st, rt = Stats.of(inside), Stats.of(times)
    out.details.append(f"GET /api/v1/state with {live} runs live, in process (Server-Timing, ms): {st.line('ms', 2)}")
    out.details.append(f"the same, round trip from a client on this machine (ms): {rt.line('ms', 2)}")
    out.rows.append(
        Row(
            "web",
            f"GET /api/v1/state, {live} runs live, in process, p50",
            st.p50,
            "ms",
            None,
            "",
            "<= 5 ms",
            st.p50 <= 5,
            2,
        )
    )
    out.rows.append(Row("web", "the same, round trip, p50", rt.p50, "ms", None, "", "", None, 2))


def pages_with_history(ctx: Context, out: Outcome) -> None:
    """The pages with 100,000 runs of history on record (paged), p50 of each."""
    count = HISTORY_RUNS if ctx.sizes.latency_memos >= 100 else 1_000
    project = ctx.project("web-history")
    project.configure({role: {} for role in history_scenario.ROLES}, web={"port": 0})
    ctx.say(f"web: generating {count} runs of history")
    history_scenario.generate(project.root, count, datetime.now().astimezone())
    orch = Orchestrator(project).start()
    orch.wait_ready()
    _web_json(project, orch)
    worst = 0.0
    with _client(project) as client:
        for path in ("/", "/history", f"/history?before={count // 2}", "/api/v1/state"):
            times = []
            for _ in range(PAGE_LOADS):
                began = time.perf_counter()
                answer = client.get(path)
                times.append((time.perf_counter() - began) * 1000)
                assert answer.status_code == 200, (path, answer.status_code)
            p50 = statistics.median(times)
            worst = max(worst, p50)
            out.details.append(f"{path} with {count} runs on record: p50 {p50:.1f} ms, max {max(times):.1f} ms")
    orch.stop()
    out.rows.append(
        Row("web", f"slowest page, {count} runs of history, p50", worst, "ms", None, "", "< 300 ms", worst < 300, 1)
    )


def web(ctx: Context) -> Outcome:
    out = Outcome("web")
    latency_with_pages(ctx, out)
    state_with_live_runs(ctx, out)
    pages_with_history(ctx, out)
    return out
