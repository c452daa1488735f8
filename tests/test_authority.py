"""Agents act with an agent's authority: what an injected memo would make an agent ask for is refused.

End to end with a real ``up`` and stand-in agents whose "work" is the commands an
injected instruction would ask for (``commands:`` in the memo, see
``tests/agents/stand_in.py``); then the rules as pure functions.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import Project, wait_for
from orchestrator.control import authority, callers
from orchestrator.control.authority import PERSON, Caller, Level
from orchestrator.control.callers import LiveRun, UnknownCallerError
from orchestrator.core import grants

REFUSED = 13
UNSET_MARKS = {name: None for name in ("ORCHESTRATOR_RUN_ID", "ORCHESTRATOR_ROLE", "ORCHESTRATOR_ATTEMPT")}


def agent_runs(project: Project, role: str, name: str, commands: list[list[str]], **agent: Any) -> list[dict[str, Any]]:
    """Drop a memo whose agent runs ``commands``; once it has, what each said (argv, code, stdout, stderr)."""
    results = project.root / f"{name}.results"
    front = {"id": name.removesuffix(".md"), "from": "owner", "agent": {"commands": commands, "results": str(results)}}
    front["agent"].update(agent)
    project.drop(role, name, front)
    wait_for(lambda: Path(f"{results}.done").exists(), 60, f"{name}'s agent to run its commands")
    return [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]


def record_of(project: Project, name: str) -> dict[str, Any]:
    return next(r for r in project.records() if r["memo"] and Path(r["memo"]).name == name)


def running(project: Project, memo: str) -> bool:
    return any(r["memo"] == memo and r["state"] == "running" for r in project.status()["runs"])


def notices(project: Project, role: str) -> list[str]:
    """The texts of the refusal notices in ``role``'s folders, by name: its agent may move one on while they are
    read, so one is seen in no folder or in two."""
    texts = {}
    for path in (project.root / "memo" / role).glob("*/*.md"):
        with contextlib.suppress(FileNotFoundError):
            texts[path.name] = path.read_text()
    return [text for text in texts.values() if "tags: [refused]" in text]


def memo_texts(project: Project, role: str) -> list[str]:
    """The texts of the memos in ``role``'s folders: one moved on while they are read is skipped, or seen in two
    folders and kept once."""
    texts = set()
    for path in (project.root / "memo" / role).glob("*/*.md"):
        with contextlib.suppress(FileNotFoundError):
            texts.add(path.read_text())
    return sorted(texts)


def one_refusal(result: dict[str, Any]) -> str:
    assert result["code"] == REFUSED, result
    lines = result["stderr"].strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result["stderr"], result
    return lines[0]


def test_an_agent_is_refused_what_is_for_people_and_nothing_changes(project: Project) -> None:
    gate = project.root / "gate"
    project.configure({"builder": {}, "reviewer": {"max_concurrent": 1}, "pm": {}}, notify="pm")
    orch = project.up()
    project.drop("reviewer", "R-1.md", {"id": "R-1", "from": "owner", "agent": {"until": str(gate)}})
    wait_for(lambda: running(project, "R-1.md"), what="R-1 running")
    # queued behind R-1: a memo the builder sent, and one of a conversation the builder started
    project.drop("pm", "X-1.md", {"id": "X-1", "from": "builder"})
    wait_for(lambda: "X-1.md" in project.folder("pm", "archive"), what="X-1 handled")
    project.drop("reviewer", "O-1.md", {"id": "O-1", "from": "builder"})
    project.drop("reviewer", "C-1.md", {"id": "C-1", "from": "pm", "reply_to": "X-1"})
    held = project.root / "memo" / "reviewer" / "held"
    held.mkdir(parents=True)
    (held / "H-1.md").write_text("---\nid: H-1\nfrom: builder\n---\nheld\n", encoding="utf-8")

    refused = [
        ["stop"],
        ["stop", "--force"],
        ["cancel", "--role", "reviewer"],
        ["cancel", "R-1"],
        ["release", "H-1"],
        ["handoff", "reviewer", "--restore", "1"],
        ["wake", "reviewer"],
        ["send", "--to", "reviewer", "--from", "Owner", "as a person"],  # which the loop breaker never holds
        ["send", "--to", "reviewer", "--from", "reviewer", "as another role"],  # whose pair rate is not its own
    ]
    allowed = [["status", "--json"], ["send", "--to", "reviewer", "a note"], ["cancel", "O-1"], ["cancel", "C-1"]]
    results = agent_runs(project, "builder", "B-1.md", refused + allowed)
    run_id = record_of(project, "B-1.md")["run_id"]

    for result in results[: len(refused) - 2]:
        line = one_refusal(result)
        assert f"is for people, and this is an agent of run {run_id} (builder)" in line, line
    status, send, cancel_own, cancel_chain = results[len(refused) :]
    assert status["code"] == 0 and json.loads(status["stdout"])["running"] is True, status
    assert send["code"] == 0, send
    assert cancel_own["code"] == 0 and cancel_chain["code"] == 0, (cancel_own, cancel_chain)
    assert project.folder("reviewer", "cancelled") == ["C-1.md", "O-1.md"]

    # nothing else changed: the orchestrator runs, R-1 works on, H-1 is held
    assert orch.proc.poll() is None, orch.output
    assert running(project, "R-1.md")
    assert project.folder("reviewer", "held") == ["H-1.md"]
    for result, sender in zip(results[len(refused) - 2 : len(refused)], ("Owner", "reviewer"), strict=True):
        assert f"send --from {sender}: an agent's memo is from its own role (builder)" in one_refusal(result), result
    assert not any("as a" in text for text in memo_texts(project, "reviewer")), "nothing was sent"
    for command in ("stop", "stop --force", "cancel --role", "cancel", "release", "handoff --restore", "wake"):
        orch.wait_output(f"refused {command} from an agent of run {run_id} (builder)")
    wait_for(lambda: notices(project, "pm"), what="the notice to pm")
    wait_for(lambda: "B-1.md" in project.folder("builder", "archive"), what="B-1 to end")
    assert len(notices(project, "pm")) == 1, "one notice per run, not one per refusal"
    assert f"run {run_id} of role **builder**" in notices(project, "pm")[0]
    with sqlite3.connect(project.root / ".orchestrator" / "state.db") as db:
        (who,) = db.execute("SELECT who FROM cancellations WHERE memo = 'O-1.md'").fetchone()
    assert who.endswith(f"an agent of run {run_id} (builder)"), who

    # a person (this test) may do all of it
    assert project.cli("release", "H-1").returncode == 0
    assert project.cli("cancel", "R-1").returncode == 0
    restore = project.cli("handoff", "reviewer", "--restore", "1")  # the version R-1's run (seq 1) left
    assert restore.returncode == 0 and "restored version 1" in restore.stdout, restore.stderr
    assert project.cli("cancel", "--role", "reviewer").returncode == 0
    assert project.cli("stop", "--force").returncode == 0
    orch.wait()


@pytest.mark.parametrize("keeper", ["on", "off"])
def test_an_agent_that_escapes_its_session_and_unsets_its_marks_is_still_refused(project: Project, keeper: str) -> None:
    """setsid and a double fork, every ORCHESTRATOR_* variable unset: with keepers (subreapers) the caller is still
    its run's; without (which only ``recovery: restart`` allows), it is handed to the orchestrator itself and is an
    agent of no run."""
    project.configure({"builder": {}, "reviewer": {}}, recovery="adopt" if keeper == "on" else "restart")
    orch = project.up(ORCHESTRATOR_KEEPER=keeper)
    commands = [
        ["stop", "--force"],
        ["memory", "add", "noted by the builder"],
        ["memory", "list", "--role", "reviewer"],
        ["send", "--to", "reviewer", "an unmarked note"],
    ]
    results = agent_runs(project, "builder", "B-2.md", commands, escape=True, command_env=UNSET_MARKS)
    agent = record_of(project, "B-2.md")
    stop, add, other, sent = results
    # its memo is from its role (from an agent, of no run), never from owner, which the loop breaker never holds
    assert sent["code"] == 0, sent
    (note,) = [text for text in memo_texts(project, "reviewer") if "an unmarked note" in text]
    assert ("from: agent" if keeper == "off" else "from: builder") in note, note
    assert stop["sid"] != agent["sid"] and stop["ppid"] != agent["pid"], "it left the agent's session and tree"
    line = one_refusal(stop)
    assert orch.proc.poll() is None, orch.output
    if keeper == "off":
        assert "an agent of no run on record" in line, line
        orch.wait_output("refused stop --force from an agent of no run on record")
        return
    assert f"an agent of run {agent['run_id']} (builder)" in line, line
    orch.wait_output(f"refused stop --force from an agent of run {agent['run_id']} (builder)")
    assert add["code"] == 0, add
    entries = json.loads(project.cli("memory", "list", "--json").stdout)
    assert [(e["role"], e["run_id"]) for e in entries] == [("builder", str(agent["run_id"]))]
    assert one_refusal(other).startswith("orchestrator: refused: `orchestrator memory list` of another role's memory")


def test_the_curator_s_agent_reads_and_writes_every_role_s_memory(project: Project) -> None:
    """``memory.curator`` widens memory to every role, through the CLI's light read path too (it reads roles.yaml
    without validating it), and an agent's command never ends in a traceback."""
    project.configure({"builder": {}, "keeper": {}}, memory={"curator": "keeper"})
    assert project.cli("memory", "add", "the builder's plan", "--role", "builder").returncode == 0
    orch = project.up()
    search, listed, add = agent_runs(
        project,
        "keeper",
        "K-1.md",
        [
            ["memory", "search", "plan", "--role", "builder", "--json"],
            ["memory", "list", "--role", "builder", "--json"],
            ["memory", "add", "summarised for the builder", "--role", "builder"],
        ],
    )
    for result in (search, listed, add):
        assert result["code"] == 0 and "Traceback" not in result["stderr"], result
    assert [e["text"] for e in json.loads(search["stdout"])] == ["the builder's plan"]
    assert "the builder's plan" in listed["stdout"]
    texts = [e["text"] for e in json.loads(project.cli("memory", "list", "--role", "builder", "--json").stdout)]
    assert sorted(texts) == ["summarised for the builder", "the builder's plan"]
    assert project.cli("stop").returncode == 0
    orch.wait()


