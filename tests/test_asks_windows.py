"""The asks feature where it can go wrong: an answer meant for one role's memo, an answer outliving its memo, a
restart of ``up`` between two steps, a timeout that cannot end its memo, a role gone from roles.yaml. Replayed through
the real loop with fake agents and the injected clock (``tests/replay.py``); a restart is a second ``Replay`` over the
same root, after a first one killed (``os._exit``) in a process of its own at the step under test.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from test_asks import CLAUDE, defer, feature, play

from orchestrator.asks import records, restart
from orchestrator.asks.extension import Asks
from orchestrator.asks.hook import decision
from orchestrator.asks.requests import AnswerRequest, AskRequest
from orchestrator.config import RoleRun
from orchestrator.core.agent import AttemptVerdict, DeferredCall
from orchestrator.core.errors import AmbiguousMemoError, UsageError
from orchestrator.core.events import CancelRequested, MemoSeen
from orchestrator.core.states import RunState
from orchestrator.core.team_events import TeamEvent
from orchestrator.notify.delivery import Deliver, Deliveries, Settle, memo_key
from orchestrator.notify.extension import Notifier
from orchestrator.supervisor.decisions import Park
from orchestrator.supervisor.extension import Extension, Host
from orchestrator.supervisor.loop import Ready
from orchestrator.supervisor.recovery import recover
from replay import Replay

TESTS = Path(__file__).parent
BUILDER = '{"builder": {"ask_timeout": "1h"}}'  # the roles of a killed run and of its restart (JSON, and Python)


def rows(r: Replay) -> list[tuple[str, str, str]]:
    return [(a.role, a.memo, a.state) for a in records.every(r.sup.extension(Asks).db)]


async def asked(r: Replay, role: str, memo: str, question: str) -> None:
    """``memo`` of ``role`` runs, its agent asks ``question`` and exits: the memo waits in ``waiting/``."""
    await r.drop(role, memo)
    await feature(r, AskRequest(run_id=r.agent(memo).spec.run_id, question=question))
    await r.exit(memo, 0)


# a.md runs, its agent asks "Which design?" and exits: a script's start for ``killed_at``
ASKED_WHICH_DESIGN = """
        await r.drop("builder", "a.md")
        await feature(r, AskRequest(run_id=r.agent("a").spec.run_id, question="Which design?"))
        await r.exit("a", 0)
"""


def killed_at(root: Path, patch: str, script: str, roles: str = BUILDER, more: str = "") -> None:
    """In a process of its own: ``patch`` (a statement making the step under test die with ``os._exit(9)``, as a
    SIGKILL would), then ``script`` (the body of ``async def first(r)``, with ``r`` a Replay of ``root`` with ``roles``,
    and ``more`` features)."""
    program = textwrap.dedent(
        """
        import asyncio, os, sys
        from pathlib import Path
        sys.path.insert(0, {tests!r})
        from replay import Replay
        from test_asks import feature
        from orchestrator.asks.extension import Asks
        from orchestrator.asks.requests import AnswerRequest, AskRequest
        from orchestrator.core.agent import UsageLimit
        from orchestrator.core.events import CancelRequested
        from orchestrator.core.states import RunState
        from orchestrator.supervisor.extension import Extension
        from orchestrator.supervisor.lifecycle import Lifecycle
        from orchestrator.supervisor.memo_moves import MemoMoves

        {patch}

        async def first(r):
        {body}
            print("not killed")

        async def main():
            await first(Replay(Path({root!r}), {roles}, more=[{more}]))

        asyncio.run(main())
        """
    ).format(
        tests=str(TESTS),
        root=str(root),
        patch=patch,
        roles=roles,
        more=more,
        body=textwrap.indent(textwrap.dedent(script), "    "),
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 9, (done.returncode, done.stdout, done.stderr)


def killed_moving_to(folder: str) -> str:
    """The patch of ``killed_at`` that dies when an end moves its memos into ``folder``: after the end's first commit."""
    return textwrap.dedent(
        f"""
        moved = MemoMoves.move
        def move(self, run, folder, text):
            if folder == "{folder}":
                os._exit(9)
            return moved(self, run, folder, text)
        MemoMoves.move = move
        """
    )


def killed_after_the_end_of(run_id: int) -> str:
    """The patch of ``killed_at`` that dies once run ``run_id``'s end is committed, before the features hear of it."""
    return textwrap.dedent(
        f"""
        finished = Asks.on_finished
        def on_finished(self, event):
            if event.run.run_id == {run_id}:
                os._exit(9)
            return finished(self, event)
        Asks.on_finished = on_finished
        """
    )


async def batch_asked(r: Replay) -> None:
    """a.md and b.md of a batch role run together, their agent asks, and its run ends to be parked."""
    await r.drop("builder", "c.md")  # the role's one run, busy: a.md and b.md wait to run together
    inbox = r.config.role_dir("builder") / "inbox"
    for name in ("a.md", "b.md"):
        (inbox / name).write_text(f"---\nid: {name[0]}\n---\nbody\n", encoding="utf-8")
        r.sup.post(MemoSeen("builder", inbox / name, complete=True))
    await r.exit("c", 0)
    both = next(agent for agent in r.spawner.agents if agent.alive)
    await feature(r, AskRequest(run_id=both.spec.run_id, question="Deploy?"))
    both.exit(0)
    await r.settle()


