"""`orchestrator cancel` end to end: a real orchestrator, stand-in agents, real process trees.

Every process a cancelled agent started is checked dead by pid *and* create time
once the command has returned; every cancelled memo must end in
``memo/<role>/cancelled/`` and never start (again).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from conftest import Project, dead, error_line, read_found, wait_for
from orchestrator.core.events import CancelRequested
from replay import Replay

LONG = 300  # seconds an agent would work if nobody stopped it


def rec_for(project: Project, name: str) -> list[dict[str, Any]]:
    """Every recorded start of the memo with this file name."""
    return [
        r for r in project.records() if any(Path(m).name == name for m in (r.get("memos") or [r.get("memo") or ""]))
    ]


def started(project: Project, name: str) -> dict[str, Any]:
    """Wait for the memo's agent to start; its record."""
    return wait_for(lambda: (rec_for(project, name) or [None])[0], what=f"{name}'s agent to start")


def tree_of(record: dict[str, Any]) -> dict[int, float]:
    """The agent's pid and its children's, each with its create time, taken while they live."""
    out = {}
    for pid in [record["pid"], *record["children"]]:
        out[pid] = psutil.Process(pid).create_time()
    return out


def alive_of(tree: dict[int, float]) -> list[int]:
    return [pid for pid, ctime in tree.items() if not dead(pid, ctime)]


def cancel(project: Project, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "cancel", *args, "--root", str(project.root)],
        capture_output=True,
        text=True,
        env=project.env(),
        cwd=cwd,
        timeout=60,
    )


def cancel_json(project: Project, *args: str, cwd: Path | None = None) -> dict[str, Any]:
    result = cancel(project, *args, "--json", cwd=cwd)
    assert result.returncode == 0, f"cancel {args} exited {result.returncode}: {result.stderr}"
    return json.loads(result.stdout)