def test_a_role_may_be_given_stop_and_be_kept_from_send(project: Project) -> None:
    project.configure({"boss": {"may": ["stop", "-send"]}})
    orch = project.up()
    send, stop = agent_runs(project, "boss", "S-1.md", [["send", "--to", "boss", "more"], ["stop"]])
    assert "role boss may not use `orchestrator send` (`may: [-send]`" in one_refusal(send)
    assert stop["code"] == 0, stop
    assert orch.wait() == 0
    assert "`orchestrator stop` from" in orch.output and "an agent of run" in orch.output
    assert project.folder("boss", "inbox") == []


def test_an_agent_whose_orchestrator_died_is_refused_by_the_command_itself(project: Project) -> None:
    """No orchestrator answers: `release` checks its own process against the runs on record (the agent lives on
    under its keeper)."""
    gate = project.root / "gate"
    project.configure({"builder": {}})
    held = project.root / "memo" / "builder" / "held"
    held.mkdir(parents=True)
    (held / "H-2.md").write_text("---\nid: H-2\n---\nheld\n", encoding="utf-8")
    orch = project.up()
    results = project.root / "B-3.results"
    agent = {"commands": [["release", "H-2"], ["send", "--to", "builder", "x"]], "results": str(results)}
    project.drop("builder", "B-3.md", {"id": "B-3", "agent": {**agent, "commands_when": str(gate)}})
    wait_for(lambda: project.records(), what="B-3's agent to start")
    orch.proc.kill()
    orch.wait()
    gate.touch()
    wait_for(lambda: Path(f"{results}.done").exists(), 60, "the commands")
    release, send = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
    assert "`orchestrator release` is for people, and this is an agent of run" in one_refusal(release)
    assert send["code"] == 0, send
    assert project.folder("builder", "held") == ["H-2.md"]
    assert project.cli("release", "H-2").returncode == 0, "a person may, with or without an orchestrator"