async def restarted(root: Path, roles: str = BUILDER) -> Replay:
    """``up`` started again over ``root``: recovery ends what the kill left, the first scan, then the features."""
    r = Replay(root, json.loads(roles))
    await recover(r.config, r.sup.store, r.console, r.sup.lc, None)
    r.sup.intake.rescan(initial=True)
    r.sup.extension(Asks).start()
    r.sup.post(Ready())
    for memo in sorted((root / "memo/builder/inbox").glob("*.md")):  # the scan's memos, settled (not 2 s later)
        r.sup.post(MemoSeen("builder", memo, complete=True))
    await r.settle()
    return r


# ------------------------------------------------------------------ which memo an answer is for
def test_an_answer_by_path_goes_to_that_roles_memo_and_a_name_in_two_roles_is_refused(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}, "ops": {}})
        await asked(r, "builder", "task.md", "Use library X?")
        await asked(r, "ops", "task.md", "Delete the old bucket?")
        with pytest.raises(
            AmbiguousMemoError, match=r"'task.md' matches 2 waiting memos \(memo/builder/waiting/task.md"
        ):
            await feature(r, AnswerRequest(memo="task.md", text="yes"))
        path = str(root / "memo/ops/waiting/task.md")
        answered = await feature(r, AnswerRequest(memo=path, text="yes, delete it", who="pat"))
        assert answered["role"] == "ops" and answered["question"] == "Delete the old bucket?"
        assert r.folder("builder", "waiting") == ["task.md"] and r.folder("ops", "waiting") == []
        assert "The answer (pat): yes, delete it" in r.agent("task").spec.prompt
        assert r.agent("task").spec.role.name == "ops"
        relative = await feature(r, AnswerRequest(memo="memo/builder/waiting/task.md", text="no", who="pat"))
        assert relative["role"] == "builder", "the dashboard's answer box sends the memo's path, relative"
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ an answer outliving its memo
def test_an_answered_memo_cancelled_in_its_inbox_takes_its_answer_with_it(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"max_concurrent": 1}})
        await asked(r, "builder", "a.md", "Deploy to prod?")
        await r.drop("builder", "b.md")  # holds the only slot: the answered memo waits in the inbox
        await feature(r, AnswerRequest(memo="a", text="YES deploy to prod", who="pat"))
        assert rows(r) == [("builder", "a.md", "answered")]
        assert (await r.request(CancelRequested, memo="a.md")).result()["state"] == "cancelled"
        assert rows(r) == [], "its answer went with it"
        await r.exit("b", 0)
        await r.drop("builder", "a.md", body="a new task: do NOT deploy", front={"id": "a"})
        assert "Deploy to prod?" not in r.agent("a").spec.prompt, "a later memo of the same name is not answered"
        r.close()

    play(tmp_path, scenario)


def test_an_answer_is_carried_by_its_memo_alone_not_by_another_with_the_same_id(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"command": CLAUDE, "max_concurrent": 2}})
        await r.drop("builder", "a.md", front={"id": "T-1"})
        defer(r, "a", DeferredCall("toolu_1", "Bash", {"command": 'orchestrator ask "Push?"'}))
        await r.settle()
        await feature(r, AnswerRequest(memo="a.md", text="push it"))
        assert r.agent("a").spec.args[-2:] == ("--resume", "S-1")
        await r.drop("builder", "c.md", front={"id": "T-1"})  # ids repeat in real teams
        other = r.agent("c")
        assert "--resume" not in other.spec.args and other.spec.prompt, "c.md runs its own text, in its own session"
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ a restart between two steps
def test_a_question_is_on_record_with_its_runs_end_so_a_restart_right_after_finds_it(tmp_path: Path) -> None:
    killed_at(
        tmp_path,
        "Asks.on_finished = lambda self, event: os._exit(9)  # once the run's end is committed, before the rest",
        ASKED_WHICH_DESIGN,
    )

    async def after(root: Path) -> None:
        r = Replay(root, {"builder": {"ask_timeout": "1h"}})
        told: list[TeamEvent] = []
        r.sup.lc.team_events.listeners.append(told.append)
        r.sup.extension(Asks).start()
        assert r.folder("builder", "waiting") == ["a.md"]
        assert [n["question"] for n in r.sup.view(False).to_json()["needs_input"]] == ["Which design?"]
        assert told == [TeamEvent("needs_input", "builder", "a.md", None, "Which design?")], "told again at a start"
        await feature(r, AnswerRequest(memo="a", text="B", who="pat"))
        assert "The answer (pat): B" in r.agent("a").spec.prompt
        r.close()

    play(tmp_path, after)