def one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The command failed with ``code`` and said why in one line, without a traceback."""
    assert result.returncode == code, f"expected exit {code}, got {result.returncode}: {result.stdout}{result.stderr}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and error_line(lines[0]), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    return lines[0]


def queued_memos(project: Project, role: str) -> list[str]:
    return project.status().get("queued_memos", {}).get(role, [])


def live_runs(project: Project) -> list[dict[str, Any]]:
    return project.status()["runs"]


def front_matter(path: Path) -> tuple[dict[str, Any], str]:
    return split_front(path.read_text(encoding="utf-8"))


def split_front(text: str) -> tuple[dict[str, Any], str]:
    _, head, body = text.split("---\n", 2)
    return yaml.safe_load(head), body


def drain_and_stop(project: Project, orch: Any, sentinel_role: str = "builder") -> None:
    """Prove the loop still works after the cancels, then end it cleanly."""
    name = f"zz-sentinel-{time.monotonic_ns()}.md"
    project.drop(sentinel_role, name, {"id": name[:-3]})
    wait_for(lambda: name in project.folder(sentinel_role, "archive"), what=f"{name} archived")
    assert orch.stop() == 0, orch.output


# ------------------------------------------------------------------ running


@pytest.mark.os_level
def test_cancel_running_agent_and_its_grandchild(project: Project) -> None:
    project.configure({"builder": {"grace": "10s"}})
    orch = project.up()
    project.drop(
        "builder",
        "B-031.md",
        {"id": "B-031", "subject": "three articles", "agent": {"sleep": LONG, "grandchild": True}},
    )
    record = started(project, "B-031.md")
    tree = tree_of(record)
    agent, grandchild = record["pid"], record["children"][0]
    assert len(tree) == 2 and alive_of(tree) == list(tree)

    answer = cancel_json(project, "B-031", "--reason", "the owner called it off")

    assert alive_of(tree) == [], "cancel returned while processes of the run still lived"
    assert answer["memo"] == "B-031.md" and answer["memo_id"] == "B-031" and answer["role"] == "builder"
    assert answer["state"] == "cancelled" and answer["previous_state"] == "running"
    assert {agent, grandchild} <= set(answer["pids"])
    assert isinstance(answer["seconds"], (int, float)) and 0 <= answer["seconds"] < 10  # SIGTERM was enough
    assert answer["escalated"] is False and answer["survivors"] == []
    assert project.folder("builder", "cancelled") == ["B-031.md"]
    assert project.folder("builder", "active") == [] and project.folder("builder", "inbox") == []
    assert live_runs(project) == []
    drain_and_stop(project, orch)
    assert len(rec_for(project, "B-031.md")) == 1, "a cancelled memo ran again"


@pytest.mark.os_level
def test_cancel_escalates_to_sigkill_and_ends_orphaned_and_setsid_grandchildren(project: Project) -> None:
    project.configure({"builder": {"grace": "1s"}})
    orch = project.up()
    project.drop(
        "builder",
        "stubborn.md",
        {"id": "S-1", "agent": {"sleep": LONG, "ignore_term": True, "orphan": True, "setsid": True}},
    )
    record = started(project, "stubborn.md")
    tree = tree_of(record)
    orphan, escaped = record["children"]
    # what makes these two hard: the orphan's parent is gone, the other left the agent's process group
    assert psutil.Process(orphan).ppid() != record["pid"]
    wait_for(lambda: os.getpgid(escaped) != record["pgid"], what="the setsid grandchild to leave the group")

    answer = cancel_json(project, "S-1")

    assert alive_of(tree) == [], f"still alive after cancel: {alive_of(tree)}"
    assert answer["escalated"] is True and answer["survivors"] == []
    assert answer["seconds"] >= 1.0  # the grace was given before SIGKILL
    assert {record["pid"], orphan, escaped} <= set(answer["pids"])
    assert project.folder("builder", "cancelled") == ["stubborn.md"]
    assert "grace of 1s over; SIGKILL" in orch.output
    drain_and_stop(project, orch)


# ------------------------------------------------------------------ queued and retry wait


def test_cancel_queued_memo_never_runs(project: Project) -> None:
    project.configure({"builder": {"max_concurrent": 1}})
    orch = project.up()
    project.drop("builder", "A.md", {"id": "A", "agent": {"sleep": LONG}})
    started(project, "A.md")
    project.drop("builder", "B.md", {"id": "B", "subject": "later"})
    wait_for(lambda: queued_memos(project, "builder") == ["B.md"], what="B.md queued")

    answer = cancel_json(project, "B")

    assert answer["previous_state"] == "queued" and answer["state"] == "cancelled" and answer["pids"] == []
    assert project.folder("builder", "cancelled") == ["B.md"] and project.folder("builder", "inbox") == []
    assert queued_memos(project, "builder") == []
    # free the slot: B must not take it
    assert cancel_json(project, "A")["previous_state"] == "running"
    drain_and_stop(project, orch)
    assert rec_for(project, "B.md") == []
    assert sorted(project.folder("builder", "cancelled")) == ["A.md", "B.md"]


def test_cancel_in_retry_wait_is_never_retried(tmp_path: Path) -> None:
    """A replay (``tests/replay.py``): the retry's timer is on the stepped clock, so its moment passes at once."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"retry": {"max": 2, "backoff": ["5s"]}}})
        await r.drop("builder", "F.md", front={"id": "F"})
        await r.exit("F", 1)
        assert r.state("F") == "retry_wait" and r.clock.pending() == pytest.approx([5.0])

        reply = await r.request(CancelRequested, memo="F.md")
        answer = reply.result()

        assert answer["previous_state"] == "retry_wait" and answer["state"] == "cancelled"
        assert r.folder("builder", "cancelled") == ["F.md"] and r.folder("builder", "active") == []
        assert r.sup.runs == {}
        await r.advance(5)  # the retry's moment passes
        await r.drop("builder", "G.md", front={"id": "G"})  # behind anything the loop would have started
        assert [a.spec.memo_paths[0].name for a in r.spawner.agents] == ["F.md", "G.md"], (
            "the cancelled memo was retried"
        )
        r.close()

    asyncio.run(scenario(tmp_path))


# ------------------------------------------------------------------ naming a memo


