"""The benchmark runs end to end: `bench/run.py --smoke` (a few memos per scenario), as in `make bench-smoke`.

Only that it completes and reports every scenario is checked, never a figure: the
machine running the tests is shared and its timings mean nothing here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "bench" / "run.py"
SCENARIO_LABELS = (
    "| latency |",
    "| throughput |",
    "| drain |",
    "| start-up |",
    "| cancel |",
    "| memory |",
    "| idle |",
    "| schedule |",
    "| history |",
    "| year |",
    "| many-agents |",
)

pytestmark = pytest.mark.skipif(
    not any(shutil.which(c) for c in (os.environ.get("CC") or "cc", "gcc", "clang")),
    reason="the benchmark compiles its stand-in agent with a C compiler, and none is installed",
)


def _bench(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCHESTRATOR_", "BENCH_"))}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, str(RUN), "--smoke", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO,
        timeout=560,  # a hang guard, not a speed target: every scenario, small, on a possibly busy machine
        check=False,
    )


@pytest.mark.full  # minutes of real orchestrators
@pytest.mark.timeout(600)
def test_every_scenario_runs_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    done = _bench("--out", str(out))
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    for label in SCENARIO_LABELS:
        assert label in done.stdout, f"no {label} row in:\n{done.stdout}"
    results = out.read_text(encoding="utf-8")
    assert "Smoke run" in results and "| scenario | figure |" in results
    assert "**commit**" in results and "**machine**" in results
    if shutil.which("inotifywait"):
        assert "(inotifywait -m piped to sh)" in done.stdout  # the latency baseline was measured
    else:
        assert "inotifywait not found" in done.stdout


@pytest.mark.full
@pytest.mark.timeout(120)
def test_a_missing_inotifywait_skips_only_the_bare_loops_figures() -> None:
    done = _bench("--only", "latency", BENCH_INOTIFYWAIT="no-such-inotifywait-here")
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "inotifywait not found" in done.stdout and "apt-get install -y inotify-tools" in done.stdout
    rows = done.stdout.splitlines()
    bare = next(x for x in rows if x.startswith("| latency | rename -> agent start, p50, against the bare loop"))
    # a figure: the baseline says why it is not there, and nothing is judged
    assert "| not measured: inotifywait missing | - | - |  |" in bare, bare
    target = next(x for x in rows if x.startswith("| latency | rename -> agent start, p50 |"))
    # the target is judged against the watchdog floor, which needs nothing beyond the orchestrator's own Python
    assert "(watchdog + Popen floor)" in target and "| ratio <= 1.5 |" in target, target


def test_unknown_scenario_is_a_usage_error() -> None:
    done = _bench("--only", "latency,nonsense")
    assert done.returncode == 2
    assert "unknown scenario(s) nonsense" in done.stderr