# ------------------------------------------------------------------ the rules


def test_the_default_grants_and_what_may_changes() -> None:
    agent = Caller(agent=True, run_id=3, role="reviewer")
    plain = authority.grants([])

    def why(command: str, own: bool = True, held: dict[str, Level] = plain, caller: Caller = agent) -> str | None:
        return authority.refusal(caller, held, command, own)

    for command in ("send", "cancel", "interrupt", "tell", "wake", "task add", "handoff", "memory forget"):
        assert why(command) is None, command
        assert why(command, own=False) is not None or command == "send", command
    for command in ("stop", "stop --force", "cancel --role", "cancel --all", "release", "handoff --restore"):
        assert why(command) is not None, command
        assert authority.refusal(PERSON, plain, command, False) is None
    assert why("task drop") is not None
    widened = authority.grants(["stop", "cancel", "-send", "-memory"])
    assert why("stop --force", held=widened) is None and why("cancel --role", own=False, held=widened) is None
    assert "may not use `orchestrator send`" in (why("send", held=widened) or "")
    assert why("memory search", held=widened) is not None
    keeper = authority.grants([], curator=True)
    assert why("memory forget", own=False, held=keeper) is None and why("cancel", own=False, held=keeper) is not None
    nobody = Caller(agent=True)
    assert why("cancel", caller=nobody) is not None and why("send", caller=nobody) is None
    assert authority.touches_own(agent, "memory add", "team") and not authority.touches_own(agent, "task add", "team")
    assert not authority.touches_own(nobody, "memory add", None)