def test_cancel_by_id_file_name_stem_and_paths(project: Project) -> None:
    project.configure({"builder": {"max_concurrent": 2}})
    orch = project.up()
    inbox = project.root / "memo" / "builder" / "inbox"
    project.drop("builder", "R1.md", {"id": "run-1", "agent": {"sleep": LONG}})
    project.drop("builder", "R2.md", {"id": "run-2", "agent": {"sleep": LONG}})
    trees = {name: tree_of(started(project, name)) for name in ("R1.md", "R2.md")}
    names = [f"M{i}.md" for i in range(1, 6)]
    for name in names:
        project.drop("builder", name, {"id": f"id-{name[:-3]}"})
    wait_for(lambda: queued_memos(project, "builder") == names, what="five queued memos")

    forms: list[tuple[str, tuple[str, ...], Path | None]] = [
        ("M1.md", ("id-M1",), None),  # front-matter id
        ("M2.md", ("M2.md",), None),  # file name
        ("M3.md", ("M3",), None),  # file name without .md
        ("M4.md", (str(inbox / "M4.md"),), None),  # absolute path
        ("M5.md", ("memo/builder/inbox/M5.md",), project.root),  # relative path
        ("R1.md", ("memo/builder/inbox/R1.md",), project.root),  # where it was dropped; it runs from active/ now
        ("R2.md", (str(project.root / "memo" / "builder" / "active" / "R2.md"),), None),  # where it runs
    ]
    for name, args, cwd in forms:
        answer = cancel_json(project, *args, cwd=cwd)
        assert answer["memo"] == name, f"cancel {args} cancelled {answer['memo']}"
        assert answer["state"] == "cancelled"
    assert alive_of(trees["R1.md"]) == [] and alive_of(trees["R2.md"]) == []
    assert project.folder("builder", "cancelled") == sorted(names + ["R1.md", "R2.md"])
    drain_and_stop(project, orch)
    assert not any(rec_for(project, name) for name in names)


def test_unknown_memo_is_refused_with_one_line(project: Project) -> None:
    project.configure()
    orch = project.up()
    line = one_line_error(cancel(project, "no-such-memo"), 6)
    assert "no-such-memo" in line
    one_line_error(cancel(project, str(project.root / "memo" / "builder" / "inbox" / "nope.md")), 6)
    one_line_error(cancel(project, "--role", "no-such-role"), 6)
    assert orch.stop() == 0


def test_finished_memo_is_refused_saying_how_it_ended(project: Project) -> None:
    project.configure()
    orch = project.up()
    project.drop("builder", "done.md", {"id": "D-1"})
    project.drop("builder", "broke.md", {"id": "X-1", "agent": {"exit": 1}})
    wait_for(lambda: project.folder("builder", "archive") == ["done.md"], what="done.md archived")
    wait_for(lambda: project.folder("builder", "failed") == ["broke.md"], what="broke.md failed")

    for query in ("D-1", "done.md", "done", str(project.root / "memo" / "builder" / "archive" / "done.md")):
        line = one_line_error(cancel(project, query), 7)
        assert "already finished: succeeded" in line and "builder" in line, line
    assert "already finished: failed" in one_line_error(cancel(project, "X-1"), 7)
    project.drop("builder", "called-off.md", {"id": "C-1", "agent": {"sleep": LONG}})
    started(project, "called-off.md")
    cancel_json(project, "C-1")
    assert "already finished: cancelled" in one_line_error(cancel(project, "C-1"), 7)
    drain_and_stop(project, orch)


def test_ambiguous_id_lists_candidates_and_all_cancels_them(project: Project) -> None:
    # the real corpus repeats ids across roles; here the same id and the same file name in two roles
    project.configure({"builder": {}, "reviewer": {}})
    orch = project.up()
    name = "19c561f66c7-re-define-minimal-process-conventions.md"
    for role in ("builder", "reviewer"):
        project.drop(role, name, {"id": "19c561f66c7", "subject": f"for {role}", "agent": {"sleep": LONG}})
    trees = {}
    wait_for(lambda: len(rec_for(project, name)) == 2, what="both agents started")
    for record in rec_for(project, name):
        trees[record["role"]] = tree_of(record)

    for query in ("19c561f66c7", name, name[:-3]):
        line = one_line_error(cancel(project, query), 8)
        assert f"builder/{name}" in line and f"reviewer/{name}" in line and "--all" in line, line
    assert alive_of(trees["builder"]) and alive_of(trees["reviewer"])
    assert len(live_runs(project)) == 2

    # a path names one of them
    only = cancel_json(project, f"memo/reviewer/inbox/{name}", cwd=project.root)
    assert only["role"] == "reviewer" and alive_of(trees["reviewer"]) == [] and alive_of(trees["builder"])
    project.drop("reviewer", name, {"id": "19c561f66c7", "agent": {"sleep": LONG}})
    wait_for(lambda: len(rec_for(project, name)) == 3, what="the reviewer's second copy started")
    trees["reviewer"] = tree_of(rec_for(project, name)[-1])

    answer = cancel_json(project, "19c561f66c7", "--all")

    assert answer["count"] == 2
    assert sorted(item["role"] for item in answer["cancelled"]) == ["builder", "reviewer"]
    assert alive_of(trees["builder"]) == [] and alive_of(trees["reviewer"]) == []
    assert project.folder("builder", "cancelled") == [name]
    assert len(project.folder("reviewer", "cancelled")) == 2
    drain_and_stop(project, orch)


