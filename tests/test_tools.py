"""The team's tools end to end: ``send``, ``trace`` and ``release`` as real commands, with and without ``up``,
and a two-role ping-pong of real agents that the loop breaker stops with nothing lost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from conftest import HERE, Project, wait_for
from orchestrator.intake import outbox
from orchestrator.intake.memo import parse_front_matter

CORPUS = HERE / "fixtures" / "trace"
PING_PONG = HERE / "agents" / "ping_pong.py"


def header(path: Path) -> Any:
    return parse_front_matter(path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------ send
def test_send_writes_a_complete_memo_and_refuses_with_distinct_statuses(project: Project) -> None:
    project.configure({"builder": {}, "reviewer": {}})
    done = project.cli("send", "--to", "builder", "# Fix the header\n\nIt overlaps the logo.", "--tag", "web", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    path = Path(answer["path"])
    assert path.parent == project.root / "memo" / "builder" / "inbox"
    assert path.name == f"{answer['id']}-fix-the-header.md"
    got = header(path)
    assert (got.id, got.subject, got.sender, got.to, got.tags, got.reply_to) == (
        answer["id"],
        "Fix the header",
        "owner",
        "builder",
        ("web",),
        None,
    )
    assert datetime.fromisoformat(got.created_at or "").tzinfo is not None
    assert int(answer["id"], 16) > 0, "the millisecond clock in hex, as the corpus' ids"
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no temporary is left behind"

    # an agent: its role is the sender, its root comes from its environment, the text from stdin
    reply = project.cli(
        "send", "--to", "reviewer", "-", "--reply-to", answer["id"], "--subject", "Review it",
        input="done\n", ORCHESTRATOR_ROLE="builder",
    )  # fmt: skip
    assert reply.returncode == 0 and reply.stderr == "", reply.stderr
    got = header(Path(reply.stdout.strip()))
    assert (got.sender, got.reply_to, got.subject) == ("builder", answer["id"], "Review it")

    unknown_role = project.cli("send", "--to", "nobody", "text")
    empty = project.cli("send", "--to", "builder", "-", input="  \n")
    strict = project.cli("send", "--to", "builder", "text", "--reply-to", "no-such-id", "--strict")
    assert (unknown_role.returncode, empty.returncode, strict.returncode) == (10, 2, 6)
    for result in (unknown_role, empty, strict):
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert "no role 'nobody'" in unknown_role.stderr and "empty" in empty.stderr
    assert len(list((project.root / "memo" / "builder" / "inbox").iterdir())) == 1, "a refusal writes nothing"
    warned = project.cli("send", "--to", "builder", "text", "--reply-to", "no-such-id")
    assert warned.returncode == 0 and "warning: --reply-to no-such-id: no memo" in warned.stderr
    assert Path(warned.stdout.strip()).exists()


def test_text_that_is_not_utf8_is_refused_in_one_line_writing_nothing(project: Project) -> None:
    """Bytes that are not UTF-8 (from stdin, or in an argument) arrive as lone surrogates: refused in one line (exit
    2) before anything is sent or written, never an internal error from the YAML writer or SQLite deep inside."""
    project.configure({"builder": {}})
    for argv, stdin, said in (
        (["send", "--to", "builder", "-"], b"\xff\xfe broken", "orchestrator send: standard input is not UTF-8"),
        (["send", "--to", "builder", b"x\xffy"], None, "text: 'x\\xffy' is not UTF-8 text"),
        (["send", "--to", "builder", "fine", "--subject", b"\xc3("], None, "subject: '\\xc3(' is not UTF-8"),
        (["tell", "X-1"], b"\xff", "orchestrator tell: standard input is not UTF-8 text; nothing was sent"),
        (["answer", "X-1", "-"], b"\xff", "orchestrator answer: standard input is not UTF-8 text"),
        (
            ["history", "--role", b"\xff"],
            None,
            "role: '\\xff' is not UTF-8 text (names and texts are); nothing was done",
        ),
        (["task", "add", "builder", b"\xff"], None, "text: '\\xff' is not UTF-8 text"),
        (["logs", b"\xff"], None, "memo: '\\xff' is not UTF-8 text"),
        (["memory", "add", b"\xff"], None, "text: '\\xff' is not UTF-8 text"),
    ):
        done = subprocess.run(
            [*project.command, *argv, "--root", str(project.root)],
            input=stdin,
            capture_output=True,
            env=project.env(),
            timeout=60,
        )
        err = done.stderr.decode()
        assert done.returncode == 2 and err.count("\n") == 1, (argv, err)
        assert said in err and "Traceback" not in err, (argv, err)
    inbox = project.root / "memo" / "builder" / "inbox"
    assert not inbox.exists() or list(inbox.iterdir()) == []
    # a path is no text: a folder named with any bytes is still a project's folder
    folder = os.fsencode(project.root.parent) + b"/caf\xe9"
    made = subprocess.run([*project.command, "init", folder], capture_output=True, env=project.env(), timeout=60)
    assert made.returncode == 0 and os.path.exists(folder + b"/roles.yaml"), made.stderr


def test_send_ids_get_a_suffix_when_a_memo_already_carries_them(tmp_path: Path) -> None:
    now = datetime(2026, 12, 1, 9, 0, 0).astimezone()
    first = outbox.write_memo(tmp_path, "builder", "a", subject="a", sender="owner", now=now)
    second = outbox.write_memo(tmp_path, "builder", "b", subject="b", sender="owner", now=now)
    third = outbox.write_memo(tmp_path, "reviewer", "c", subject="c", sender="owner", now=now)
    base = format(int(now.timestamp() * 1000), "x")
    assert (first.memo_id, second.memo_id, third.memo_id) == (base, f"{base}-2", f"{base}-3")
    assert header(second.path).id == f"{base}-2"


def test_a_sent_memo_runs_in_a_running_orchestrator(project: Project) -> None:
    project.configure({"builder": {}})
    orch = project.up()
    done = project.cli("send", "--to", "builder", "build it")
    assert done.returncode == 0, done.stderr
    name = Path(done.stdout.strip()).name
    wait_for(lambda: project.folder("builder", "archive") == [name], what="the sent memo archived")
    assert orch.stop() == 0


# ------------------------------------------------------------------ trace
def corpus_project(project: Project) -> None:
    """The real conversation: the first two memos run through a real orchestrator, the rest lie where they ended."""
    project.configure({role: {} for role in ("planner", "reviewer", "project-manager", "builder")})
    for role_dir in CORPUS.iterdir():
        if not role_dir.is_dir():
            continue
        for memo in role_dir.glob("*.md"):
            folder = "archive"
            if memo.name.startswith(("19c562b1d90", "19c562c499c")):
                folder = "inbox"
            elif role_dir.name == "reviewer" and memo.name.startswith("19c562ee74c"):
                folder = "cancelled"
            target = project.root / "memo" / role_dir.name / folder
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(memo, target / memo.name)
    orch = project.up("--until-idle")
    assert orch.wait(60) == 0, orch.output


def nodes(report: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        out.append(node)
        for reply in node["replies"]:
            walk(reply)

    for root in report["roots"]:
        walk(root)
    return out


def test_trace_shows_a_real_conversation_with_runs_cancelled_work_and_repeated_ids(project: Project) -> None:
    corpus_project(project)
    result = project.cli("trace", "19c56382ebd", "--json")  # the deepest memo: four replies below the root
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["matches"] == ["planner/archive/19c56382ebd-re-review-revised-memo-management-tool-plan-v2.md"]
    assert [r["id"] for r in report["roots"]] == ["19c562b1d90"]
    root = report["roots"][0]
    assert (root["role"], root["folder"], root["state"], root["from"]) == (
        "planner",
        "archive",
        "succeeded",
        "project manager",
    )
    assert [(r["seq"], r["attempt"], r["state"]) for r in root["runs"]] == [(1, 1, "succeeded")]
    assert root["runs"][0]["duration"] is not None and root["runs"][0]["duration"] >= 0
    every = nodes(report)
    expanded = [n for n in every if not n["shown_above"]]
    assert len(expanded) == 10, "the nine memos of the conversation and the second copy of the repeated id"
    assert {n["id"] for n in every} == {p.name.split("-")[0] for p in CORPUS.glob("*/*.md")}
    # the repeated id: both memos that carry it are shown, and their replies name the ambiguity
    twins = [n for n in every if n["id"] == "19c562ee74c"]
    assert sorted(n["role"] for n in twins) == ["builder", "reviewer"]
    assert all(n["id_shared_with"] for n in twins)
    replies = [n for n in expanded if n["reply_to"] == "19c562ee74c"]
    assert {len(n["reply_to_candidates"]) for n in replies} == {2}
    # cancelled work and the replies to it that came later
    cancelled = next(n for n in twins if n["role"] == "reviewer")
    assert cancelled["cancelled"] and cancelled["state"] == "cancelled"
    assert all(n["late_reply_to_cancelled"] for n in replies)
    assert not any(n["late_reply_to_cancelled"] for n in every if n["reply_to"] != "19c562ee74c")
    asked = [n for n in every if n["match"]]
    assert [n["id"] for n in asked] == ["19c56382ebd"]

    text = project.cli("trace", "19c562ee74c")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("2 memos match '19c562ee74c'")
    assert lines[1].startswith("19c562b1d90  planner/archive  succeeded")
    assert any("CANCELLED" in line and "reviewer/cancelled" in line for line in lines)
    assert any("LATE: replies to cancelled work" in line for line in lines)
    assert any(line.startswith(("├── ", "└── ")) for line in lines) and any("│   " in line for line in lines)

    missing = project.cli("trace", "no-such-memo")
    assert missing.returncode == 6 and len(missing.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------ the breaker, end to end
def test_a_two_role_ping_pong_is_stopped_by_the_breaker_with_nothing_lost(project: Project) -> None:
    agent = [sys.executable, str(PING_PONG)]
    project.configure(
        {
            "builder": {"command": agent, "env": {"PEER": "reviewer"}},
            "reviewer": {"command": agent, "env": {"PEER": "builder"}},
            "lead": {},
        },
        notify="lead",
        limits={"chain_depth": 5},
    )
    orch = project.up()
    kick = project.cli("send", "--to", "builder", "ping", "--subject", "start")
    assert kick.returncode == 0, kick.stderr

    def held() -> list[str]:
        return project.folder("builder", "held") + project.folder("reviewer", "held")

    wait_for(lambda: held(), what="a memo held by the breaker")
    wait_for(lambda: len(project.folder("lead", "archive")) == 1, what="the lead's notice handled")
    assert len(held()) == 1
    snap = project.status()
    assert sum(snap["held"].values()) == 1
    # the kick-off and five replies ran; the sixth reply (chain depth 6) waits in held/ with its reason
    pongs = [r for r in project.records() if r.get("role") in ("builder", "reviewer")]
    assert len(pongs) == 6

    def memos() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for role in ("builder", "reviewer"):
            for folder in ("inbox", "active", "archive", "failed", "cancelled", "held"):
                out.setdefault(folder, []).extend(project.folder(role, folder))
        return out

    now = memos()
    assert len(now["archive"]) == 6 and len(now["held"]) == 1
    assert now["inbox"] == now["active"] == now["failed"] == now["cancelled"] == []
    role_held = "builder" if project.folder("builder", "held") else "reviewer"
    stem = project.folder(role_held, "held")[0].removesuffix(".md")
    reason = (project.root / "memo" / role_held / "held" / f"{stem}.reason").read_text(encoding="utf-8")
    assert reason.startswith("held: its reply_to chain is deeper than limits.chain_depth (5)")

    # the chain of ids is whole: every memo replies to the one before it
    trace = json.loads(project.cli("trace", stem.split("-")[0], "--json").stdout)
    chain = []
    node = trace["roots"][0]
    while True:
        chain.append(node)
        if not node["replies"]:
            break
        node = node["replies"][0]
    assert [n["state"] for n in chain] == ["succeeded"] * 6 + ["held", "succeeded"]
    assert (chain[-1]["role"], chain[-1]["from"]) == ("lead", "orchestrator"), "the notice replies to the held memo"

    # a person lets it go on: it runs once, its reply is held again, and the lead is not told twice
    released = project.cli("release", stem)
    assert released.returncode == 0, released.stderr
    wait_for(lambda: len(memos()["archive"]) == 7 and len(held()) == 1, what="the released memo run, its reply held")
    assert len([r for r in project.records() if r.get("role") in ("builder", "reviewer")]) == 7
    assert orch.stop() == 0
    assert len(project.folder("lead", "archive")) == 1, "one notice per chain"
    again = project.cli("release", "--all", "--role", "builder" if role_held == "reviewer" else "reviewer", "--json")
    assert again.returncode == 0 and len(json.loads(again.stdout)["released"]) == 1, "works without `up`"
    assert project.cli("release", "no-such-memo").returncode == 6
