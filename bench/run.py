#!/usr/bin/env python3
"""The orchestrator's benchmark: `make bench` (or `.venv/bin/python bench/run.py`).

Runs every scenario against the real `orchestrator up` with a compiled no-op
agent, each beside a baseline measured in the same invocation, prints a table
and writes ``bench/RESULTS.md`` (machine, date, commit, figures, baselines,
ratios, and the findings kept in ``bench/FINDINGS.md``).

  --smoke          a few memos per scenario and a short idle window; checks that everything
                   runs, writes no RESULTS.md (the figures mean nothing); used by the test suite
  --only a,b       run only these scenarios (latency, throughput, drain, startup, cancel, memory, idle,
                   continuity, schedule, fuse, keeper, memory-store, ray, sdk-keeper, history, web, client,
                   year, many-agents, big-end, workspaces)
  --out PATH       where to write the results ("-" for nowhere)
  --keep           keep the scratch folder (projects, logs, records) for a look afterwards

Needs Linux, a C compiler (cc, gcc or clang) and, for one latency figure,
``inotifywait`` from inotify-tools (``make bench`` installs both when it runs as
root with apt-get: ``.ci/needs``); without ``inotifywait`` that figure is not
measured and its rows say so.

The pass/fail targets (issue 34): a memo's start median within 1.5x of a bare watchdog + ``Popen`` floor run the
same way; the realistic drain within 2 % of its ideal; the client's ``cancel`` and ``status`` medians <= 60 ms;
the worst memo latency around a big stream-json end <= 100 ms (the big-end scenario); and the many-agents
scenario's growth from 20 to 300 agents. The ratios to ``inotifywait`` and ``xargs -P 10`` are figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime
from pathlib import Path

if __name__ == "__main__" and not __package__:
    # started as a file (`python bench/run.py`): run it as the module `bench.run` of the checkout instead,
    # so the package's imports (bench.*, tests.harness) resolve as they do under `python -m bench.run`
    import runpy

    sys.path[0] = str(Path(__file__).resolve().parent.parent)
    runpy.run_module("bench.run", run_name="__main__", alter_sys=True)
    raise SystemExit  # run_module's main() has exited; this line is reached only if it returned

from collections.abc import Callable

from bench import (
    big_end,
    budget_fuse,
    cancel,
    client_scenario,
    continuity_scenario,
    crashes,
    drain,
    history_scenario,
    idle,
    latency,
    many_agents,
    memory,
    memory_store_scenario,
    ray_scenario,
    schedule_scenario,
    sdk_crashes,
    startup,
    throughput,
    web_scenario,
    workspaces_scenario,
    year_scenario,
)
from bench.common import FULL, SMOKE, Context, Outcome, Row, cleanup
from bench.harness import (
    HERE,
    REPO,
    BenchError,
    agent_is_static,
    build_agent,
    inotifywait_path,
    installed_from,
    keeper_build,
    precompile,
)

# the registry: a scenario's name (for --only) -> the function that runs it; a new scenario is a module of
# bench/ and one line here
SCENARIOS: dict[str, Callable[[Context], Outcome]] = {
    "latency": latency.latency,
    "throughput": throughput.throughput,
    "drain": drain.drain,
    "startup": startup.startup,
    "cancel": cancel.cancel,
    "memory": memory.memory,
    "idle": idle.idle,
    "continuity": continuity_scenario.continuity,
    "fuse": budget_fuse.fuse,
    "schedule": schedule_scenario.schedule,
    "keeper": crashes.keeper,
    "memory-store": memory_store_scenario.memory_store,
    "ray": ray_scenario.ray,
    "sdk-keeper": sdk_crashes.sdk_keeper,
    "history": history_scenario.history,
    "web": web_scenario.web,
    "client": client_scenario.client,
    "year": year_scenario.year,
    "many-agents": many_agents.many_agents,
    "big-end": big_end.big_end,
    "workspaces": workspaces_scenario.workspaces,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run.py", description="Benchmark the orchestrator against baselines.")
    parser.add_argument("--smoke", action="store_true", help="a few memos per scenario; only checks that it all runs")
    parser.add_argument("--only", default="", help=f"comma-separated scenarios out of: {', '.join(SCENARIOS)}")
    parser.add_argument("--out", default=None, help="results file (default bench/RESULTS.md; with --smoke none)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args(argv)

    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or list(SCENARIOS)
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        print(f"bench: unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    if not sys.platform.startswith("linux"):
        print("bench: the benchmark needs Linux (inotify, /proc)", file=sys.stderr)
        return 2
    out_path = _out_path(args)
    sizes = SMOKE if args.smoke else FULL
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="orchestrator-bench-"))
    say = _sayer(started)
    outcomes: list[Outcome] = []
    failures: list[str] = []
    machine: dict[str, str] = {}
    ctx: Context | None = None
    try:
        agent = build_agent(scratch)
        precompile()
        machine = _machine(scratch, agent)
        if inotifywait_path() is None:
            say("WARNING: inotifywait not found; the bare inotify loop's latency figure is not measured")
        ctx = Context(agent=agent, scratch=scratch, sizes=sizes, say=say)
        for name in chosen:
            try:
                outcomes.append(SCENARIOS[name](ctx))
            except BenchError as exc:
                failures.append(f"{name}: {exc}")
                say(f"FAILED {name}: {exc}")
            except Exception:  # noqa: BLE001 - one broken scenario must not hide the others' figures
                failures.append(f"{name}: {traceback.format_exc()}")
                say(f"FAILED {name}:\n{traceback.format_exc()}")
            finally:
                cleanup(ctx)
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    finally:
        if ctx is not None:
            cleanup(ctx)
        if args.keep:
            say(f"scratch folder kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    machine["duration"] = f"{time.monotonic() - started:.0f} s"
    machine["load average at the end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = [row for o in outcomes for row in o.rows]
    table = _table([r for r in rows if r.ok is not None])
    figures = _table([r for r in rows if r.ok is None])
    print()
    print(table)
    print()
    print(figures)
    for outcome in outcomes:
        for note in outcome.notes:
            print(f"note ({outcome.name}): {note}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    if out_path is not None:
        out_path.write_text(_results(machine, sizes, args, outcomes, failures, table, figures), encoding="utf-8")
        print(f"\nwritten to {out_path}")
    return 1 if failures else 0


def _out_path(args: argparse.Namespace) -> Path | None:
    if args.out == "-":
        return None
    if args.out:
        return Path(args.out)
    return None if args.smoke or args.only else HERE / "RESULTS.md"


def _sayer(started: float):  # type: ignore[no-untyped-def]
    def say(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", flush=True)

    return say


# ------------------------------------------------------------------ output
def _fmt(value: float | None, unit: str, digits: int) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f} {unit}"


def _table(rows: list[Row]) -> str:
    head = ["scenario", "figure", "result", "baseline", "ratio", "target", "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}x" if r.ratio < 10 else f"{r.ratio:.1f}x"
        base = f"{_fmt(r.baseline, r.unit, r.digits)} ({r.baseline_name})" if r.baseline is not None else "-"
        met = "" if r.met is None else ("yes" if r.met else "**no**")
        if r.missing:
            base = f"not measured: {r.missing} missing"
        lines.append(
            f"| {r.scenario} | {r.figure} | {_fmt(r.value, r.unit, r.digits)} | {base} | {ratio} | "
            f"{r.target or '-'} | {met} |"
        )
    return "\n".join(lines)


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _first_value(path: str, key: str, sep: str) -> str | None:
    """The value of the first line of ``path`` that starts with ``key``, or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(key):
                    return line.split(sep, 1)[1].strip()
    except OSError:
        pass
    return None