# ------------------------------------------------------------------ roles and batches


def test_cancel_role_stops_all_its_queued_and_running_work(project: Project) -> None:
    project.configure({"builder": {"max_concurrent": 2}, "reviewer": {}})
    orch = project.up()
    for name in ("b1.md", "b2.md"):
        project.drop("builder", name, {"agent": {"sleep": LONG, "grandchild": True}})
    project.drop("reviewer", "r1.md", {"agent": {"sleep": LONG}})
    trees = {name: tree_of(started(project, name)) for name in ("b1.md", "b2.md", "r1.md")}
    project.drop("builder", "b3.md", {"agent": {"sleep": LONG}})
    wait_for(lambda: queued_memos(project, "builder") == ["b3.md"], what="b3.md queued")

    answer = cancel_json(project, "--role", "builder", "--reason", "builder is off the project")

    assert answer["count"] == 3
    assert sorted((i["memo"], i["previous_state"]) for i in answer["cancelled"]) == [
        ("b1.md", "running"),
        ("b2.md", "running"),
        ("b3.md", "queued"),
    ]
    assert alive_of(trees["b1.md"]) == [] and alive_of(trees["b2.md"]) == []
    assert project.folder("builder", "cancelled") == ["b1.md", "b2.md", "b3.md"]
    assert alive_of(trees["r1.md"]) == list(trees["r1.md"]), "another role's agent was touched"
    assert [r["memo"] for r in live_runs(project)] == ["r1.md"]

    empty = cancel(project, "--role", "builder")
    assert empty.returncode == 0 and "no queued or running work" in empty.stdout
    cancel_json(project, "--role", "reviewer")
    drain_and_stop(project, orch)
    assert rec_for(project, "b3.md") == []


def test_cancelling_a_batch_run_cancels_every_memo_it_holds(project: Project) -> None:
    project.configure({"project-manager": {"batch": True}})
    names = ["a-first.md", "b-second.md", "c-third.md"]
    past = time.time() - 60
    for name in names:  # already complete when the orchestrator starts: one batch run takes them all
        path = project.drop("project-manager", name, {"id": name[:-3], "agent": {"sleep": LONG, "grandchild": True}})
        os.utime(path, (past, past))
    orch = project.up()
    record = started(project, "a-first.md")
    assert sorted(Path(m).name for m in record["memos"]) == names
    tree = tree_of(record)

    result = cancel(project, "b-second")

    assert result.returncode == 0, result.stderr
    assert "the batch run held a-first.md, b-second.md, c-third.md" in result.stdout, result.stdout
    assert alive_of(tree) == []
    assert project.folder("project-manager", "cancelled") == names
    assert project.folder("project-manager", "active") == []
    recent = project.status()["recent"][0]
    assert recent["state"] == "cancelled" and sorted(recent["memos"]) == names
    drain_and_stop(project, orch, sentinel_role="project-manager")
    assert len(project.records()) == 2  # the batch, then the sentinel


# ------------------------------------------------------------------ no orchestrator