def test_a_question_past_its_ask_timeout_at_a_start_is_ended_without_a_page_first(tmp_path: Path) -> None:
    """Defect: a start after a long downtime told people of a question already past its ``ask_timeout``, then
    failed it half a second later: two pages for a question nobody could answer any more."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"ask_timeout": "1h"}})
        await asked(r, "builder", "a.md", "Which design?")
        later = r.clock.now() + timedelta(hours=2)
        r.close()
        again = Replay(root, {"builder": {"ask_timeout": "1h"}}, start=later)
        told: list[TeamEvent] = []
        again.sup.lc.team_events.listeners.append(told.append)
        again.sup.extension(Asks).start()
        await again.advance(1)
        assert again.folder("builder", "failed") == ["a.md"]
        assert told == [], "no needs_input for it"
        again.close()

    play(tmp_path, scenario)


def test_an_answer_is_on_record_before_its_memo_moves_so_a_restart_between_finishes_the_move(tmp_path: Path) -> None:
    killed_at(
        tmp_path,
        "Asks._back = lambda self, ask: os._exit(9)  # once the answer is committed, before the memo moves",
        ASKED_WHICH_DESIGN
        + """
        await feature(r, AnswerRequest(memo="a", text="B, the smaller one", who="pat"))
        """,
    )

    async def after(root: Path) -> None:
        r = Replay(root, {"builder": {"ask_timeout": "1h"}})
        assert r.folder("builder", "waiting") == ["a.md"] and rows(r) == [("builder", "a.md", "answered")]
        r.sup.extension(Asks).start()
        r.sup.post(Ready())  # start-up is over, as `up` says once every feature has started
        await r.settle()
        assert r.folder("builder", "waiting") == [] and r.sup.view(False).to_json()["needs_input"] == []
        assert "was answered before the restart; queued to run again" in r.console.text
        assert "The answer (pat): B, the smaller one" in r.agent("a").spec.prompt
        r.close()

    play(tmp_path, after)


def test_a_question_asked_is_on_record_so_the_run_taken_back_after_a_restart_is_parked(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root)
        await r.drop("builder", "a.md")
        run = r.run_of("a")
        await feature(r, AskRequest(run_id=run.run_id, question="Which design?"))
        again = Replay(root).sup.extension(Asks)  # a restart of `up` while the agent ends its run
        decided = again.decide_end(run, AttemptVerdict(0))
        assert isinstance(decided, Park) and decided.reason == "asks a person: Which design?", decided
        await r.exit("a", 0)
        assert rows(r) == [("builder", "a.md", "waiting")], "the asking went with the run's end"
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ timeouts and roles
def test_a_timeout_that_cannot_end_its_memo_does_not_keep_the_others_from_theirs(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        approve = {"command": CLAUDE, "approve": ["Bash"], "ask_timeout": "1h", "on_timeout": "deny"}
        r = Replay(root, {"ops": approve, "builder": {"ask_timeout": "2h"}})
        await r.drop("ops", "p.md")
        defer(r, "p", DeferredCall("toolu_1", "Bash", {"command": "make deploy"}))
        await r.settle()
        await asked(r, "builder", "b.md", "Which design?")
        (root / "memo/ops/waiting/p.md").rename(root / "p.md")  # a person moved it away by hand
        await r.advance(3601)
        assert "p.md: its ask_timeout could not end it" in r.console.text
        await r.advance(7200)
        assert r.folder("builder", "failed") == ["b.md"], "the other question still timed out"
        assert rows(r) == []
        r.close()

    play(tmp_path, scenario)


def test_a_question_of_a_role_gone_from_roles_yaml_is_said_once_and_answered_in_one_line(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}, "ops": {"ask_timeout": "1h"}})
        await asked(r, "ops", "t.md", "Delete it?")
        r.close()
        r = Replay(root, {"builder": {}})  # ops removed, `up` started again
        asks = r.sup.extension(Asks)
        asks.start()
        assert asks.timer is None, "nothing to time out: no rule of its role is left"
        assert "t.md waits in memo/ops/waiting/, but role ops is no longer in roles.yaml" in r.console.text
        with pytest.raises(UsageError, match=r"role ops is no longer in roles.yaml: add it back") as refused:
            asks.answer(AnswerRequest(memo="t", text="yes"))
        assert "\n" not in str(refused.value)
        cancel = await r.request(CancelRequested, memo="t")  # defect: "already finished" (exit 7), as if it had ended
        with pytest.raises(UsageError, match=r"memo t.md waits in memo/ops/waiting/, but role ops is no longer in"):
            cancel.result()
        r.close()

    play(tmp_path, scenario)


def test_the_same_question_asked_again_after_its_answer_is_sent_again() -> None:
    """A channel sends an event for a memo once, until the memo runs again or ends (``Settle``)."""
    sent: list[dict[str, object]] = []
    deliveries = Deliveries("hook", lambda body: sent.append(body) or "200", lambda _line: None)
    body = {"event": "needs_input", "role": "builder", "memo": "a.md", "question": "Bash: git push origin main"}
    deliveries.take(Deliver(body))
    deliveries.take(Deliver(body))
    assert len(sent) == 1, "the same event twice is sent once"
    deliveries.take(Settle((memo_key("builder", "a.md"),)))  # denied, the memo ran again, and it asks the same again
    deliveries.take(Deliver(body))
    assert len(sent) == 2


def test_a_kill_between_the_parked_memos_move_and_the_runs_end_leaves_it_waiting_and_answerable(tmp_path: Path) -> None:
    killed_at(
        tmp_path,
        "Lifecycle._settle_attempts = lambda *a, **k: os._exit(9)  # the memo is in waiting/, the end not committed",
        ASKED_WHICH_DESIGN,
    )

    async def after(root: Path) -> None:
        r = await restarted(root)
        assert r.folder("builder", "waiting") == ["a.md"]
        assert [n["question"] for n in r.sup.view(False).to_json()["needs_input"]] == ["Which design?"]
        await feature(r, AnswerRequest(memo="a", text="B", who="pat"))
        assert "The answer (pat): B" in r.agent("a").spec.prompt
        r.close()

    play(tmp_path, after)


def test_a_kill_during_the_cancel_of_a_waiting_memo_leaves_it_waiting_with_its_question(tmp_path: Path) -> None:
    killed_at(
        tmp_path,
        killed_moving_to("cancelled"),  # the cancel's end is committed up to here; its memo has not moved
        ASKED_WHICH_DESIGN
        + """
        await r.request(CancelRequested, memo="a.md")
        """,
    )

    async def after(root: Path) -> None:
        r = await restarted(root)
        assert r.folder("builder", "waiting") == ["a.md"] and (root / "memo/builder/waiting/a.question").exists()
        assert [n["question"] for n in r.sup.view(False).to_json()["needs_input"]] == ["Which design?"]
        assert (await r.request(CancelRequested, memo="a.md")).result()["state"] == "cancelled"
        assert rows(r) == [] and r.folder("builder", "cancelled") == ["a.md"]
        r.close()

    play(tmp_path, after)


def test_a_kill_after_the_answered_runs_end_gives_its_answer_to_no_later_memo(tmp_path: Path) -> None:
    killed_at(
        tmp_path,
        killed_after_the_end_of(2),  # the answered run's end is committed; what follows it never runs
        """
        await r.drop("builder", "a.md", body="deploy the service")
        await feature(r, AskRequest(run_id=r.agent("a").spec.run_id, question="Deploy to prod?"))
        await r.exit("a", 0)
        await feature(r, AnswerRequest(memo="a", text="YES deploy to prod", who="pat"))
        await r.exit("a", 0)
        """,
    )

    async def after(root: Path) -> None:
        r = await restarted(root)
        assert rows(r) == [] and r.folder("builder", "archive") == ["a.md"]
        await r.drop("builder", "a.md", body="a new, unrelated task: do NOT deploy", front={"id": "new"})
        assert "YES deploy to prod" not in r.agent("a").spec.prompt
        r.close()

    play(tmp_path, after)


def test_a_memo_found_waiting_with_no_record_is_read_back_from_its_question_file(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        waiting = root / "memo/builder/waiting"
        waiting.mkdir(parents=True)
        (waiting / "a.md").write_text("---\nid: a\n---\nbody\n", encoding="utf-8")
        (waiting / "a.question").write_text("approval: Bash: make deploy\nrole: builder\nrun: 7\n", encoding="utf-8")
        (waiting / "b.md").write_text("---\nid: b\n---\nbody\n", encoding="utf-8")
        r = await restarted(root)
        found = {n["memo"]: (n["kind"], n["question"]) for n in r.sup.view(False).to_json()["needs_input"]}
        assert found == {"a.md": ("approval", "Bash: make deploy"), "b.md": ("question", restart.LOST)}, found
        assert "b.md waits in memo/builder/waiting/ with no record (its question lost)" in r.console.text
        await feature(r, AnswerRequest(memo="a.md", allow=True, who="pat"))
        assert r.agent("a").alive, "answered, it runs again"
        r.close()

    play(tmp_path, scenario)


def test_an_answered_memo_renamed_on_its_way_back_keeps_its_answer_and_gives_it_to_no_namesake(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"max_concurrent": 3, "retry": {"max": 1, "backoff": ["1s"]}}})
        await r.drop("builder", "a.md", body="first task", front={"id": "A1"})
        await feature(r, AskRequest(run_id=r.agent("a").spec.run_id, question="Deploy to prod?"))
        await r.exit("a", 0)
        await r.drop("builder", "a.md", body="second task, unrelated", front={"id": "A2"})
        other = r.agent("a")
        answered = await feature(r, AnswerRequest(memo="memo/builder/waiting/a.md", text="YES deploy", who="pat"))
        assert answered["queued"].endswith("inbox/a.1.md"), "free in the inbox and in active/, where a.md runs"
        assert "YES deploy" in r.agent("a.1").spec.prompt
        other.exit(1)
        await r.settle()
        await r.advance(2)
        retry = r.agent("a", attempt=2)
        assert "YES deploy" not in retry.spec.prompt, "the other a.md's retry takes no answer"
        r.close()

    play(tmp_path, scenario)


def test_a_kill_during_the_timeout_of_a_waiting_memo_leaves_it_waiting_with_its_question(tmp_path: Path) -> None:
    killed_at(
        tmp_path,
        killed_moving_to("failed"),  # the timeout's end is committed up to here; its memo has not moved
        ASKED_WHICH_DESIGN
        + """
        await r.advance(3601)
        """,
    )

    async def after(root: Path) -> None:
        r = await restarted(root)
        assert [n["question"] for n in r.sup.view(False).to_json()["needs_input"]] == ["Which design?"]
        await r.advance(3601)  # the restarted clock starts where the first one did
        assert r.folder("builder", "failed") == ["a.md"] and rows(r) == [], "its timeout ends it still"
        r.close()

    play(tmp_path, after)


ONE_SLOT = '{"builder": {"ask_timeout": "1h", "max_concurrent": 1}}'
# a.md asks, is answered "YES deploy to prod", and an unrelated a.md (another id) waits for the one slot
ANSWERED_THEN_A_NAMESAKE = """
        await r.drop("builder", "a.md", body="deploy the service", front={"id": "A1"})
        await feature(r, AskRequest(run_id=r.agent("a").spec.run_id, question="Deploy to prod?"))
        await r.exit("a", 0)
        await feature(r, AnswerRequest(memo="a", text="YES deploy to prod", who="pat"))
        await r.drop("builder", "a.md", body="unrelated: do NOT deploy", front={"id": "A2"})  # queued: one slot
