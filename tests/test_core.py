"""The orchestrator's core promises, end to end: every memo runs exactly once, under both limits, in order.

Each test runs the real `orchestrator up` on a real folder with the stand-in agent
(tests/agents/stand_in.py). Agents that must stay busy wait on a gate file the
test creates, so nothing depends on how fast the machine is; time only appears as
generous deadlines, and as "long enough for the orchestrator to have acted if it
were going to" windows that are followed by a probe memo proving the loop went on.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import STAND_IN, Orchestrator, Project, wait_for
from orchestrator.intake.queue import SETTLE

FIXTURES = Path(__file__).parent / "fixtures" / "yolo"
SLOW = 60.0  # deadline for work that starts many agents on a loaded 2-core machine


# ---------------------------------------------------------------- helpers
def up(project: Project, *args: str, **env: str) -> Orchestrator:
    """`orchestrator up` whose stand-in agents also record when they end (ends.jsonl)."""
    return project.up(*args, STANDIN_ENDS=str(project.root / "ends.jsonl"), **env)


def ends(project: Project) -> list[dict[str, Any]]:
    path = project.root / "ends.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def names(record: dict[str, Any]) -> list[str]:
    """The memo file names one agent was handed."""
    return [os.path.basename(p) for p in record["memos"]]


def started_memos(project: Project) -> Counter[str]:
    """How many agents each memo (by file name) was handed to."""
    return Counter(name for record in project.records() for name in names(record))


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end and a start at the same instant do not overlap)."""
    points = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    best = now = 0
    for _, step in points:
        now += step
        best = max(best, now)
    return best


def archived(project: Project, role: str, count: int, timeout: float = SLOW) -> list[str]:
    return wait_for(
        lambda: len(project.folder(role, "archive")) >= count and project.folder(role, "archive"),
        timeout,
        f"{count} memo(s) in memo/{role}/archive",
    )


def let_the_orchestrator_act(project: Project, role: str, probe: str) -> None:
    """Wait past the settle time and several rescans, then prove the loop still works with a probe memo."""
    interval = 0.5  # the harness' rescan_interval
    until = time.time() + SETTLE + 3 * interval
    wait_for(lambda: time.time() >= until, what="the settle window to pass")
    project.drop(role, probe)
    wait_for(lambda: probe in project.folder(role, "archive"), SLOW, f"probe memo {probe} archived")


def gate_front(gate: Path, **front: Any) -> dict[str, Any]:
    """Front matter for a memo whose agent works until ``gate`` exists."""
    return {**front, "agent": {"until": str(gate)}}


# ---------------------------------------------------------------- start-up
def test_memos_present_at_startup_run_in_file_name_order(project: Project) -> None:
    # builder's memos are old (found by the first scan as complete); reviewer's were written just now
    project.configure({"builder": {"max_concurrent": 1}, "reviewer": {"max_concurrent": 1}})
    order = ["c.md", "a.md", "e.md", "b.md", "d.md"]
    for age, name in enumerate(order):
        path = project.drop("builder", name)
        old = time.time() - 100 + age  # mtimes in writing order, which is not name order
        os.utime(path, (old, old))
        project.drop("reviewer", name)
    orch = up(project)
    archived(project, "builder", 5)
    archived(project, "reviewer", 5)
    by_role: dict[str, list[str]] = {"builder": [], "reviewer": []}
    for record in sorted(project.records(), key=lambda r: r["run_id"]):
        by_role[record["role"]] += names(record)
    assert by_role == {"builder": sorted(order), "reviewer": sorted(order)}
    assert orch.stop() == 0
    assert "5 memo(s) waiting in the inbox" in orch.output


def test_memos_with_odd_mtimes_present_at_startup_run(project: Project) -> None:
    # unpacked or copied from a machine whose clock is ahead, or from long ago
    project.configure({"builder": {}})
    for name, mtime in (("future.md", time.time() + 3600), ("epoch.md", 0.0), ("soon.md", time.time() + 0.5)):
        path = project.drop("builder", name)
        os.utime(path, (mtime, mtime))
    orch = up(project)
    wait_for(lambda: len(project.folder("builder", "archive")) == 3, SLOW, "all three archived")
    assert orch.stop() == 0
    assert started_memos(project) == Counter({"future.md": 1, "epoch.md": 1, "soon.md": 1})


