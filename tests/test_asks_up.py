"""Asking a person in a real ``up`` with the stand-in agent (a command agent): ``orchestrator ask`` from inside the
run, the run waiting in ``waiting/`` across a restart of ``up``, an agent's ``orchestrator answer`` refused (exit 13),
``status``, ``trace`` and ``history`` showing it, the answer in the next run's prompt, and ``cancel`` of a waiting
memo.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import Project, wait_for


def results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def starts(project: Project, memo: str) -> list[dict[str, Any]]:
    return [r for r in project.records() if r.get("memo") and Path(r["memo"]).name == memo and "prompt" in r]


def test_a_command_agent_asks_waits_across_a_restart_and_runs_again_with_the_answer(project: Project) -> None:
    told = project.root / "told.jsonl"
    record = "import sys\nopen(sys.argv[1], 'ab').write(sys.stdin.buffer.read() + b'\\n')\n"  # a line per event
    argv = [sys.executable, "-c", record, str(told)]
    channel = {"kind": "command", "argv": argv, "events": ["needs_input"], "remind": "1s"}
    project.configure({"builder": {"max_concurrent": 1}}, notifications=[channel])
    said = project.root / "said.jsonl"
    agent = {
        "commands": [["ask", "Which design, A or B?"], ["answer", "A.md", "I decide myself"]],
        "results": str(said),
    }
    orch = project.up()
    project.drop("builder", "A.md", front={"id": "A", "agent": agent})
    question = project.root / "memo/builder/waiting/A.question"
    wait_for(question.exists, 30, "A.md in waiting/ with its question")
    asked, answered = results(said)
    assert asked["code"] == 0 and "Your question is recorded. End your run now" in asked["stdout"], asked
    assert answered["code"] == 13 and "`orchestrator answer` is for people" in answered["stderr"], answered
    assert question.read_text().startswith("question: Which design, A or B?")
    wait_for(lambda: len(results(told)) >= 2 if told.exists() else False, 30, "the question told, then reminded")
    event, reminder = results(told)[:2]
    assert (event["event"], event["memo"], event["question"]) == ("needs_input", "A.md", "Which design, A or B?")
    assert "reminder" not in event and reminder == {**event, "reminder": 1, "id": reminder["id"]}, reminder
    assert reminder["id"] != event["id"], "a reminder is a notification of its own"
    project.drop("builder", "B.md", front={"id": "B"})
    wait_for(lambda: "B.md" in project.folder("builder", "archive"), 30, "B.md run while A.md waits")

    orch.stop()
    offline = project.cli("status").stdout
    assert "waiting for a person: builder 1 (memo/<role>/waiting/" in offline, offline
    orch = project.up()  # the question survives a restart
    needs = project.status()["needs_input"]
    assert [(n["memo"], n["kind"], n["question"]) for n in needs] == [("A.md", "question", "Which design, A or B?")]
    text = project.cli("status").stdout
    assert "needs input: builder/A.md" in text and "Which design, A or B?" in text, text
    assert "waiting" in project.cli("trace", "A.md").stdout
    assert "returned (waiting for a person)" in project.cli("history").stdout
    rows = [r for r in json.loads(project.cli("history", "--json").stdout)["runs"] if r["memo"] == "A.md"]
    assert [(r["state"], r["reason"]) for r in rows] == [("returned", "waiting: asks a person: Which design, A or B?")]

    said.unlink()
    done = project.cli("answer", "A", "Design B, the smaller one")
    assert done.returncode == 0 and "A.md (builder): answered; queued to run again" in done.stdout, done
    wait_for(lambda: len(starts(project, "A.md")) == 2, 30, "A.md run again")
    again = starts(project, "A.md")[1]
    assert again["attempt"] == 1, "asking used no attempt"
    assert "You asked a person: Which design, A or B?" in again["prompt"]
    assert "Design B, the smaller one" in again["prompt"]
    # it asks again (the same memo): it waits again, and a waiting memo is cancelled like a queued one
    wait_for(question.exists, 30, "A.md waiting again")
    cancelled = project.cli("cancel", "A")
    assert cancelled.returncode == 0, cancelled.stderr
    assert project.folder("builder", "cancelled") == ["A.md"] and project.status()["needs_input"] == []
    assert not (project.root / "memo/builder/waiting/A.question").exists()
    orch.stop()


def test_a_run_waiting_in_a_workspace_keeps_its_work_there_across_a_restart_and_no_other_memo_works_there(
    project: Project,
) -> None:
    from test_workspaces import WORKTREE, records, repository, show, start

    repository(project, {"builder": {"workspace": WORKTREE, "max_concurrent": 2}})
    start(project)
    body = "see half.txt\nwrite half.txt begun before asking\nask-unless answered.flag Which one?\nwrite done.txt done"
    project.drop("builder", "a.md", {"id": "asks"}, body=body)
    wait_for((project.root / "memo/builder/waiting/a.question").exists, 30, "a.md waiting")
    project.procs[0].wait_output("its work stays in workspace asks while it waits")
    assert project.procs[0].stop() == 0
    start(project)  # the waiting workspace is known again from waiting/
    project.drop("builder", "b.md", {"id": "other", "workspace": "asks"}, body="see half.txt")
    wait_for(lambda: "(a run waiting for a person)" in project.procs[-1].output, 30, "b.md held back")
    assert project.folder("builder", "inbox") == ["b.md"] and len(records(project)) == 1
    # the follow-up waits for the answer, but holds no memo for another workspace behind it
    project.drop("builder", "c.md", {"id": "elsewhere"}, body="write c.txt c")
    wait_for(lambda: project.folder("builder", "archive") == ["c.md"], 30, "c.md run while b.md waits")
    assert project.folder("builder", "inbox") == ["b.md"]
    (project.root / "answered.flag").touch()
    assert project.cli("answer", "asks", "the first").returncode == 0
    wait_for(lambda: project.folder("builder", "archive") == ["a.md", "b.md", "c.md"], 30, "all done, a.md before b.md")
    first, elsewhere, again, other = records(project)
    assert elsewhere["memo"] == "c.md" and elsewhere["cwd"] != first["cwd"]
    assert again["seen"] == {"half.txt": "begun before asking"}, "the waiting run's work was kept for it"
    assert other["memo"] == "b.md" and show(project, "orchestrator/asks", "done.txt") == "done"
    assert project.procs[-1].stop() == 0


def test_the_dashboards_answer_box_sends_what_orchestrator_answer_sends(project: Project) -> None:
    from web_harness import start

    project.configure({"builder": {}}, web={})
    board = start(project)
    said = project.root / "said.jsonl"
    question = project.root / "memo/builder/waiting/D.question"
    project.drop(
        "builder", "D.md", front={"id": "D", "agent": {"commands": [["ask", "Ship it?"]], "results": str(said)}}
    )
    wait_for(question.exists, 30, "D.md waiting")
    page = board.get("/").text
    assert "Needs input" in page and "Ship it?" in page
    assert 'form class="answer" data-memo="memo/builder/waiting/D.md"' in page
    refused = board.post("/api/v1/requests/answer", {"memo": "D.md", "allow": True, "deny": True})
    assert refused.status_code == 400 and "not both" in refused.text, refused.text
    # what the box sends: the memo's path, which names its role (a file name may wait in two roles)
    answered = board.post("/api/v1/requests/answer", {"memo": "memo/builder/waiting/D.md", "text": "yes, ship it"})
    assert answered.status_code == 200 and answered.json()["decision"] == "allow", answered.text
    assert "D.md answered by a person at the dashboard" in board.orch.output
    wait_for(lambda: len(starts(project, "D.md")) == 2, 30, "D.md run again")
    assert "yes, ship it" in starts(project, "D.md")[1]["prompt"]
    board.close()
    assert board.orch.stop() == 0


def test_up_refuses_approve_on_a_role_whose_calls_no_hook_can_hold(project: Project) -> None:
    project.configure({"builder": {"approve": ["Bash(git push:*)"]}})
    done = project.cli("up")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and "roles.builder.approve: only a Claude CLI role with --output-format stream-json" in lines[0]
    )


def test_an_answered_memo_back_under_another_name_and_across_a_restart_still_carries_its_waiting_work(
    project: Project,
) -> None:
    """The waiting memo is known by its id: its answer may put it back under another name (a memo of its name in
    the inbox), and a restart may come before it starts; another memo of its name is not it."""
    from test_workspaces import WORKTREE, records, repository, start

    repository(project, {"builder": {"workspace": WORKTREE, "max_concurrent": 1}})
    start(project)
    body = "see half.txt\nwrite half.txt begun before asking\nask-unless answered.flag Which one?\nwrite done.txt done"
    project.drop("builder", "a.md", {"id": "asks"}, body=body)
    wait_for((project.root / "memo/builder/waiting/a.question").exists, 30, "a.md waiting")
    project.drop("builder", "busy.md", {"id": "busy"}, body="wait go.out")  # the one slot, in another workspace
    wait_for(lambda: len(records(project)) == 2, 30, "busy.md at work")
    project.drop("builder", "a.md", {"id": "other", "workspace": "asks"}, body="see half.txt")  # its name, not it
    (project.root / "answered.flag").touch()
    answered = project.cli("answer", "asks", "the first", "--json")
    assert answered.returncode == 0 and json.loads(answered.stdout)["queued"].endswith("inbox/a.1.md"), answered
    project.procs[-1].proc.kill()  # SIGKILL before the answered memo could start
    project.procs[-1].proc.wait(20)
    start(project)
    project.procs[-1].wait_output("orchestrator up:")
    (project.root / "go.out").touch()
    wait_for(lambda: sorted(project.folder("builder", "archive")) == ["a.1.md", "a.md", "busy.md"], 60, "all done")
    by_memo = {record["memo"]: record for record in records(project)[2:]}
    assert by_memo["a.1.md"]["seen"] == {"half.txt": "begun before asking"}, "its waiting work, carried on"
    assert by_memo["a.md"]["seen"] == {"half.txt": "begun before asking"}, "the other ran after it, on its commit"
    assert project.procs[-1].stop() == 0


def test_ask_outside_a_run_says_what_its_run_id_is(project: Project) -> None:
    """Defect: ``ORCHESTRATOR_RUN_ID=abc`` was said to be "not set"."""
    project.configure({"builder": {}})
    for value, said in (("abc", "ORCHESTRATOR_RUN_ID is 'abc', not a run's number"), ("", "is not set")):
        result = project.cli("ask", "Which one?", ORCHESTRATOR_RUN_ID=value)
        assert result.returncode == 2 and said in result.stderr, result.stderr


def test_answer_takes_a_path_from_here_and_an_id_with_a_slash_as_it_is(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from orchestrator.commands import asking

    sent: list[str] = []
    monkeypatch.setattr(asking.control, "call", lambda _root, _what, **fields: sent.append(fields["memo"]) or {})
    monkeypatch.chdir(project.root)
    (project.root / "memo/builder/waiting").mkdir(parents=True)
    (project.root / "memo/builder/waiting/a.md").write_text("x", encoding="utf-8")
    for memo in ("memo/builder/waiting/a.md", "team/B-1"):
        args = SimpleNamespace(memo=memo, text="yes", allow=False, deny=False, note=None, json=True, root=project.root)
        asking.cmd_answer(args)  # type: ignore[arg-type]
    assert sent == [str(project.root / "memo/builder/waiting/a.md"), "team/B-1"]  # defect: the id made a path