"""


def test_a_kill_after_an_answered_run_is_returned_under_another_name_keeps_the_answer_with_it(tmp_path: Path) -> None:
    killed_at(
        tmp_path,
        killed_after_the_end_of(2),  # its end (returned as a.1.md) is committed; the answer's name has not followed
        ANSWERED_THEN_A_NAMESAKE
        + """
        r.agent("a").usage_limit = UsageLimit("five_hour", None, "limit")
        await r.exit("a", 1)
        """,
        roles=ONE_SLOT,
    )

    async def after(root: Path) -> None:
        r = await restarted(root, ONE_SLOT)
        assert rows(r) == [("builder", "a.1.md", "answered")]
        carried = {}
        for _ in range(2):
            agent = next(agent for agent in r.spawner.agents if agent.alive)
            carried[agent.spec.memo_paths[0].name] = "YES deploy to prod" in agent.spec.prompt
            agent.exit(0)
            await r.settle()
        assert carried == {"a.1.md": True, "a.md": False}, carried
        r.close()

    play(tmp_path, after)


def test_a_kill_while_an_answered_runs_end_settles_keeps_its_answer_for_its_next_run(tmp_path: Path) -> None:
    killed_at(
        tmp_path,
        textwrap.dedent(
            """
            class Settles(Extension):  # as a workspace's commit does: the end waits for work on a thread
                def __init__(self, host):
                    self.host = host
                def before_finish(self, run, state, reason):
                    if run.run_id == 2 and state is RunState.SUCCEEDED:
                        async def commit():
                            await asyncio.sleep(0)
                            os._exit(9)  # killed during it: the run's end is not on record
                        return commit()
                    return None
            """
        ),
        """
        await r.drop("builder", "a.md", body="deploy the service")
        await feature(r, AskRequest(run_id=r.agent("a").spec.run_id, question="Deploy to prod?"))
        await r.exit("a", 0)
        await feature(r, AnswerRequest(memo="a", text="YES deploy to prod", who="pat"))
        await r.exit("a", 0)
        """,
        more="Settles",
    )

    async def after(root: Path) -> None:
        r = await restarted(root)
        assert "YES deploy to prod" in r.agent("a").spec.prompt, "the memo runs again, and with its answer"
        r.close()

    play(tmp_path, after)


def test_a_batch_run_of_answered_memos_carries_every_answer(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"batch": True}})
        await asked(r, "builder", "a.md", "Question of a?")
        await asked(r, "builder", "b.md", "Question of b?")
        await r.drop("builder", "c.md")  # the batch role's one run, busy
        await feature(r, AnswerRequest(memo="a", text="ANSWER-A", who="pat"))
        await feature(r, AnswerRequest(memo="b", text="ANSWER-B", who="pat"))
        await r.exit("c", 0)
        both = next(agent for agent in r.spawner.agents if agent.alive)
        assert sorted(p.name for p in both.spec.memo_paths) == ["a.md", "b.md"]
        assert "ANSWER-A" in both.spec.prompt and "ANSWER-B" in both.spec.prompt
        both.exit(0)
        await r.settle()
        assert rows(r) == [] and r.folder("builder", "archive") == ["a.md", "b.md", "c.md"]
        r.close()

    play(tmp_path, scenario)


class Settles(Extension):
    """As a workspace's set-aside does: the end of a failed or cancelled waiting memo ``a.md`` waits for ``gate``."""

    gate: asyncio.Event | None = None

    def __init__(self, host: Host) -> None:
        self.host = host

    def before_finish(self, run: RoleRun, state: RunState, reason: str | None) -> Any:
        first = run.memos[0] if run.memos else None
        if state.live or first is None or first.name != "a.md" or first.path.parent.name != "waiting":
            return None
        gate = Settles.gate
        assert gate is not None
        return gate.wait()