def test_may_names_known_grants_once() -> None:
    assert grants.check_may(["stop", "-send"]) == ["stop", "-send"]
    with pytest.raises(ValueError, match="unknown grant 'sotp'; known: send, memory"):
        grants.check_may(["sotp"])
    with pytest.raises(ValueError, match="named twice"):
        grants.check_may(["stop", "-stop"])


def test_may_in_roles_yaml_is_checked_at_load(project: Project) -> None:
    project.configure({"boss": {"may": ["stop", "sotp"]}})
    checked = project.cli("schedule")
    assert checked.returncode == 2 and "roles.boss.may: unknown grant 'sotp'" in checked.stderr, checked.stderr


def test_identify_finds_the_run_of_a_process_in_its_session_group_or_below(tmp_path: Path) -> None:
    """A real session leader stands for a run: its session's processes and its descendants are that run's; the
    test process is a person; a process below the given orchestrator pid is an agent of no run."""
    script = (
        "import os, subprocess, sys, time; print(subprocess.Popen(['sleep', '30']).pid, flush=True); time.sleep(30)"
    )
    leader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True, text=True)
    try:
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        runs = [LiveRun(7, "builder", leader.pid)]
        assert callers.identify(child, runs, tmp_path) == Caller(agent=True, run_id=7, role="builder")
        assert callers.identify(leader.pid, runs, tmp_path) == Caller(agent=True, run_id=7, role="builder")
        assert callers.identify(os.getpid(), runs, tmp_path) == PERSON
        assert callers.identify(child, [], tmp_path, orchestrator=os.getpid()) == Caller(agent=True)
        with pytest.raises(UnknownCallerError):
            callers.identify(0, runs, tmp_path)
    finally:
        leader.kill()
        leader.wait()
        os.kill(child, 9)
        if leader.stdout is not None:
            leader.stdout.close()
    with pytest.raises(UnknownCallerError, match="gone or unreadable"):
        callers.identify(leader.pid, runs, tmp_path)


def test_a_keeper_of_this_project_makes_an_agent_and_one_of_another_project_does_not(tmp_path: Path) -> None:
    """Below a keeper of no live run (one just starting): an agent of this project; below another project's
    keeper (an agent of another team that runs this one's tests): the person who started it."""
    fake_keeper = subprocess.Popen(
        ["orchestrator-keeper", "-c", "sleep 30 & echo $!; wait"],
        executable="/bin/sh",
        env={"KEEPER_ORCHESTRATOR_ROOT": str(tmp_path / "team"), "PATH": os.environ["PATH"]},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert fake_keeper.stdout is not None
        below = int(fake_keeper.stdout.readline())
        assert callers.identify(below, [], tmp_path / "team") == Caller(agent=True)
        assert callers.identify(below, [], tmp_path / "other") == PERSON
    finally:
        fake_keeper.kill()
        fake_keeper.wait()
        os.kill(below, 9)
        fake_keeper.stdout.close()