def test_cancel_with_no_orchestrator_running(project: Project) -> None:
    project.configure()
    assert "not both" in one_line_error(cancel(project, "B-031", "--role", "builder"), 2)
    line = one_line_error(cancel(project, "B-031"), 4)
    assert "no orchestrator is running" in line and str(project.root) in line
    # a socket left behind by an orchestrator that was killed is no orchestrator either
    orch = project.up()
    orch.proc.kill()
    orch.wait()
    assert (project.root / ".orchestrator" / "control.sock").exists()
    assert "no orchestrator is running" in one_line_error(cancel(project, "B-031"), 4)
    assert "no orchestrator is running" in one_line_error(project.cli("stop"), 4)


# ------------------------------------------------------------------ the durable record


def test_cancellation_is_recorded_told_to_the_coordinator_and_flagged_on_late_replies(project: Project) -> None:
    project.configure({"builder": {}, "project-manager": {}}, notify="project-manager")
    orch = project.up()
    project.drop("builder", "B-031.md", {"id": "B-031", "subject": "three articles", "agent": {"sleep": LONG}})
    record = started(project, "B-031.md")
    wait_for(lambda: time.time() > record["start"] + 0.5, what="the agent to run a moment")

    answer = cancel_json(project, "B-031", "--reason", "the owner called it off")

    # status (live, through the channel): recent shows the decision and its reason
    recent = next(r for r in project.status()["recent"] if r["memo_id"] == "B-031")
    assert recent["state"] == "cancelled"
    assert "the owner called it off" in recent["reason"] and "cancelled by" in recent["reason"]

    # the notice memo in the coordinator's inbox (its own agent may already have moved it on)
    pm = project.root / "memo" / "project-manager"
    notice, text = read_found(pm, "*/*-cancelled-*.md", "the notice memo")
    assert answer["notice"] and Path(answer["notice"]).name == notice.name
    front, body = split_front(text)
    assert front["from"] == "orchestrator" and front["to"] == "project-manager"
    assert front["reply_to"] == "B-031" and front["subject"] == "Cancelled: three articles"
    assert front["tags"] == ["cancelled"] and front.get("id")
    assert "Reason: the owner called it off" in body
    assert "When: " in body and "State when cancelled: running" in body
    ran_line = next(line for line in body.splitlines() if "How long the agent had run:" in line)
    assert float(ran_line.rsplit(":", 1)[1].strip().removesuffix(" s")) >= 0.5
    log_line = next(line for line in body.splitlines() if "Agent log:" in line)
    log = Path(log_line.split("Agent log:", 1)[1].strip())
    assert log.is_file() and log.parent == project.root / ".orchestrator" / "logs"
    assert "B-031.md" in body and "memo/builder/cancelled/B-031.md" in body

    # the notice itself replies to the cancelled memo by design: it is the record, not a late report
    assert "NOTE FROM THE ORCHESTRATOR" not in started(project, notice.name)["prompt"]

    # a late report on the cancelled work: the coordinator reads a plain note at the top of its prompt
    project.drop("project-manager", "late-report.md", {"id": "R-9", "subject": "articles done", "reply_to": "B-031"})
    late = started(project, "late-report.md")
    assert late["prompt"].startswith("NOTE FROM THE ORCHESTRATOR"), late["prompt"][:300]
    first_line = late["prompt"].splitlines()[0]
    assert "B-031" in first_line and "CANCELLED" in first_line and "the owner called it off" in first_line
    # an ordinary memo gets no such note
    project.drop("project-manager", "plain.md", {"id": "P-1", "reply_to": "something-else"})
    assert "NOTE FROM THE ORCHESTRATOR" not in started(project, "plain.md")["prompt"]
    drain_and_stop(project, orch)
    # trace flags the late report, not the orchestrator's own notice (it flagged both)
    report = json.loads(project.cli("trace", "B-031", "--json").stdout)
    replies = {n["name"]: n["late_reply_to_cancelled"] for root in report["roots"] for n in root["replies"]}
    assert replies == {notice.name: False, "late-report.md": True}, replies

    # after the orchestrator is gone: status from the database, and the cancellation row
    snap = project.status()
    assert snap["running"] is False
    assert any(r["memo_id"] == "B-031" and r["state"] == "cancelled" and "owner" in r["reason"] for r in snap["recent"])
    db = sqlite3.connect(project.root / ".orchestrator" / "state.db")
    db.row_factory = sqlite3.Row
    rows = [dict(r) for r in db.execute("SELECT * FROM cancellations WHERE memo_id = 'B-031'")]
    db.close()
    assert len(rows) == 1
    row = rows[0]
    assert (
        row["role"] == "builder" and row["previous_state"] == "running" and row["reason"] == "the owner called it off"
    )
    assert row["who"] and row["cancelled_at"] and record["pid"] in json.loads(row["pids"])
    assert row["notice_path"] and Path(row["notice_path"]).name == notice.name