def test_a_memo_whose_cancel_or_timeout_is_under_way_cannot_be_answered(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        Settles.gate = asyncio.Event()
        r = Replay(root, {"builder": {"ask_timeout": "1h"}}, more=[Settles])
        await asked(r, "builder", "a.md", "Deploy to prod?")
        cancel = await r.request(CancelRequested, memo="a.md")
        with pytest.raises(UsageError, match=r"^orchestrator answer: a.md is being cancelled or failed; nothing to"):
            await feature(r, AnswerRequest(memo="a", text="YES deploy", who="pat"))
        Settles.gate.set()
        await r.settle()
        assert cancel.result()["state"] == "cancelled" and r.folder("builder", "cancelled") == ["a.md"]
        assert rows(r) == [] and r.folder("builder", "inbox") == []
        r.close()

    play(tmp_path, scenario)


def test_a_batch_asks_timeout_fails_each_memo_once_while_one_of_their_ends_waits(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        Settles.gate = asyncio.Event()
        r = Replay(root, {"builder": {"ask_timeout": "1h", "batch": True}}, more=[Settles])
        await batch_asked(r)
        assert r.folder("builder", "waiting") == ["a.md", "b.md"]
        await r.advance(3601)  # a.md's end waits, b.md's is done
        await r.advance(1)  # the timer armed again
        Settles.gate.set()
        await r.settle()
        failed = [row["memos"] for row in r.sup.store.history() if row["state"] == "failed"]
        assert sorted(failed) == [["a.md"], ["b.md"]], failed
        assert rows(r) == []
        r.close()

    play(tmp_path, scenario)


def test_a_kill_after_an_answered_run_asked_again_gives_its_old_answer_to_no_namesake(tmp_path: Path) -> None:
    killed_at(
        tmp_path,
        killed_after_the_end_of(2),  # run 2 parked again, its end committed; what follows it never runs
        ANSWERED_THEN_A_NAMESAKE
        + """
        await feature(r, AskRequest(run_id=2, question="Which region?"))
        await r.exit("a", 0)
        """,
        roles=ONE_SLOT,
    )

    async def after(root: Path) -> None:
        r = await restarted(root, ONE_SLOT)
        assert rows(r) == [("builder", "a.md", "waiting")]
        assert "YES deploy to prod" not in r.agent("a").spec.prompt, "the unrelated a.md runs without it"
        r.close()

    play(tmp_path, after)


def test_a_question_file_whose_memo_never_reached_waiting_is_not_left_there(tmp_path: Path) -> None:
    killed_at(
        tmp_path,
        textwrap.dedent(
            """
            park = Asks._park
            def _park(self, run, pending, waiting):
                park(self, run, pending, waiting)
                os._exit(9)  # its question file is written; nothing of this end is committed
            Asks._park = _park
            """
        ),
        ASKED_WHICH_DESIGN,
    )

    async def after(root: Path) -> None:
        r = await restarted(root)
        assert sorted(p.name for p in (root / "memo/builder/waiting").iterdir()) == []
        r.close()

    play(tmp_path, after)


def test_a_batch_run_of_an_answered_memo_and_another_starts_afresh_with_the_answer(tmp_path: Path) -> None:
    """A session resumed with no new prompt would never see the other memo: the run starts afresh, both in it."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"command": CLAUDE, "batch": True}})
        await r.drop("builder", "a.md")
        defer(r, "a", DeferredCall("toolu_1", "Bash", {"command": 'orchestrator ask "Push?"'}))
        await r.settle()
        await r.drop("builder", "b.md")  # the batch role's one run, busy
        await feature(r, AnswerRequest(memo="a.md", text="push it"))
        await r.drop("builder", "c.md", body="C-TASK: write the changelog")
        await r.exit("b", 0)
        both = next(agent for agent in r.spawner.agents if agent.alive)
        assert sorted(p.name for p in both.spec.memo_paths) == ["a.md", "c.md"]
        assert "--resume" not in both.spec.args and "The answer (unknown): push it" in both.spec.prompt
        r.close()

    play(tmp_path, scenario)


def test_an_allowed_approval_carried_into_a_fresh_session_is_allowed_there_not_asked_again(tmp_path: Path) -> None:
    """A batch run of the answered memo and another starts afresh: its calls have new ids, so the hook answers the
    same call by its tool and input, and ``$answers`` says it was allowed."""

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {"command": CLAUDE, "batch": True, "approve": ["Bash(git push:*)"]}})
        await r.drop("builder", "a.md")
        push = {"command": "git push origin main"}
        defer(r, "a", DeferredCall("toolu_1", "Bash", push))
        await r.settle()
        await r.drop("builder", "b.md")  # the batch role's one run, busy
        await feature(r, AnswerRequest(memo="a.md", allow=True, who="pat"))
        await r.drop("builder", "c.md")
        await r.exit("b", 0)
        fresh = next(agent for agent in r.spawner.agents if agent.alive)
        assert "--resume" not in fresh.spec.args and "The answer (pat): allowed" in fresh.spec.prompt
        event = {"tool_name": "Bash", "tool_input": push, "tool_use_id": "toolu_9", "cwd": str(root)}
        assert decision(event, fresh.spec.env)["hookSpecificOutput"]["permissionDecision"] == "allow"
        other = {**event, "tool_input": {"command": "git push origin other"}}
        assert decision(other, fresh.spec.env)["hookSpecificOutput"]["permissionDecision"] == "defer"
        unnamed = {**other, "tool_use_id": ""}
        assert decision(unnamed, fresh.spec.env)["hookSpecificOutput"]["permissionDecision"] == "defer"
        r.close()

    play(tmp_path, scenario)


def test_in_a_fresh_session_an_answer_with_no_call_of_its_own_allows_no_call(tmp_path: Path) -> None:
    """An answer found again from a .question file (or to a command agent's question) names no call: in a fresh
    session, where calls are matched by their input, it must not allow whatever call needs an approval."""
    answer = tmp_path / "1.json"
    answer.write_text(json.dumps({"decision": "allow", "text": "", "note": None, "tool_use_id": ""}), encoding="utf-8")
    env = {"ORCHESTRATOR_APPROVE": json.dumps(["Bash(git push:*)"]), "ORCHESTRATOR_ANSWER_FILE": str(answer)}
    event = {"tool_name": "Bash", "tool_input": {"command": "git push"}, "tool_use_id": "toolu_9", "cwd": str(tmp_path)}
    fresh = decision(event, {**env, "ORCHESTRATOR_ANSWER_BY_INPUT": "1"})
    assert fresh is not None and fresh["hookSpecificOutput"]["permissionDecision"] == "defer"


def test_a_memo_still_being_parked_is_answered_once_it_waits_and_a_batch_ask_by_any_memo(tmp_path: Path) -> None:
    class Slow(Extension):  # any hook may make a parking end wait
        gate = asyncio.Event()

        def __init__(self, host: Host) -> None:
            self.host = host

        def before_finish(self, run: RoleRun, state: RunState, reason: str | None) -> Any:
            return Slow.gate.wait() if state is RunState.RETURNED and reason and reason.startswith("waiting:") else None

    async def scenario(root: Path) -> None:
        Slow.gate = asyncio.Event()
        r = Replay(root, {"builder": {"batch": True}}, more=[Slow])
        await batch_asked(r)  # its parking end waits
        with pytest.raises(UsageError, match=r"^orchestrator answer: a.md is still being moved to waiting/"):
            await feature(r, AnswerRequest(memo="a", text="yes"))
        Slow.gate.set()
        await r.settle()
        assert r.folder("builder", "waiting") == ["a.md", "b.md"]
        answered = await feature(r, AnswerRequest(memo="b", text="yes", who="pat"))  # either memo names the ask
        assert answered["memo"] == "a.md" and r.folder("builder", "waiting") == []
        r.close()

    play(tmp_path, scenario)


def test_an_unanswered_question_is_told_again_every_remind_on_the_supervisors_clock(tmp_path: Path) -> None:
    """``remind: 4h`` is timed on the injected clock, so moving the clock tells the question again, numbered; its
    answer (the memo runs again) ends the reminders; a channel without ``remind`` is told once."""

    async def scenario(root: Path) -> None:
        command = {"kind": "command", "argv": [sys.executable, "-c", "pass"]}
        r = Replay(root, {"builder": {}}, notifications=[{**command, "remind": "4h"}, command])
        notifier = r.sup.extension(Notifier)
        taken: list[list[object]] = [[], []]
        for (_channel, worker), into in zip(notifier.workers, taken, strict=True):
            worker.submit = into.append  # type: ignore[method-assign]

        def told(channel: int) -> list[object]:
            return [
                item.body.get("reminder")
                for item in taken[channel]
                if isinstance(item, Deliver) and item.body["event"] == "needs_input"
            ]

        await asked(r, "builder", "a.md", "Which design?")
        assert told(0) == told(1) == [None]
        await r.advance(4 * 3600 - 1)
        assert told(0) == [None]
        await r.advance(1)
        assert told(0) == [None, 1]
        await r.advance(4 * 3600)
        assert told(0) == [None, 1, 2] and told(1) == [None], "a channel without remind is told once"
        bodies = [item.body for item in taken[0] if isinstance(item, Deliver)]
        reminder = bodies[-1]
        assert reminder["question"] == "Which design?" and reminder["memo"] == "a.md"
        assert len({body["id"] for body in bodies}) == 3, "each reminder a notification with an id of its own"
        await feature(r, AnswerRequest(memo="a", text="the first", who="pat"))
        assert r.state("a.md") == "running", "answered: its memo runs again"
        await r.advance(10 * 3600)
        assert told(0) == [None, 1, 2] and notifier.reminders.waiting == {} and notifier.reminders.timer is None, (
            "no reminder after the answer, and no timer of them left armed"
        )
        r.close()

    play(tmp_path, scenario)


def test_two_roles_questions_in_memos_of_one_name_are_each_told_and_reminded(tmp_path: Path) -> None:
    """Defect: notifications knew a memo by its name alone, so a second role's question in a memo of the same name
    was never sent, only one of the two was reminded, and the answer to one ended the other's reminders."""

    async def scenario(root: Path) -> None:
        channel = {"kind": "command", "argv": [sys.executable, "-c", "pass"], "remind": "4h"}
        r = Replay(root, {"builder": {}, "reviewer": {}}, notifications=[channel])
        notifier = r.sup.extension(Notifier)
        taken: list[object] = []
        for _channel, worker in notifier.workers:
            worker.submit = taken.append  # type: ignore[method-assign]
        made = Deliveries("ch", lambda body: "ok", lambda _line: None)  # the channel's own dedupe, fed what it gets
        sent: list[tuple[str, object]] = []
        made.deliver = lambda body: (  # type: ignore[method-assign]
            body["event"] != "needs_input" or sent.append((body["role"], body.get("reminder"))) or True
        )

        def feed() -> None:
            for item in taken:
                made.take(item)  # type: ignore[arg-type]
            taken.clear()

        await asked(r, "builder", "same.md", "Same question?")
        await asked(r, "reviewer", "same.md", "Same question?")
        feed()
        assert sent == [("builder", None), ("reviewer", None)], "each role's question is sent"
        await r.advance(4 * 3600)
        feed()
        assert sorted(sent[2:]) == [("builder", 1), ("reviewer", 1)], "and each is reminded"
        await feature(r, AnswerRequest(memo=str(root / "memo/builder/waiting/same.md"), text="yes", who="pat"))
        await r.advance(4 * 3600)
        feed()
        assert sent[4:] == [("reviewer", 2)], "the other role's question is still reminded"
        r.close()

    play(tmp_path, scenario)


def test_the_command_that_answers_works_when_pasted(tmp_path: Path) -> None:
    """Defect: the hint said ``orchestrator answer two words.md "YOUR ANSWER"`` (two arguments to a shell), and named
    a memo whose name waits in another role too by that name alone (exit 8, ambiguous)."""
    from orchestrator.control.status_view import status_view

    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}, "reviewer": {}})
        await asked(r, "builder", "two words.md", "Which one?")
        said = (root / "memo/builder/waiting/two words.question").read_text(encoding="utf-8")
        assert "answer: orchestrator answer 'two words.md' \"YOUR ANSWER\"" in said, said
        await asked(r, "reviewer", "two words.md", "And here?")
        said = (root / "memo/reviewer/waiting/two words.question").read_text(encoding="utf-8")
        path = root / "memo/reviewer/waiting/two words.md"
        assert f"answer: orchestrator answer '{path}' " in said, said
        snap = r.sup.view(False).to_json()
        lines = [line for line in status_view({**snap, "root": str(root)}) if isinstance(line, str)]
        hints = [line.split("(`", 1)[1] for line in lines if line.startswith("needs input:")]
        assert sorted(hints) == sorted(
            f"orchestrator answer '{root}/memo/{role}/waiting/two words.md' TEXT`)" for role in ("builder", "reviewer")
        ), hints
        r.close()

    play(tmp_path, scenario)