def test_memos_written_during_startup_each_run_exactly_once(project: Project) -> None:
    project.configure({"builder": {}}, max_concurrent=4)
    log = project.root / ".orchestrator" / "orchestrator.log"
    first_scan = re.compile(r"\[builder\] (\d+) memo\(s\) waiting in the inbox")
    written: list[str] = []
    problems: list[BaseException] = []

    def drop_next() -> None:
        name = f"m{len(written):03d}.md"
        if len(written) % 3 == 2:  # some written in place (created, modified, closed), most renamed in
            project.drop("builder", name, {"id": name[:-3]}, atomic=False)
        else:
            project.drop("builder", name, {"id": name[:-3]})
        written.append(name)

    def scanned() -> bool:
        try:
            return bool(first_scan.search(log.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return False

    def writer() -> None:
        try:
            while not scanned() and len(written) < 300:  # the watcher starts, the first scan runs...
                drop_next()
                time.sleep(0.02)  # pacing, not synchronisation: spread the writes over the start-up
            for _ in range(20):  # ...and memos keep coming after it
                drop_next()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            problems.append(exc)

    for _ in range(20):  # some before `up` starts at all
        drop_next()
    thread = threading.Thread(target=writer)
    thread.start()
    orch = up(project)
    thread.join(SLOW)
    assert not thread.is_alive() and not problems, problems
    match = first_scan.search(log.read_text(encoding="utf-8"))
    assert match and 20 <= int(match.group(1)) <= len(written) - 20, "the writes did not straddle the first scan"
    wait_for(
        lambda: project.folder("builder", "archive") == sorted(written),
        SLOW,
        f"all {len(written)} memos archived; archive has {len(project.folder('builder', 'archive'))}",
    )
    assert orch.stop() == 0
    starts = started_memos(project)
    assert starts == Counter({name: 1 for name in written}), {n: c for n, c in starts.items() if c != 1}
    assert project.folder("builder", "inbox") == [] and project.folder("builder", "active") == []
    assert "not delivered" not in orch.output and "ERROR" not in orch.output


# ---------------------------------------------------------------- complete memos only, once
def test_repeated_modify_and_touch_events_start_one_agent(project: Project) -> None:
    project.configure({"builder": {"max_concurrent": 1}})
    gate = project.root / "gate"
    orch = up(project)
    project.drop("builder", "a-blocker.md", gate_front(gate))
    wait_for(lambda: len(project.records()) == 1, what="the blocker started")
    # while the role is busy, the memo sees many create/modify/close/attrib events
    path = project.root / "memo" / "builder" / "inbox" / "b-target.md"
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("---\nid: T-1\n")
        handle.flush()
        handle.write("subject: touched\n---\n")
    for number in range(3):
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"part {number}\n")
        path.touch()
        os.utime(path)
        os.utime(path, (time.time() - 5, time.time() - 5))
    wait_for(lambda: orch.project.status()["queued"].get("builder") == 1, what="the target queued once")
    gate.touch()
    wait_for(lambda: "b-target.md" in project.folder("builder", "archive"), SLOW, "the target archived")
    let_the_orchestrator_act(project, "builder", "c-probe.md")
    assert orch.stop() == 0
    assert started_memos(project) == Counter({"a-blocker.md": 1, "b-target.md": 1, "c-probe.md": 1})
    target = next(r for r in project.records() if names(r) == ["b-target.md"])
    assert "part 0\npart 1\npart 2\n" in target["prompt"]
    assert project.folder("builder", "archive") == ["a-blocker.md", "b-target.md", "c-probe.md"]


def test_memo_still_being_written_is_not_handed_over(project: Project) -> None:
    project.configure({"builder": {}})
    orch = up(project)
    path = project.root / "memo" / "builder" / "inbox" / "slow-writer.md"
    first = "---\nid: W-1\nsubject: written slowly\n---\nfirst half of the memo\n"
    second = "second half of the memo, written much later\n"
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(first)
        handle.flush()
        wait_for(lambda: project.status()["pending"] == 1, what="the orchestrator to see the memo being written")
        # the writer pauses longer than any settle time while holding the file open
        let_the_orchestrator_act(project, "builder", "probe-1.md")
        assert project.folder("builder", "inbox") == ["slow-writer.md"]
        assert started_memos(project) == Counter({"probe-1.md": 1})
        handle.write(second)
    wait_for(lambda: "slow-writer.md" in project.folder("builder", "archive"), SLOW, "the memo archived once closed")
    assert orch.stop() == 0
    record = next(r for r in project.records() if names(r) == ["slow-writer.md"])
    assert record["prompt"].endswith(first + second)
    assert started_memos(project)["slow-writer.md"] == 1


# ---------------------------------------------------------------- limits and order
def test_global_and_per_role_limits_hold_while_work_runs_in_parallel(project: Project) -> None:
    project.configure({"a": {"max_concurrent": 2}, "b": {"max_concurrent": 1}, "c": {}}, max_concurrent=3)
    orch = up(project)
    plan = ["a", "a", "b", "c", "a", "b", "c", "a", "c", "b", "c"]
    for number, role in enumerate(plan):
        project.drop(role, f"{number:02d}.md", {"agent": {"sleep": 1.5}})
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + SLOW
    while sum(len(project.folder(r, "archive")) for r in "abc") < len(plan):
        assert time.monotonic() < deadline, f"the memos were not all archived:\n{orch.output}"
        snap = project.status()  # the orchestrator's own view, sampled while work runs
        seen.append(snap)
        assert snap["limits"]["running"] <= 3
        live = Counter(run["role"] for run in snap["runs"] if run["state"] == "running")
        assert live["a"] <= 2 and live["b"] <= 1 and sum(live.values()) <= 3, live
    assert orch.stop() == 0
    done = ends(project)
    assert len(done) == len(plan) == len(project.records())
    spans = {role: [(e["start"], e["end"]) for e in done if e["role"] == role] for role in "abc"}
    every = [span for role_spans in spans.values() for span in role_spans]
    assert max_overlap(every) == 3  # the cap held, and was reached
    assert max_overlap(spans["a"]) == 2
    assert max_overlap(spans["b"]) == 1
    assert max(snap["limits"]["running"] for snap in seen) <= 3


def test_fifo_within_a_role_limited_to_one(project: Project) -> None:
    project.configure({"builder": {"max_concurrent": 1}})
    gate = project.root / "gate"
    orch = up(project)
    project.drop("builder", "first.md", gate_front(gate))
    wait_for(lambda: len(project.records()) == 1, what="the first memo started")
    arrival = ["zulu.md", "alpha.md", "mike.md", "bravo.md", "echo.md"]
    for name in arrival:
        project.drop("builder", name)
    wait_for(lambda: project.status().get("queued_memos", {}).get("builder") == arrival, what="all five queued")
    gate.touch()
    archived(project, "builder", 6)
    assert orch.stop() == 0
    run_order = [names(r)[0] for r in sorted(project.records(), key=lambda r: r["run_id"])]
    assert run_order == ["first.md", *arrival]
    starts = [r["start"] for r in sorted(project.records(), key=lambda r: r["run_id"])]
    assert starts == sorted(starts)


def test_batch_role_takes_every_pending_memo_and_runs_alone(project: Project) -> None:
    prompt = "paths=[$memo_paths]\ninput=[$INPUT_MEMO_FILES]\nmemo=[$memo]\npath=[$memo_path]\n"
    project.configure({"pm": {"batch": True, "max_concurrent": 5}}, prompt=prompt)
    gate = project.root / "gate"
    old = project.drop("pm", "a.md", gate_front(gate, id="A"))
    os.utime(old, (time.time() - 60, time.time() - 60))  # settled at the first scan, the others a second later:
    project.drop("pm", "b.md", {"id": "B"})  # the batch waits for them rather than start with a alone
    project.drop("pm", "c.md")
    orch = up(project)
    first = wait_for(lambda: project.records(), what="the first batch run")[0]
    assert names(first) == ["a.md", "b.md", "c.md"]
    # memos that arrive while the batch runs wait for the next run, and no second instance starts
    project.drop("pm", "d.md")
    project.drop("pm", "e.md")
    wait_for(lambda: project.status()["queued"].get("pm") == 2, what="d and e queued")
    assert len(project.records()) == 1
    gate.touch()
    wait_for(lambda: len(project.folder("pm", "archive")) == 5, SLOW, "all five archived")
    assert orch.stop() == 0
    first, second = sorted(project.records(), key=lambda r: r["run_id"])
    assert names(second) == ["d.md", "e.md"]
    active = project.root / "memo" / "pm" / "active"
    for record, batch in ((first, "abc"), (second, "de")):
        paths = "\n".join(str(active / f"{letter}.md") for letter in batch)
        assert record["memos"] == paths.splitlines()
        assert record["env_memos"] == paths and record["memo"] is None
        assert record["prompt"] == f"paths=[{paths}]\ninput=[{paths}]\nmemo=[]\npath=[]\n"
    first_end = next(e["end"] for e in ends(project) if e["run_id"] == first["run_id"])
    assert second["start"] >= first_end
    assert started_memos(project) == Counter({f"{letter}.md": 1 for letter in "abcde"})


def test_ignored_file_names_never_run(project: Project) -> None:
    project.configure({"builder": {}})
    ignored = [".hidden.md", "x.md~", ".#x.md", "x.swp", "x.tmp", "notes.txt", "x.md.swp", "#x.md#"]
    inbox = project.root / "memo" / "builder" / "inbox"
    inbox.mkdir(parents=True)
    for name in ignored[:4]:  # some present at start-up, some written while it runs
        (inbox / name).write_text("---\nid: no\n---\nnever\n", encoding="utf-8")
    orch = up(project)
    for name in ignored[4:]:
        (inbox / name).write_text("---\nid: no\n---\nnever\n", encoding="utf-8")
    project.drop("builder", "real.md")
    wait_for(lambda: "real.md" in project.folder("builder", "archive"), what="the real memo archived")
    let_the_orchestrator_act(project, "builder", "probe.md")
    assert orch.stop() == 0
    assert sorted(p.name for p in inbox.iterdir()) == sorted(ignored)
    assert started_memos(project) == Counter({"real.md": 1, "probe.md": 1})


# ---------------------------------------------------------------- prompts
def test_every_placeholder_and_double_dollar_render(project: Project) -> None:
    prompt = (
        "role=$role\nrun_id=$run_id\nattempt=$attempt\nmemo_path=$memo_path\nmemo_paths=$memo_paths\n"
        "input=$INPUT_MEMO_FILES\nroot=$root\nnow=$now\ndate=$date\nweekday=$weekday\n"
        "dollar=$$ literal=$$role braced=${role}s\nmemo<<<$memo>>>"
    )
    project.configure({"builder": {}}, prompt=prompt)
    orch = up(project)
    text = project.memo_text({"id": "P-1", "subject": "prices"}, "costs $5, not ${role}; see $memo")
    (project.root / "memo" / "builder" / "inbox" / "p.md").write_text(text, encoding="utf-8")
    record = wait_for(lambda: project.records(), what="the agent started")[0]
    assert orch.stop() == 0
    head, memo = record["prompt"].split("memo<<<", 1)
    assert memo == text + ">>>"  # the memo's own '$' signs are not placeholders
    values = dict(line.split("=", 1) for line in head.splitlines()[:10])
    active = str(project.root / "memo" / "builder" / "active" / "p.md")
    assert values["role"] == "builder"
    assert values["run_id"] == str(record["run_id"]) and record["run_id"] >= 1
    assert values["attempt"] == "1"
    assert values["memo_path"] == values["memo_paths"] == values["input"] == active == record["memo"]
    assert values["root"] == str(project.root.resolve()) == record["root"]
    now = datetime.fromisoformat(values["now"])
    assert now.tzinfo is not None and abs(now.timestamp() - record["start"]) < 60
    assert values["date"] == now.date().isoformat()
    assert values["weekday"] == now.strftime("%A")
    assert head.splitlines()[10] == "dollar=$ literal=$role braced=builders"


def test_prompt_via_arg(project: Project) -> None:
    project.configure(
        {"builder": {"prompt_via": "arg", "env": {"STANDIN_PROMPT_VIA": "arg"}}}, prompt="run $run_id for $role:\n$memo"
    )
    orch = up(project)
    project.drop("builder", "arg.md", {"id": "ARG"}, body="a body with 'quotes' and $(no shell)")
    record = wait_for(lambda: project.records(), what="the agent started")[0]
    assert orch.stop() == 0
    memo = project.memo_text({"id": "ARG"}, "a body with 'quotes' and $(no shell)")
    expected = f"run {record['run_id']} for builder:\n" + memo
    assert record["argv"] == [expected] and record["prompt"] == expected
    # the log's header of the attempt is one line: the prompt is not written there (nor read back as its output)
    log = (project.root / ".orchestrator" / "logs" / f"{record['run_id']}-builder.log").read_text()
    (header,) = [line for line in log.splitlines() if line.startswith("=== run")]
    assert header.endswith(f"<the prompt, {len(expected.encode())} bytes>") and "quotes" not in log, log


def test_a_300_kb_memo_arrives_whole_through_stdin(project: Project) -> None:
    project.configure({"builder": {}}, prompt="start\n$memo\nend")
    orch = up(project)
    line = "日本語のメモ本文と ASCII text, 0123456789.\n"
    body = line * (300_000 // len(line.encode()) + 1)
    assert len(body.encode()) >= 300_000
    project.drop("builder", "big.md", {"id": "BIG"}, body=body)
    wait_for(lambda: project.folder("builder", "archive") == ["big.md"], SLOW, "the big memo archived")
    assert orch.stop() == 0
    (record,) = project.records()
    assert record["prompt"] == "start\n" + project.memo_text({"id": "BIG"}, body) + "\nend"


# ---------------------------------------------------------------- names, environment, processes
WEIRD_NAMES = [
    "with spaces in it.md",
    "日本語 メモ.md",
    "$(touch pwned-dollar).md",
    "`touch pwned-backtick`.md",
    "\"quotes\" and 'single'.md",
    "&|;<>.md",
    "a; touch pwned-semicolon; b.md",
    "$HOME and ${PATH} * ? [x].md",
]


@pytest.mark.parametrize("prompt_via", ["stdin", "arg"])
def test_file_names_with_spaces_japanese_and_shell_characters(project: Project, prompt_via: str) -> None:
    project.configure(
        {"builder": {"prompt_via": prompt_via, "env": {"STANDIN_PROMPT_VIA": prompt_via}}}, prompt="$memo_path"
    )
    orch = up(project)
    for name in WEIRD_NAMES:
        project.drop("builder", name, {"subject": name})
    wait_for(lambda: len(project.folder("builder", "archive")) == len(WEIRD_NAMES), SLOW, "every memo archived")
    assert orch.stop() == 0
    assert project.folder("builder", "archive") == sorted(WEIRD_NAMES)
    assert started_memos(project) == Counter({name: 1 for name in WEIRD_NAMES})
    for record in project.records():
        assert record["prompt"] == record["memo"]  # the path arrives as it is, unquoted and unexpanded
    stray = [p for p in project.root.rglob("pwned*")] + [p for p in Path.cwd().glob("pwned*")]
    assert stray == []
    for name in WEIRD_NAMES:
        assert f'"{name}"' in orch.output  # the subject, in the start line


def test_agent_environment_cwd_and_own_session(project: Project) -> None:
    (project.root / "work" / "space").mkdir(parents=True)
    project.configure(
        {
            "builder": {"env": {"EXTRA": "from the role"}, "cwd": "work/space"},
            "pm": {"batch": True},
        }
    )
    orch = up(project)
    project.drop("builder", "b.md")
    project.drop("pm", "p1.md")
    wait_for(lambda: len(project.records()) == 2, what="both agents started")
    archived(project, "builder", 1)
    archived(project, "pm", 1)
    assert orch.stop() == 0
    builder = next(r for r in project.records() if r["role"] == "builder")
    pm = next(r for r in project.records() if r["role"] == "pm")
    root = str(project.root.resolve())
    assert builder["memo"] == str(project.root / "memo" / "builder" / "active" / "b.md")
    assert builder["env_memos"] is None and builder["attempt"] == 1 and builder["root"] == root
    assert builder["extra_env"] == "from the role"
    assert builder["cwd"] == str(project.root.resolve() / "work" / "space")
    assert pm["memo"] is None and pm["env_memos"] == str(project.root / "memo" / "pm" / "active" / "p1.md")
    assert pm["extra_env"] is None and pm["cwd"] == root and pm["root"] == root
    assert {builder["run_id"], pm["run_id"]} == {1, 2}
    for record in (builder, pm):
        assert record["sid"] == record["pid"] == record["pgid"]  # its own session and process group
        assert record["sid"] != orch.proc.pid


def test_spawn_cmd_override_replaces_every_command(project: Project) -> None:
    project.configure(
        {"builder": {"command": ["no-such-agent-anywhere"]}, "reviewer": {"command": ["another-missing-agent", "-x"]}}
    )
    override = shlex.join([sys.executable, str(STAND_IN), "--flag", "two words"])
    orch = up(project, ORCHESTRATOR_SPAWN_CMD=override)
    project.drop("builder", "b.md")
    project.drop("reviewer", "r.md")
    archived(project, "builder", 1)
    archived(project, "reviewer", 1)
    assert orch.stop() == 0
    assert sorted(r["role"] for r in project.records()) == ["builder", "reviewer"]
    for record in project.records():
        assert record["argv"] == ["--flag", "two words"]


def test_spawn_cmd_echo(project: Project) -> None:
    project.configure({"builder": {"prompt_via": "arg"}}, prompt="PROMPT for $role")
    orch = up(project, ORCHESTRATOR_SPAWN_CMD="echo 'said:'")
    project.drop("builder", "e.md", {"id": "E-1"})
    archived(project, "builder", 1)
    assert orch.stop() == 0
    assert project.records() == []
    (run,) = project.status()["recent"]
    assert run["state"] == "succeeded" and run["memo_id"] == "E-1"
    assert "said: PROMPT for builder" in Path(run["log"]).read_text(encoding="utf-8")


# ---------------------------------------------------------------- status
def test_status_while_running_after_and_without_orchestrator(project: Project) -> None:
    project.configure({"builder": {}})
    gate = project.root / "gate"
    orch = up(project)
    project.drop("builder", "s.md", gate_front(gate, id="S-1", subject="status check"))
    # the stand-in writes its start record a moment after the orchestrator has its pid: wait for both
    snap = wait_for(
        lambda: (s := project.status())["runs"] and s["runs"][0]["pid"] and project.records() and s,
        what="a running agent and its start record",
    )
    assert snap["running"] is True and snap["pid"] == orch.proc.pid
    assert snap["root"] == str(project.root.resolve())
    (run,) = snap["runs"]
    (record,) = project.records()
    assert run["run_id"] == record["run_id"] and run["pid"] == record["pid"]
    assert (run["role"], run["memo"], run["memo_id"], run["subject"]) == ("builder", "s.md", "S-1", "status check")
    assert (run["state"], run["attempt"]) == ("running", 1)
    assert datetime.fromisoformat(run["started_at"]).tzinfo is not None
    assert snap["limits"] == {"max_concurrent": 10, "running": 1}
    gate.touch()
    project.drop("builder", "f.md", {"id": "F-1", "agent": {"exit": 3}})
    wait_for(lambda: len(project.status()["recent"]) == 2, what="both runs finished")
    snap = project.status()
    assert snap["running"] is True and snap["runs"] == []
    recent = {r["memo_id"]: r for r in snap["recent"]}
    ok, bad = recent["S-1"], recent["F-1"]
    assert (ok["state"], ok["exit_code"], ok["reason"], ok["memo"]) == ("succeeded", 0, None, "s.md")
    assert (bad["state"], bad["exit_code"], bad["memo"]) == ("failed", 3, "f.md")
    assert "exit code 3" in bad["reason"]
    for item in (ok, bad):
        assert datetime.fromisoformat(item["ended_at"]) >= datetime.fromisoformat(item["started_at"])
    assert orch.stop() == 0
    after = project.status()
    assert after["running"] is False and after["pid"] is None and after["runs"] == []
    assert [(r["run_id"], r["state"], r["exit_code"]) for r in after["recent"]] == [
        (r["run_id"], r["state"], r["exit_code"]) for r in snap["recent"]
    ]
    human = project.cli("status")
    assert human.returncode == 0 and "no orchestrator running" in human.stdout and "S-1" in human.stdout


def test_status_of_a_root_that_never_ran(project: Project) -> None:
    project.configure({"builder": {}})
    snap = project.status()
    assert snap["running"] is False and snap["runs"] == [] and snap["recent"] == []


def test_second_up_for_the_same_root_is_refused_naming_the_first(project: Project) -> None:
    project.configure({"builder": {}})
    orch = up(project)
    for _ in range(2):  # a refused `up` leaves the first one's lock and pid file alone
        second = project.cli("up", "--plain", timeout=30)
        assert second.returncode == 5, second.stderr
        assert f"pid {orch.proc.pid}" in second.stderr and "already running" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1 and "Traceback" not in second.stderr
    project.drop("builder", "still-works.md")
    archived(project, "builder", 1)
    assert orch.stop() == 0


# ---------------------------------------------------------------- ending
@pytest.mark.os_level
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_one_signal_lets_the_running_agent_finish_and_starts_nothing_new(project: Project, signum: int) -> None:
    project.configure({"builder": {}})
    gate = project.root / "gate"
    orch = up(project)
    project.drop("builder", "running.md", gate_front(gate))
    wait_for(lambda: project.records(), what="the agent started")
    orch.signal(signum)
    orch.wait_output("ending:")
    project.drop("builder", "late.md")
    wait_for(lambda: project.status().get("queued", {}).get("builder") == 1, what="the late memo seen and held")
    assert orch.proc.poll() is None  # still waiting for its agent
    gate.touch()
    assert orch.wait(SLOW) == 0
    assert project.folder("builder", "archive") == ["running.md"]
    assert project.folder("builder", "inbox") == ["late.md"]
    assert project.folder("builder", "active") == []
    assert started_memos(project) == Counter({"running.md": 1})
    (end,) = ends(project)
    assert end["exit"] == 0  # finished by itself, not stopped


# ---------------------------------------------------------------- the demo and real memos
def test_demo_ends_by_itself_with_every_role_archiving(tmp_path: Path) -> None:
    env = dict(os.environ, ORCHESTRATOR_DEMO_SPEED="0.05", TMPDIR=str(tmp_path), PYTHONUNBUFFERED="1")
    env.pop("ORCHESTRATOR_SPAWN_CMD", None)
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "demo"],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=100,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (folder,) = tmp_path.glob("orchestrator-demo-*")
    for role in ("project-manager", "builder", "reviewer"):
        assert list((folder / "memo" / role / "archive").glob("*.md")), f"{role} archived nothing:\n{result.stdout}"
        for stage in ("inbox", "active", "failed"):
            assert not list((folder / "memo" / role / stage).glob("*.md")), f"memo left in {role}/{stage}"
    assert "orchestrator exits with status 0" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_real_memos_from_yolo_web_each_run_once(project: Project) -> None:
    roles = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
    project.configure(
        {role: ({"batch": True} if role == "project-manager" else {}) for role in roles}, max_concurrent=4
    )
    fronts: dict[tuple[str, str], dict[str, Any]] = {}
    for role in roles:
        inbox = project.root / "memo" / role / "inbox"
        inbox.mkdir(parents=True, exist_ok=True)
        for source in sorted((FIXTURES / role).glob("*.md")):
            shutil.copyfile(source, inbox / source.name)
            text = source.read_text(encoding="utf-8")
            fronts[role, source.name] = yaml.safe_load(text.split("---", 2)[1])
    assert len(fronts) >= 30
    assert sum(1 for f in fronts.values() if f.get("reply_to")) >= 20
    orch = up(project)
    wait_for(
        lambda: sum(len(project.folder(r, "archive")) for r in roles) == len(fronts),
        SLOW * 2,
        "every real memo archived",
    )
    snap = project.status()
    assert orch.stop() == 0
    starts = Counter((r["role"], name) for r in project.records() for name in names(r))
    assert starts == Counter({key: 1 for key in fronts})
    for record in project.records():  # the memo reached the agent byte for byte
        if record["role"] != "project-manager":
            source = FIXTURES / record["role"] / names(record)[0]
            assert record["prompt"].endswith(source.read_text(encoding="utf-8"))
    assert len(snap["recent"]) == 20
    for run in snap["recent"] + project.status()["recent"]:
        assert run["state"] == "succeeded"
        assert run["memo_id"] == str(fronts[run["role"], run["memo"]]["id"])
    history = json.loads(project.cli("history", "--json").stdout)
    for run in history["runs"]:
        assert run["memo_id"] == str(fronts[run["role"], run["memo"]]["id"])
    assert sorted(f"{r['role']}/{r['memo']}" for r in history["runs"] if r["role"] != "project-manager") == sorted(
        f"{role}/{name}" for role, name in fronts if role != "project-manager"
    )
