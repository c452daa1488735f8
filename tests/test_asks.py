"""A run that asks a person waits in ``waiting/`` without a slot or an attempt, and ``orchestrator answer`` runs it
again: replayed through the real loop with fake agents and the injected clock (``tests/replay.py``). The command
agent's path (``$answers`` in the prompt), the Claude CLI's (its deferred call, the session resumed with no new
prompt and the hook's answer), the timeout, a cancel, and who may answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.asks import records
from orchestrator.asks.extension import Asks
from orchestrator.asks.hook import decision
from orchestrator.asks.requests import AnswerRequest, AskRequest
from orchestrator.asks.rules import matches, question_of
from orchestrator.control.authority import Caller
from orchestrator.core.agent import AttemptVerdict, DeferredCall
from orchestrator.core.errors import MemoFinishedError, RefusedError, UsageError
from orchestrator.core.events import CancelRequested, FeatureRequested
from orchestrator.core.team_events import TeamEvent
from replay import Replay

CLAUDE = ["claude", "-p", "--output-format", "stream-json", "--verbose"]


def play(tmp_path: Path, scenario: Callable[[Path], Any]) -> Any:
    return asyncio.run(scenario(tmp_path))


async def feature(r: Replay, request: Any) -> Any:
    reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    r.sup.post(FeatureRequested(request, reply))
    await r.settle()
    assert reply.done()
    return reply.result()


def defer(r: Replay, memo: str, call: DeferredCall, session: str = "S-1", ended_at: float | None = None) -> None:
    agent = r.agent(memo)
    agent.alive = False
    agent.on_exit(agent, AttemptVerdict(0, session_id=session, deferred=call, ended_at=ended_at))


async def asked_and_answered(r: Replay, result: dict[str, Any]) -> Any:
    """a.md dropped, its agent asks and ends with ``result`` (its session and figures), a person answers: the agent
    that runs it again."""
    await r.drop("builder", "a.md")
    asking = r.agent("a")
    await feature(r, AskRequest(run_id=asking.spec.run_id, question="Which design?"))
    asking.result = result
    await r.exit("a", 0)
    assert r.folder("builder", "waiting") == ["a.md"]
    await feature(r, AnswerRequest(memo="a.md", text="the small one", who="pat"))
    return r.agent("a")


def attempts(r: Replay, memo: str) -> list[int]:
    return [a.spec.attempt for a in r.spawner.agents if any(p.name == memo for p in a.spec.memo_paths)]


# ------------------------------------------------------------------ a command agent
def test_a_command_agent_that_asks_waits_without_a_slot_and_runs_again_with_the_answer(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"max_concurrent": 1, "retry": {"max": 0, "backoff": ["1s"]}}})
        told: list[TeamEvent] = []
        r.sup.lc.team_events.listeners.append(told.append)
        await r.drop("builder", "a.md")
        await r.drop("builder", "b.md")
        run_id = r.agent("a").spec.run_id
        said = await feature(r, AskRequest(run_id=run_id, question="Which design, A or B?"))
        assert said["recorded"] and "End your run now" in said["note"]
        await r.exit("a", 0)
        assert r.folder("builder", "waiting") == ["a.md"]
        question = (root / "memo/builder/waiting/a.question").read_text()
        assert "question: Which design, A or B?" in question and 'orchestrator answer a.md "YOUR ANSWER"' in question
        assert told == [TeamEvent("needs_input", "builder", "a.md", None, "Which design, A or B?")]
        assert r.agent("b").alive, "the waiting run holds no slot: the next memo of the role runs meanwhile"
        assert r.sup.view(False).to_json()["needs_input"][0]["question"] == "Which design, A or B?"
        ended = next(row for row in r.sup.store.history() if row["memos"] == ["a.md"])
        assert ended["state"] == "returned" and ended["reason"] == "waiting: asks a person: Which design, A or B?"
        await r.drop("builder", "c.md")
        answered = await feature(r, AnswerRequest(memo="a", text="B, the smaller one", who="pat"))
        assert answered["decision"] == "allow" and answered["queued"].endswith("inbox/a.md")
        assert not (root / "memo/builder/waiting/a.question").exists()
        await r.exit("b", 0)
        again = r.agent("a")
        assert again.alive and attempts(r, "c.md") == [], "the answered memo runs first in its role's queue"
        assert again.spec.attempt == 1, "asking used no attempt"
        with pytest.raises(MemoFinishedError, match="a.md was answered already, by pat at .*; its run goes on"):
            await feature(r, AnswerRequest(memo="a", text="A after all", who="sam"))  # not "no memo matches" (6)
        assert "# Answers" in again.spec.prompt and "The answer (pat): B, the smaller one" in again.spec.prompt
        assert "Which design, A or B?" in again.spec.prompt
        await r.exit("a", 0)
        assert "a.md" in r.folder("builder", "archive") and r.sup.view(False).to_json()["needs_input"] == []
        r.close()

    play(tmp_path, scenario)


def test_a_run_that_asks_twice_asks_both_questions(tmp_path: Path) -> None:
    """Defect: the second ``orchestrator ask`` of a run replaced the first, which never reached a person."""

    async def scenario(root: Path) -> None:
        r = Replay(root)
        await r.drop("builder", "a.md")
        run_id = r.agent("a").spec.run_id
        await feature(r, AskRequest(run_id=run_id, question="Which design, A or B?"))
        await feature(r, AskRequest(run_id=run_id, question="May I deploy on Friday?"))
        await feature(r, AskRequest(run_id=run_id, question="Which design,  A or B?"))  # asked already: once
        with pytest.raises(UsageError, match="questions together pass 4000 characters"):
            await feature(r, AskRequest(run_id=run_id, question="x" * 3990))
        await r.exit("a", 0)
        (waiting,) = r.sup.view(False).to_json()["needs_input"]
        assert waiting["question"] == "Which design, A or B? Also: May I deploy on Friday?"
        said = (root / "memo/builder/waiting/a.question").read_text(encoding="utf-8")
        assert said.startswith("question: Which design, A or B? Also: May I deploy on Friday?\n"), said
        r.close()

    play(tmp_path, scenario)


def test_a_question_is_shown_as_asked_when_its_agent_asked_not_when_its_run_ended(tmp_path: Path) -> None:
    """Found by a user-view review: a question asked before the run ended later (after a restart, its end read
    from the keeper's record) was shown `since` the end; an approval is since its run's end."""

    async def scenario(root: Path) -> None:
        r = Replay(root)
        await r.drop("builder", "a.md")
        asked = r.clock.now().isoformat(timespec="seconds")
        await feature(r, AskRequest(run_id=r.agent("a").spec.run_id, question="Which design?"))
        await r.advance(10)
        await feature(r, AskRequest(run_id=r.agent("a").spec.run_id, question="May I deploy?"))  # joined to it
        on_record = records.every(r.sup.store.db, "asked")[-1]  # what a restart before the run's end reads back
        assert (on_record.question, on_record.asked_at) == ("Which design? Also: May I deploy?", asked), on_record
        await r.advance(20)  # the agent takes its time to end
        await r.exit("a", 0)
        (waiting,) = r.sup.view(False).to_json()["needs_input"]
        assert waiting["asked_at"] == asked, waiting
        assert f"asked: {asked}" in (root / "memo/builder/waiting/a.question").read_text()
        # a deferred call whose end was kept while nobody watched: asked when its agent ended
        await r.drop("builder", "b.md")
        ended = r.clock.now().timestamp() - 20
        defer(r, "b", DeferredCall("toolu_1", "Bash", {"command": "git push"}), ended_at=ended)
        await r.settle()
        approval = next(ask for ask in r.sup.view(False).to_json()["needs_input"] if ask["memo"] == "b.md")
        assert approval["asked_at"] == datetime.fromtimestamp(ended, r.clock.now().tzinfo).isoformat(timespec="seconds")
        r.close()

    play(tmp_path, scenario)


def test_an_unanswered_question_fails_after_ask_timeout(tmp_path: Path) -> None:
    """And the ``notify`` role is told, as of every failure (defect: a memo failed with no attempt of its own, as a
    question timed out is, wrote no notice)."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"ask_timeout": "2h"}, "pm": {}}, notify="pm")
        await r.drop("builder", "a.md")
        await feature(r, AskRequest(run_id=r.agent("a").spec.run_id, question="May I?"))
        await r.exit("a", 0)
        assert r.folder("builder", "waiting") == ["a.md"]
        await r.advance(7100)
        assert r.folder("builder", "waiting") == ["a.md"], "not before its time"
        await r.advance(120)
        assert r.folder("builder", "failed") == ["a.md"] and r.folder("builder", "waiting") == []
        assert (root / "memo/builder/failed/a.reason").read_text().startswith("no answer within 2h")
        assert [row["reason"] for row in r.sup.store.history() if row["state"] == "failed"] == ["no answer within 2h"]
        assert not (root / "memo/builder/waiting/a.question").exists()
        (notice,) = (root / "memo/pm/inbox").iterdir()
        body = notice.read_text(encoding="utf-8")
        assert "Failed: a.md" in body and "no answer within 2h" in body and "with no attempt of its own" in body
        with pytest.raises(MemoFinishedError, match=r"already finished: failed at .*\(no answer within 2h"):
            await feature(r, AnswerRequest(memo="a.md", text="too late"))
        r.close()

    play(tmp_path, scenario)


def test_a_waiting_memo_is_cancelled_like_a_queued_one(tmp_path: Path) -> None:
    """And every record says it was waiting (defect: the log, the cancellation's row and the notice said "queued",
    "it had not started", and named the log of the cancel's own run, which never existed)."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}, "pm": {}}, notify="pm")
        await r.drop("builder", "a.md")
        await feature(r, AskRequest(run_id=r.agent("a").spec.run_id, question="May I?"))
        await r.exit("a", 0)
        reply = await r.request(CancelRequested, memo="a")
        assert reply.result()["state"] == "cancelled" and reply.result()["previous_state"] == "waiting"
        assert "cancelled a (was waiting, run 2)" in r.console.text
        rows = r.sup.store.db.execute("SELECT previous_state FROM cancellations").fetchall()
        assert [row[0] for row in rows] == ["waiting"]
        (notice,) = (root / "memo/pm/inbox").iterdir()
        body = notice.read_text(encoding="utf-8")
        assert "State when cancelled: waiting" in body and "a question for a person" in body, body
        assert "2-builder.log" not in body, "no log of the cancel's own run, which never ran"
        assert r.folder("builder", "cancelled") == ["a.md"]
        assert not (root / "memo/builder/waiting/a.question").exists()
        assert r.sup.view(False).to_json()["needs_input"] == []
        with pytest.raises(MemoFinishedError, match="memo a already finished: cancelled at .* of role builder"):
            await feature(r, AnswerRequest(memo="a", text="late"))  # defect: exit 6, "no memo waiting ... matches"
        r.close()

    play(tmp_path, scenario)


def test_answering_is_a_persons_unless_a_role_may_answer(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}, "lead": {"may": ["answer"]}})
        request = AnswerRequest(memo="a", text="yes")
        with pytest.raises(RefusedError, match="`orchestrator answer` is for people"):
            r.sup.host.admit(request, Caller(agent=True, run_id=7, role="builder"))
        assert r.sup.host.admit(request, Caller(agent=True, run_id=8, role="lead")).memo == "a"
        assert r.sup.host.admit(request, Caller(agent=False)).memo == "a"
        ask = AskRequest(run_id=7, question="?")
        assert r.sup.host.admit(ask, Caller(agent=True, run_id=7, role="builder")).run_id == 7
        with pytest.raises(RefusedError, match="`orchestrator ask` of another run"):
            r.sup.host.admit(ask, Caller(agent=True, run_id=8, role="lead"))
        with pytest.raises(UsageError, match="run 99 is not running"):
            r.sup.extension(Asks).ask(AskRequest(run_id=99, question="?"))
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ the Claude CLI
def test_a_claude_run_whose_hook_deferred_a_call_resumes_its_session_with_the_answer(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        role = {"command": CLAUDE, "approve": ["Bash(git push:*)"]}
        r = Replay(root, {"builder": role})
        await r.drop("builder", "a.md")
        first = r.agent("a")
        settings = json.loads(first.spec.args[first.spec.args.index("--settings") + 1])
        hook = settings["hooks"]["PreToolUse"][0]
        assert hook["matcher"] == "Bash" and hook["hooks"][0]["command"].endswith("-m orchestrator.asks.hook")
        assert json.loads(first.spec.env["ORCHESTRATOR_APPROVE"]) == ["Bash(git push:*)"]
        call = DeferredCall("toolu_1", "Bash", {"command": "git push origin main"})
        defer(r, "a", call, session="S-1")
        await r.settle()
        assert r.folder("builder", "waiting") == ["a.md"]
        waiting = r.sup.view(False).to_json()["needs_input"][0]
        assert waiting["kind"] == "approval" and waiting["question"] == "Bash: git push origin main"
        with pytest.raises(UsageError, match="answer --allow, or --deny"):
            r.sup.extension(Asks).answer(AnswerRequest(memo="a.md", text="sure"))
        await feature(r, AnswerRequest(memo="a.md", allow=True, who="pat"))
        resumed = r.agent("a")
        assert resumed is not first and resumed.spec.prompt == "", "no new prompt: the session goes on"
        assert resumed.spec.args[-2:] == ("--resume", "S-1")
        env = resumed.spec.env
        event = {"tool_name": "Bash", "tool_input": call.input, "tool_use_id": "toolu_1", "cwd": str(root)}
        assert decision(event, env) == {
            "hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}
        }
        another = {**event, "tool_use_id": "toolu_2"}
        assert decision(another, env)["hookSpecificOutput"]["permissionDecision"] == "defer", "a new call waits again"
        assert decision({**event, "tool_input": {"command": "ls"}}, env) is None, "other calls: the permissions decide"
        await r.exit("a", 0)
        assert r.folder("builder", "archive") == ["a.md"]
        assert not list((root / ".orchestrator/asks").glob("*.json")), "the answer file goes with its ask"
        r.close()

    play(tmp_path, scenario)


def test_an_approval_nobody_answered_is_denied_with_on_timeout_deny(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(
            root, {"builder": {"command": CLAUDE, "approve": ["Bash"], "ask_timeout": "1h", "on_timeout": "deny"}}
        )
        await r.drop("builder", "a.md")
        defer(r, "a", DeferredCall("toolu_1", "Bash", {"command": "make deploy"}))
        await r.settle()
        await r.advance(3601)
        resumed = r.agent("a")
        assert resumed.spec.args[-2:] == ("--resume", "S-1")
        event = {"tool_name": "Bash", "tool_input": {"command": "make deploy"}, "tool_use_id": "toolu_1"}
        out = decision(event, resumed.spec.env)["hookSpecificOutput"]
        assert out["permissionDecision"] == "deny" and out["permissionDecisionReason"] == "no answer within 1h: denied"
        r.close()

    play(tmp_path, scenario)


def test_the_rules_read_claude_codes_permission_syntax(tmp_path: Path) -> None:
    cwd = str(tmp_path)
    assert matches("Bash(git push:*)", "Bash", {"command": "git push origin main"}, cwd)
    assert not matches("Bash(git push:*)", "Bash", {"command": "git status"}, cwd)
    assert matches("Bash(npm publish)", "Bash", {"command": "npm publish"}, cwd)
    assert not matches("Bash(npm publish)", "Bash", {"command": "npm publish --tag x"}, cwd)
    assert matches("Write(migrations/**)", "Write", {"file_path": f"{cwd}/migrations/0001/up.sql"}, cwd)
    assert not matches("Write(migrations/*)", "Write", {"file_path": f"{cwd}/migrations/0001/up.sql"}, cwd)
    assert matches("WebFetch", "WebFetch", {"url": "https://example.com"}, cwd)
    assert question_of('orchestrator ask "Which one?"') == "Which one?"
    assert question_of("/usr/bin/orchestrator ask may I") == "may I"
    assert question_of("echo orchestrator ask") is None


def test_a_rule_holds_every_command_of_a_shell_line_every_spelling_of_a_path_and_every_file_editing_tool(
    tmp_path: Path,
) -> None:
    """Defect: only a command that began with the rule's words was held, so ``cd . && git push`` ran unapproved, as
    did ``./migrations/x.sql`` and an ``Edit`` of a file a ``Write`` rule names."""
    cwd = str(tmp_path)
    held = [
        "cd . && git push origin main",
        "echo hi; git push",
        "make || git push",
        "git log | git push",
        "sleep 1 & git push",
        "ls\ngit push",
        "git  push  origin",
        "GIT_SSH=x git push",
        "bash -c 'git push origin main'",
        'sh -c "cd /x && git push"',
        "eval git push",
        'echo "$(git push)"',
        "echo `git push`",
        "(git push)",
        "{ git push; }",
        # the review's: punctuation run together, keywords, wrappers, shell flags, a shell fed text, a path, lines
        "X=$(git status --porcelain); git push",
        "(git fetch);git push",
        "echo hi!; git push",
        "if true; then git push; fi",
        "for b in a; do git push; done",
        "sudo -u me git push",
        "env X=1 git push",
        "xargs git push",
        "timeout 5 git push",
        "nice -n 5 git push",
        "find . -exec git push \\;",
        "bash -lc 'git push'",
        "bash -c -- 'git push'",
        "echo 'git push' | bash",
        "bash <<< 'git push'",
        "/usr/bin/git push",
        "git \\\npush",
        "git commit -m 'a\nb'; git push",
    ]
    for command in held:
        assert matches("Bash(git push:*)", "Bash", {"command": command}, cwd), command
    for command in (
        "git status",
        "echo 'git push'",
        "git pull && git status",
        "echo 'a && git push'",
        "git commit -m 'git push'",
    ):
        assert not matches("Bash(git push:*)", "Bash", {"command": command}, cwd), command
    assert matches("Bash(npm publish)", "Bash", {"command": "cd pkg && npm publish"}, cwd)
    assert not matches("Bash(npm publish)", "Bash", {"command": "cd pkg && npm publish --tag x"}, cwd)
    for path in ("./migrations/x.sql", "sub/../migrations/x.sql", f"{cwd}/sub/../migrations/0001/up.sql"):
        for tool in ("Write", "Edit", "MultiEdit", "NotebookEdit"):
            assert matches("Write(migrations/**)", tool, {"file_path": path}, cwd), (tool, path)
    assert not matches("Write(migrations/**)", "Edit", {"file_path": "migrations/../src/x.py"}, cwd)
    (tmp_path / "migrations").mkdir()
    (tmp_path / "db").symlink_to(tmp_path / "migrations")  # another name for the same folder
    assert matches("Write(migrations/**)", "Write", {"file_path": f"{cwd}/db/x.sql"}, cwd)
    # the session went into migrations/ (its cwd follows a `cd`): the rule still reads from the agent's folder
    event = {"tool_name": "Write", "tool_input": {"file_path": f"{cwd}/migrations/x.sql"}, "cwd": f"{cwd}/migrations"}
    env = {"ORCHESTRATOR_APPROVE": '["Write(migrations/**)"]', "CLAUDE_PROJECT_DIR": cwd}
    assert decision(event, env) == {
        "hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "defer"}
    }
    assert not matches("Edit(migrations/**)", "Bash", {"command": "touch migrations/x"}, cwd)


def test_the_hook_is_asked_for_every_file_editing_tool_a_rule_holds(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"command": CLAUDE, "approve": ["Write(migrations/**)"]}})
        await r.drop("builder", "a.md")
        args = r.agent("a").spec.args
        (hook,) = json.loads(args[args.index("--settings") + 1])["hooks"]["PreToolUse"]
        assert set(hook["matcher"].split("|")) == {"Bash", "Edit", "MultiEdit", "NotebookEdit", "Write"}
        r.close()

    play(tmp_path, scenario)


def test_an_answered_run_returned_to_its_inbox_still_carries_the_answer(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        from orchestrator.core.events import StopRequested

        r = Replay(root, {"builder": {"command": CLAUDE}})
        await r.drop("builder", "a.md")
        defer(r, "a", DeferredCall("toolu_1", "Bash", {"command": 'orchestrator ask "Which?"'}))
        await r.settle()
        await feature(r, AnswerRequest(memo="a.md", text="this one"))
        assert r.agent("a").spec.args[-2:] == ("--resume", "S-1")
        await r.request(StopRequested, force=True)
        assert r.folder("builder", "inbox") == ["a.md"], "a forced stop returns it"
        asks = r.sup.extension(Asks)
        assert [(a.memo, a.state) for a in records_of(asks)] == [("a.md", "answered")], "its answer is kept"
        r.close()

    play(tmp_path, scenario)


def records_of(asks: Asks) -> list[Any]:
    from orchestrator.asks import records

    return records.every(asks.db)


def test_a_retry_of_an_answered_sdk_run_resumes_the_session_that_went_on_with_the_answer(tmp_path: Path) -> None:
    """The answer resumes the asking session (S-1) once; a retry that resumes goes on from the failed attempt's own
    session (S-2), which already holds the answer and the work done since, not from S-1 again: that would do the
    work twice and count the spend of S-2 as if S-3 carried it on."""

    async def scenario(root: Path) -> None:
        role = {"backend": "sdk", "retry_resumes": True, "retry": {"max": 2, "backoff": ["1s"]}}
        r = Replay(root, {"builder": role})
        answered = await asked_and_answered(r, {"session_id": "S-1"})
        assert (answered.spec.attempt, answered.spec.resume) == (1, "S-1"), "the asking session goes on"
        assert "the small one" in answered.spec.prompt
        answered.session_id = "S-2"
        await r.exit("a", 1)
        await r.advance(1)
        retry = r.agent("a")
        assert retry is not answered and retry.spec.attempt == 2
        assert retry.spec.resume == "S-2", "the retry resumes the attempt that went on with the answer"
        await r.exit("a", 0)
        assert r.folder("builder", "archive") == ["a.md"]
        r.close()

    play(tmp_path, scenario)


def test_an_answered_codex_thread_retried_counts_the_asking_runs_spend_once(tmp_path: Path) -> None:
    """A thread keeps its id when it goes on: the asking run, the answered attempt and its retry all report running
    totals of the same session T. The asking run recorded 1.0 of them; the run that took the answer records the rest,
    at each of its attempts, not only the first."""

    async def scenario(root: Path) -> None:
        role = {"backend": "sdk", "retry_resumes": True, "retry": {"max": 2, "backoff": ["1s"]}}
        r = Replay(root, {"builder": role})
        answered = await asked_and_answered(r, {"session_id": "T", "cost_usd": 1.0})
        answered.result = {"session_id": "T", "cost_usd": 1.5}
        await r.exit("a", 1)
        await r.advance(1)
        retry = r.agent("a")
        assert retry.spec.attempt == 2 and retry.spec.resume == "T"
        assert "the small one" in retry.spec.prompt, "the same session again: it is told the answer again"
        retry.result = {"session_id": "T", "cost_usd": 2.0}
        await r.exit("a", 0)
        costs = sorted(row["cost_usd"] for row in r.sup.store.history())
        assert costs == [1.0, 1.0], "T spent 2.0 in all: 1.0 before the question, 1.0 after"
        r.close()

    play(tmp_path, scenario)


def test_a_memo_with_the_longest_name_waits_with_its_question_beside_it(tmp_path: Path) -> None:
    """``.question`` is longer than ``.md``: its name is cut to fit, and no temporary is left in waiting/."""

    async def scenario(root: Path) -> None:
        name = "x" * 252 + ".md"
        r = Replay(root, {"builder": {}})
        await r.drop("builder", name)
        await feature(r, AskRequest(run_id=r.agent(name).spec.run_id, question="Which design?"))
        await r.exit(name, 0)
        waiting = root / "memo/builder/waiting"
        (question,) = waiting.glob("*.question")
        assert sorted(p.name for p in waiting.iterdir()) == sorted([name, question.name])
        assert question.read_text().startswith("question: Which design?")
        answered = await feature(r, AnswerRequest(memo=name, text="the small one", who="pat"))
        assert answered["decision"] == "allow" and list(waiting.iterdir()) == []
        await r.exit(name, 0)
        assert r.folder("builder", "archive") == [name]
        r.close()

    play(tmp_path, scenario)


def test_a_live_answered_session_counts_against_the_day_only_what_it_added(tmp_path: Path) -> None:
    """The session's running totals carry the asking run's 1.0 again: while the answered run is live, the day's
    spend is 1.0 recorded plus what it added, not plus its whole total."""

    async def scenario(root: Path) -> None:
        from orchestrator.core.events import Tick

        r = Replay(root, {"builder": {"backend": "sdk", "budget": {"per_day_usd": 2.0}}})
        answered = await asked_and_answered(r, {"session_id": "T", "cost_usd": 1.0})
        answered.session_id, answered.cost_usd = "T", 1.6  # 0.6 of it its own
        r.sup.post(Tick())
        await r.settle()
        assert r.sup.budgets.current == {}, "1.6 spent today, not 2.6"
        answered.cost_usd = 2.1
        r.sup.post(Tick())
        await r.settle()
        assert "role builder spent $2.10 of its $2.00" in r.sup.budgets.current["builder"]
        r.close()

    play(tmp_path, scenario)


def test_an_answered_runs_per_run_budget_counts_on_top_of_what_the_asking_session_reported(tmp_path: Path) -> None:
    """The session T reported a running cost of 1.0 when its run ended asking, and reports it again once resumed:
    the run that takes the answer, and its retry that goes on in T, are started with it as carried (their per-run
    budget on top of it); a run that resumes no session carries nothing."""

    async def scenario(root: Path) -> None:
        role = {
            "backend": "sdk",
            "retry_resumes": True,
            "retry": {"max": 2, "backoff": ["1s"]},
            "budget": {"per_run_usd": 0.5},
        }
        r = Replay(root, {"builder": role})
        answered = await asked_and_answered(r, {"session_id": "T", "cost_usd": 1.0})
        assert (answered.spec.resume, answered.spec.carried_usd) == ("T", 1.0)
        answered.result = {"session_id": "T", "cost_usd": 1.3}
        await r.exit("a", 1)
        await r.advance(1)
        retry = r.agent("a")
        assert (retry.spec.attempt, retry.spec.resume, retry.spec.carried_usd) == (2, "T", 1.0)
        await r.exit("a", 0)
        await r.drop("builder", "b.md")
        assert r.agent("b").spec.carried_usd == 0.0
        r.close()

    play(tmp_path, scenario)


def test_an_answered_run_carries_only_the_asking_sessions_cost_not_the_asking_runs_other_sessions(
    tmp_path: Path,
) -> None:
    """The asking run spent 0.4 in a first attempt's session S, then 0.3 in its retry's fresh session T, where it
    asked: its record says 0.7 in all, but T goes on from 0.3, so that is what the answered run carries (0.7 would
    let it spend 0.4 past its per-run budget) and what its record leaves out (0.7 would hide 0.4 of its spend from
    `history` and the day's budget)."""

    async def scenario(root: Path) -> None:
        role = {"backend": "sdk", "retry": {"max": 2, "backoff": ["1s"]}, "budget": {"per_run_usd": 0.5}}
        r = Replay(root, {"builder": role})
        await r.drop("builder", "a.md")
        r.agent("a").result = {"session_id": "S", "cost_usd": 0.4}
        await r.exit("a", 1)
        await r.advance(1)
        asking = r.agent("a")
        assert asking.spec.attempt == 2 and asking.spec.resume is None
        await feature(r, AskRequest(run_id=asking.spec.run_id, question="Which design?"))
        asking.result = {"session_id": "T", "cost_usd": 0.3}
        await r.exit("a", 0)
        assert [row["cost_usd"] for row in r.sup.store.history()] == [pytest.approx(0.7)]
        await feature(r, AnswerRequest(memo="a.md", text="the small one", who="pat"))
        answered = r.agent("a")
        assert (answered.spec.resume, answered.spec.carried_usd) == ("T", pytest.approx(0.3))
        answered.result = {"session_id": "T", "cost_usd": 0.8}
        await r.exit("a", 0)
        costs = [row["cost_usd"] for row in r.sup.store.history()]
        assert costs == [pytest.approx(0.7), pytest.approx(0.5)], "T went on from 0.3: the answered run spent 0.5"
        r.close()

    play(tmp_path, scenario)
