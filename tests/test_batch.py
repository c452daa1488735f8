"""Batch roles with a backlog: runs of at most ``batch_max`` memos, the list of memos in a file, bounded reasons,
and a start that fails by the orchestrator's own doing returns its memos instead of failing them."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from conftest import Project, read_found, wait_for
from orchestrator.agents import memo_list
from orchestrator.config import load_config
from orchestrator.core.errors import ConfigError
from orchestrator.core.events import RescanNeeded
from orchestrator.intake import notices
from replay import Replay


def backlog(project: Project, role: str, count: int, stem: str = "m", front: str = "") -> list[str]:
    """``count`` memos already complete in the inbox (written a minute ago): found by the first scan."""
    inbox = project.root / "memo" / role / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    names = [f"{stem}-{i:05d}.md" for i in range(count)]
    past = time.time() - 60
    for name in names:
        path = inbox / name
        path.write_text(f"---\nid: {name[:-3]}\n{front}---\nbody\n", encoding="utf-8")
        os.utime(path, (past, past))
    return names


# ------------------------------------------------------------------ runs of at most batch_max
def test_a_backlog_of_5000_memos_drains_into_the_archive_in_runs_of_at_most_batch_max(project: Project) -> None:
    # batch_max: 100, the default; no rescan within the test, so each next run must follow its predecessor at once
    project.configure({"pm": {"batch": True}}, prompt="batch $seq\n", rescan_interval="1h")
    names = backlog(project, "pm", 5000)
    orch = project.up()
    archive, failed = (project.root / "memo" / "pm" / folder for folder in ("archive", "failed"))

    def ended() -> int:
        return len(os.listdir(archive)) + len([n for n in os.listdir(failed) if n.endswith(".md")])

    wait_for(lambda: ended() == 5000, 90, "5000 memos in archive/ or failed/", interval=0.5)
    assert orch.stop() == 0
    assert project.folder("pm", "failed") == []
    assert project.folder("pm", "inbox") == [] and project.folder("pm", "active") == []
    assert project.folder("pm", "archive") == names
    records = project.records()
    sizes = [len(r["memos"]) for r in records]
    assert sizes == [100] * 50, sizes
    handed = [Path(p).name for r in records for p in r["memos"]]
    assert handed == names, "every memo handed over once, oldest first"
    assert all(r["attempt"] == 1 for r in records)


def test_batch_max_defaults_to_100_and_must_be_at_least_1(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "pm.md").write_text("x\n", encoding="utf-8")
    (tmp_path / "roles.yaml").write_text("roles:\n  pm: {batch: true}\n", encoding="utf-8")
    assert load_config(tmp_path).roles["pm"].batch_max == 100
    (tmp_path / "roles.yaml").write_text("roles:\n  pm: {batch: true, batch_max: 0}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"roles\.pm\.batch_max:"):
        load_config(tmp_path)


# ------------------------------------------------------------------ the list of memos: a file, and short forms
def test_a_short_list_is_in_the_file_the_environment_and_the_prompt(project: Project) -> None:
    project.configure({"pm": {"batch": True}}, prompt="memos:\n$memo_paths\n")
    names = backlog(project, "pm", 3)
    orch = project.up("--until-idle", wait_ready=False)
    assert orch.wait(30) == 0, orch.output
    (record,) = project.records()
    active = project.root / "memo" / "pm" / "active"
    paths = [str(active / name) for name in names]
    assert record["memos_file"] == str(project.root / ".orchestrator" / "runs" / str(record["run_id"]) / "memos.txt")
    assert record["memos"] == paths  # read from the file
    assert record["env_memos"] == "\n".join(paths)
    assert record["prompt"] == "memos:\n" + "\n".join(paths) + "\n"


def test_a_list_over_64_kib_is_only_in_the_file_and_the_prompt_says_where(project: Project) -> None:
    project.configure({"pm": {"batch": True, "batch_max": 1000}}, prompt="memos:\n$memo_paths\n")
    names = backlog(project, "pm", 400, stem="m" * 200)  # about 110 KB of paths: it fits in no variable of ours
    orch = project.up("--until-idle", wait_ready=False)
    assert orch.wait(30) == 0, orch.output
    (record,) = project.records()
    active = project.root / "memo" / "pm" / "active"
    assert record["memos"] == [str(active / name) for name in names], "the file lists every memo"
    assert record["env_memos"] is None, "ORCHESTRATOR_MEMOS is unset when the list is too long"
    shown, last = record["prompt"].removeprefix("memos:\n").rstrip("\n").rsplit("\n", 1)
    assert len(shown.encode()) <= memo_list.LIST_MAX
    assert shown.splitlines() == record["memos"][: len(shown.splitlines())]
    rest = 400 - len(shown.splitlines())
    assert last == (
        f"(and {rest} more memos, 400 in all: the whole list, one path a line, is in {record['memos_file']}, "
        "which $ORCHESTRATOR_MEMOS_FILE names)"
    )
    assert project.folder("pm", "archive") == names


def test_the_prompt_list_is_cut_below_64_kib() -> None:
    paths = [f"/r/memo/pm/active/{'x' * 90}-{i}.md" for i in range(2000)]
    text = memo_list.prompt_list(paths, Path("/r/.orchestrator/runs/1/memos.txt"))
    assert len(text.encode()) <= memo_list.LIST_MAX
    assert memo_list.list_environment(paths, "/f") == {"ORCHESTRATOR_MEMOS_FILE": "/f"}
    assert memo_list.list_environment(paths[:3], "/f")["ORCHESTRATOR_MEMOS"] == "\n".join(paths[:3])


# ------------------------------------------------------------------ reasons stay small
def test_a_failed_batch_reason_names_20_memos_and_stays_under_16_kb(project: Project) -> None:
    project.configure({"pm": {"batch": True}, "lead": {}}, notify="lead", defaults={"retry": {"max": 0}})
    noisy = "agent: {exit: 1, say: " + "x" * 100_000 + "}\n"  # one 100 KB line in the log
    names = backlog(project, "pm", 60, front=noisy)
    orch = project.up()
    wait_for(lambda: len(project.folder("pm", "failed")) == 60, what="the batch in failed/")
    failed = project.root / "memo" / "pm" / "failed"
    for name in names:
        reason = (failed / name.replace(".md", ".reason")).read_text(encoding="utf-8")
        assert len(reason.encode()) < 16 * 1024, len(reason.encode())
        memos = next(line for line in reason.splitlines() if line.startswith("memos: "))
        assert memos == f"memos: {', '.join(names[:20])} and 40 more"
        assert reason.startswith("failed: exit code 1"), reason[:200]
    lead = project.root / "memo" / "lead"
    _, body = read_found(lead, "*/*-failed-*.md", "the failure notice")
    assert body.count("- m-") == 20 and "- and 40 more, in memo/pm/failed" in body
    assert orch.stop() == 0


def test_every_reason_file_is_cut_under_16_kb(tmp_path: Path) -> None:
    memo = tmp_path / "failed" / "m.md"
    memo.parent.mkdir()
    text = "failed: why\n" + "é" * 50_000 + "\n" + "line\n" * 1000
    written = notices.write_reason(memo, text).read_text(encoding="utf-8")
    assert len(written.encode()) < notices.REASON_MAX
    assert written.startswith("failed: why\n") and written.endswith("reason files stay under 16384]\n")
    assert notices.write_reason(memo, "short\n").read_text(encoding="utf-8") == "short\n"


# ------------------------------------------------------------------ starts that fail by our doing
def test_an_internal_start_failure_returns_the_memos_and_holds_the_role_for_a_growing_wait(tmp_path: Path) -> None:
    async def scenario() -> None:
        r = Replay(tmp_path, {"builder": {"max_concurrent": 1, "retry": {"max": 1, "backoff": ["1s"]}}})
        r.spawner.refuse, r.spawner.refuse_internal = "cannot start 'x': Argument list too long", True
        await r.drop("builder", "a.md")
        assert r.folder("builder", "inbox") == ["a.md"] and r.folder("builder", "failed") == []
        assert r.state("a") == "returned"
        assert r.sup.holds.current == {
            "builder": {"start": "its agent could not start (internal error); next try in 5s"}
        }
        await r.drop("builder", "b.md")
        assert r.console.text.count("start a ") == 1 and "start b " not in r.console.text, "held: nothing starts"
        await r.advance(4.9)
        assert r.console.text.count("start a ") == 1
        await r.advance(0.1)  # the wait is over: a again (first in the queue), failing again, waits twice as long
        assert r.console.text.count("start a ") == 2 and "start b " not in r.console.text
        assert "again (2 in a row): run 2 of builder could not start its agent" in r.console.text
        assert r.console.text.count("ERROR internal error") == 1, "loud once, then one line each"
        await r.advance(9.9)
        assert r.console.text.count("start a ") == 2
        r.spawner.refuse = None
        await r.advance(0.1)
        agent = r.agent("a")
        assert agent.spec.attempt == 1, "an attempt that never began is not counted"
        assert r.sup.holds.current == {}
        await r.exit("a", 0)
        await r.exit("b", 0)
        assert r.folder("builder", "archive") == ["a.md", "b.md"] and r.folder("builder", "failed") == []
        r.close()

    asyncio.run(scenario())


def test_a_role_environment_too_long_for_linux_is_refused_at_start_not_retried_for_ever(project: Project) -> None:
    """Linux passes no single string of 128 KiB or more, and at most ARG_MAX in all: a role's own ``env`` over
    either is its configuration's fault (at run time it would look like the orchestrator's, and be retried)."""
    project.configure({"builder": {"env": {"HUGE": "x" * 140_000}}})
    orch = project.up(wait_ready=False)
    assert orch.wait() == 2
    assert "roles.builder.env.HUGE: expected at most 131071 bytes" in orch.output, orch.output
    project.configure({"builder": {"env": {f"BIG{i}": "x" * 120_000 for i in range(20)}}})
    orch = project.up(wait_ready=False)
    assert orch.wait() == 2
    assert "roles.builder.env: expected the role's command and environment" in orch.output, orch.output
    assert "Traceback" not in orch.output


def test_an_environment_variable_that_is_not_utf8_starts_nothing_wrong(project: Project) -> None:
    """Found by a user-view hunt: a variable of ``up``'s own environment that is not UTF-8 (a ``PWD`` in a folder
    named in Latin-1) made its start-up check an internal error (exit 70); the agent gets it as it is."""
    project.configure()
    project.drop("builder", "a.md", {"id": "A-1"})
    orch = project.up("--until-idle", wait_ready=False, ODD=os.fsdecode(b"caf\xe9"))
    assert orch.wait() == 0, orch.output
    assert project.folder("builder", "archive") == ["a.md"]


def test_a_list_of_memos_that_cannot_be_written_returns_the_batch_to_the_inbox(tmp_path: Path) -> None:
    async def scenario() -> None:
        r = Replay(tmp_path, {"pm": {"batch": True, "batch_max": 2}})
        runs = r.config.state_dir / "runs"
        runs.write_text("not a folder", encoding="utf-8")  # where the list of memos goes cannot be made
        past = time.time() - 60
        for name in ("a.md", "b.md", "c.md"):  # all waiting when they are found: one batch takes the oldest two
            path = r.config.role_dir("pm") / "inbox" / name
            path.write_text(f"---\nid: {name[:-3]}\n---\nbody\n", encoding="utf-8")
            os.utime(path, (past, past))
        r.sup.post(RescanNeeded("test"))
        await r.settle()
        assert r.spawner.agents == [] and r.folder("pm", "failed") == []
        assert r.folder("pm", "inbox") == ["a.md", "b.md", "c.md"] and r.folder("pm", "active") == []
        assert "could not write the list of its memos" in r.console.text
        assert "a.md, b.md went back to the inbox" in r.console.text
        runs.unlink()
        await r.advance(5)
        (agent,) = r.spawner.agents
        listed = Path(agent.spec.env["ORCHESTRATOR_MEMOS_FILE"])
        active = r.config.role_dir("pm") / "active"
        assert listed.read_text(encoding="utf-8") == f"{active / 'a.md'}\n{active / 'b.md'}\n", "oldest first"
        assert agent.spec.env["ORCHESTRATOR_MEMOS"] == f"{active / 'a.md'}\n{active / 'b.md'}"
        await r.exit("a", 0)
        (second,) = r.spawner.agents[1:]
        assert [p.name for p in second.spec.memo_paths] == ["c.md"]
        r.close()

    asyncio.run(scenario())