def _run_out(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    except OSError:
        return ""


def _machine(scratch: Path, agent: Path) -> dict[str, str]:
    cpu = _first_value("/proc/cpuinfo", "model name", ":") or "unknown"
    mem_kb = _first_value("/proc/meminfo", "MemTotal", ":")
    mem = f"{int(mem_kb.split()[0]) / 1024 / 1024:.1f} GiB" if mem_kb else "?"
    distro = (_first_value("/etc/os-release", "PRETTY_NAME=", "=") or platform.system()).strip('"')
    fs = _run_out("stat", "-f", "-c", "%T", str(scratch)).strip()
    commit = _git("rev-parse", "--short", "HEAD") or "unknown (not a git checkout)"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    if dirty:
        commit += f" with uncommitted changes to {len(dirty.splitlines())} file(s)"
    from importlib import metadata

    versions = []
    for dist in ("watchdog", "psutil", "pydantic"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pass
    cc = _run_out(os.environ.get("CC") or "cc", "--version")
    inotify = inotifywait_path()
    inotify_version = _run_out(inotify, "--help").split("\n", 1)[0] if inotify else ""
    return {
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "commit": commit,
        "machine": f"{cpu}, {os.cpu_count()} CPU(s), {mem} RAM",
        "system": f"{distro}, Linux {platform.release()}, scratch folder on {fs or '?'}",
        "python": f"{platform.python_implementation()} {platform.python_version()}; {', '.join(versions)}",
        "orchestrator": installed_from(),
        "keeper": keeper_build(),
        "agent": f"bench/agent.c, {'statically' if agent_is_static(agent) else 'dynamically'} linked, "
        f"{cc.splitlines()[0] if cc else 'cc'}",
        "inotifywait": inotify_version or "not installed (latency baseline not measured: its targets not met)",
        "load average at the start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def _results(  # type: ignore[no-untyped-def]
    machine: dict[str, str], sizes, args, outcomes: list[Outcome], failures: list[str], table: str, figures: str
) -> str:
    lines = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`bench/run.py`); do not edit by hand: the findings come from `bench/FINDINGS.md`.",
        "Every figure comes from the stand-in agents' own start records (or the wall clock around a real command),",
        "next to a baseline measured in the same run on the same machine, with the same compiled no-op agent.",
        "",
    ]
    lines += [f"- **{key}**: {value}" for key, value in machine.items()]
    if args.smoke:
        lines += ["", "**Smoke run: a few memos per scenario. These figures only show that the benchmark runs.**"]
    lines += [
        "",
        "## Targets",
        "",
        table,
        "",
        "## Figures",
        "",
        "Measured beside a baseline, with no pass or fail.",
        "",
    ]
    lines += [figures, ""]
    if failures:
        lines += ["## Scenarios that failed", ""] + [f"- {f}" for f in failures] + [""]
    lines += ["## Details", ""]
    for outcome in outcomes:
        lines += [f"### {outcome.name}", ""] + [f"- {d}" for d in outcome.details]
        lines += [f"- **note**: {n}" for n in outcome.notes]
        lines.append("")
    lines += [
        "## How to run",
        "",
        "```sh",
        "make bench          # every scenario, about ten minutes and a minute to install the wheel; rewrites bench/RESULTS.md",
        "make bench-smoke    # a few memos per scenario, to check that it runs (part of the tests)",
        ".venv/bin/python bench/run.py --only latency,cancel --keep   # some scenarios, keep the scratch folder",
        "```",
        "",
        (
            "The bare inotify loop of the latency figures needs `inotifywait` (Debian/Ubuntu: `sudo apt-get install -y "
            "inotify-tools`; `make bench` installs it as root through `.ci/needs`); without it that figure is not "
            "measured, its rows say so, and everything else still runs. The stand-in agent "
            "is compiled with `cc` (or `$CC`, gcc, clang) at the start of every run."
        ),
        "",
    ]
    findings = HERE / "FINDINGS.md"
    if findings.exists():
        text = findings.read_text(encoding="utf-8").strip()  # its headings one level down, under this page's title
        lines += ["#" + line if line.startswith("#") else line for line in text.splitlines()] + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