def test_a_cancelled_question_renamed_on_its_way_is_reminded_no_more(tmp_path: Path) -> None:
    """Its channel is told to settle the name it was asked under, not only the one the move gave it; a channel is
    queued a settle only for a memo it was sent something about (a channel that is down fills up with news only)."""

    async def scenario(root: Path) -> None:
        channel = {"kind": "command", "argv": [sys.executable, "-c", "pass"], "remind": "4h"}
        r = Replay(root, {"builder": {}}, notifications=[channel])
        notifier = r.sup.extension(Notifier)
        taken: list[object] = []
        for _channel, worker in notifier.workers:
            worker.submit = taken.append  # type: ignore[method-assign]
        await asked(r, "builder", "c.md", "Which design?")
        assert not [item for item in taken if isinstance(item, Settle)], "nothing was sent of it when it started"
        (root / "memo/builder/cancelled/c.md").write_text("an earlier c.md\n", encoding="utf-8")
        taken.clear()
        assert (await r.request(CancelRequested, memo="c.md")).result()["state"] == "cancelled"
        assert r.folder("builder", "cancelled") == ["c.1.md", "c.md"]
        settled = [name for item in taken if isinstance(item, Settle) for name in item.memos]
        assert "builder/c.md" in settled, taken
        assert notifier.reminders.waiting == {}, "its reminders end with it"
        r.close()

    play(tmp_path, scenario)


def test_a_start_removes_the_questions_of_no_waiting_memo_and_a_write_a_kill_cut_short(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        waiting = root / "memo/builder/waiting"
        waiting.mkdir(parents=True)
        kept = "y" * 252 + ".md"  # its question's name is cut to fit
        (waiting / kept).write_text("---\nid: y\n---\nbody\n")
        (waiting / ("y" * 246 + ".question")).write_text("question: Which one?\nrun: 1\n")
        for left in ("gone.question", ".a.question.4242.tmp"):
            (waiting / left).write_text("question: half")
        r = await restarted(root)
        assert sorted(p.name for p in waiting.iterdir()) == sorted([kept, "y" * 246 + ".question"])
        assert r.sup.view(False).to_json()["needs_input"][0]["question"] == "Which one?"
        r.close()

    play(tmp_path, scenario)