# ------------------------------------------------------------------ cancels that meet other stops


def test_cancel_during_a_timeout_wins_and_is_remembered_as_cancelled(project: Project) -> None:
    project.configure({"builder": {"timeout": "1.5s", "grace": "3s"}})
    orch = project.up()
    project.drop("builder", "slow.md", {"id": "T-1", "agent": {"sleep": LONG, "ignore_term": True, "grandchild": True}})
    tree = tree_of(started(project, "slow.md"))
    wait_for(lambda: [r["state"] for r in live_runs(project)] == ["timing_out"], what="the run timing out")

    answer = cancel_json(project, "T-1")

    assert answer["previous_state"] == "timing_out" and answer["state"] == "cancelled"
    assert alive_of(tree) == []
    assert project.folder("builder", "cancelled") == ["slow.md"] and project.folder("builder", "failed") == []
    assert project.status()["recent"][0]["state"] == "cancelled"
    drain_and_stop(project, orch)


def test_a_second_cancel_of_the_same_memo_waits_for_the_first(project: Project) -> None:
    project.configure({"builder": {"grace": "2s"}})
    orch = project.up()
    project.drop("builder", "stubborn.md", {"id": "S-2", "agent": {"sleep": LONG, "ignore_term": True}})
    tree = tree_of(started(project, "stubborn.md"))
    first = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "cancel", "S-2", "--json", "--root", str(project.root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=project.env(),
    )
    try:
        wait_for(lambda: [r["state"] for r in live_runs(project)] == ["cancelling"], what="the first cancel under way")
        second = cancel_json(project, "S-2")
        out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0, err
    assert json.loads(out)["previous_state"] == "running"
    assert second["previous_state"] == "cancelling" and second["state"] == "cancelled"
    assert "already being cancelled" in second["note"]
    assert alive_of(tree) == [] and project.folder("builder", "cancelled") == ["stubborn.md"]
    drain_and_stop(project, orch)
    db = sqlite3.connect(project.root / ".orchestrator" / "state.db")
    assert db.execute("SELECT COUNT(*) FROM cancellations WHERE memo_id = 'S-2'").fetchone()[0] == 1
    db.close()


def test_a_cancel_whose_orchestrator_crashes_says_it_may_yet_happen_and_the_next_start_finishes_it(
    project: Project,
) -> None:
    """The client cannot tell a crash from a refusal by the closed connection alone: it says the request may have
    taken effect (exit 11, as for any answer that did not come), never that it failed (exit 1). It did: the cancel
    was recorded, and the next start finishes it as cancelled."""
    project.configure({"builder": {"grace": "5s"}})  # the crash lands within it; the restart's stop waits it out
    orch = project.up()
    project.drop("builder", "stubborn.md", {"id": "S-3", "agent": {"sleep": LONG, "ignore_term": True}})
    tree = tree_of(started(project, "stubborn.md"))
    asked = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "cancel", "S-3", "--root", str(project.root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=project.env(),
    )
    try:
        wait_for(lambda: [r["state"] for r in live_runs(project)] == ["cancelling"], what="the cancel under way")
        orch.signal(9)
        orch.wait()
        _out, err = asked.communicate(timeout=60)
    finally:
        if asked.poll() is None:
            asked.kill()
            asked.communicate()
    assert asked.returncode == 11, err
    (line,) = err.splitlines()
    assert "closed the connection without answering `cancel S-3`: the request may have taken effect" in line, line
    assert "Traceback" not in err

    orch = project.up(wait_ready=False)
    wait_for(lambda: project.folder("builder", "cancelled") == ["stubborn.md"], what="the cancel finished at restart")
    assert alive_of(tree) == []
    orch.wait_output("finished at restart: the orchestrator stopped during the cancel")
    drain_and_stop(project, orch)
