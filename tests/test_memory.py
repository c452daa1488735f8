"""Long-term memory: the rules as pure functions, the CLI as real processes, compaction through the replay loop."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from test_replay import play

from conftest import Project, wait_for
from orchestrator.config import load_config
from orchestrator.config.memory import parse_monthly_at, parse_weekly_at
from orchestrator.core.clock import ManualClock
from orchestrator.core.errors import MemoryRefusedError
from orchestrator.memory import rules
from orchestrator.memory.db import MemoryDB
from orchestrator.memory.db.schema import db_path
from orchestrator.memory.secrets import find_secret
from orchestrator.memory.service import Caller, Memory
from replay import Replay

FIXTURES = Path(__file__).parent / "fixtures" / "memory"


def mem(project: Project, *args: str, input: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return project.cli("memory", *args, input=input, **env)


@contextmanager
def as_agent(project: Project, role: str, run_id: str = "7") -> Iterator[Memory]:
    """The memory operations as an agent of ``role`` calls them (the CLI knows its caller from the kernel)."""
    config = load_config(project.root)
    db = MemoryDB(db_path(project.root / ".orchestrator"))
    try:
        yield Memory(db, config.memory, list(config.roles), Caller(role, run_id))
    finally:
        db.close()


@pytest.fixture
def team(project: Project) -> Project:
    project.configure({"builder": {}, "planner": {}, "keeper": {}}, memory={"curator": "keeper", "core_max": 3})
    return project


def entry_count(project: Project) -> int:
    db = MemoryDB(db_path(project.root / ".orchestrator"))
    try:
        return int(db.conn.execute("SELECT count(*) FROM entries").fetchone()[0])
    finally:
        db.close()


# ------------------------------------------------------------------ rules
def test_layer_follows_importance_after_the_supervisor_bonus() -> None:
    assert [rules.layer_for(n) for n in (1, 3, 4, 6, 7, 9, 10)] == [
        "daily",
        "daily",
        "weekly",
        "weekly",
        "monthly",
        "monthly",
        "core",
    ]
    assert rules.layer_for(2, remember=True) == "core"
    assert rules.effective_importance(5, "supervisor") == 7 and rules.effective_importance(9, "supervisor") == 10
    assert rules.effective_importance(5, "owner") == 5


def test_periods_must_fit_their_layer() -> None:
    assert rules.period_problem("daily", "2026-12-01") is None
    assert rules.period_problem("weekly", "2026-W49") is None
    assert rules.period_problem("monthly", "2026-12") is None
    assert rules.period_problem("weekly", "2026-12-01") is not None
    assert rules.period_problem("monthly", "2026-13") is not None
    assert rules.period_problem("daily", "2026-02-30") is not None
    assert rules.period_problem("core", "2026-12") is not None
    assert rules.week_of(datetime(2026, 12, 6).date()) == "2026-W49"


def test_due_moments_in_the_week_and_the_month() -> None:
    sunday = parse_weekly_at("sun 23:00")
    at = datetime(2026, 12, 6, 23, 30).astimezone()
    moment, week = rules.last_weekly_due(sunday, at)
    assert (moment.day, moment.hour, week) == (6, 23, "2026-W49")
    moment, week = rules.last_weekly_due(sunday, datetime(2026, 12, 6, 22, 0).astimezone())
    assert (moment.day, week) == (29, "2026-W48")
    assert rules.next_weekly_due(sunday, at).day == 13
    first = parse_monthly_at("1 00:30")
    moment, month = rules.last_monthly_due(first, datetime(2027, 1, 1, 1, 0).astimezone())
    assert (moment.month, month) == (1, "2026-12")
    assert rules.next_monthly_due(first, datetime(2026, 12, 15).astimezone()).month == 1
    for bad in ("sunday", "xyz 10:00", "sun 25:00"):
        with pytest.raises(ValueError):
            parse_weekly_at(bad)


def test_over_budget_the_oldest_least_important_go_first_and_a_line_says_so() -> None:
    def entries(layer: str, n: int, importance: int) -> list[dict[str, Any]]:
        return [
            {"id": f"{layer}{i}", "period": None, "category": "event", "importance": importance, "text": f"{layer} {i}"}
            for i in range(n)
        ]

    groups = [
        rules.Group("core", entries("core", 3, 10)),
        rules.Group("daily", entries("daily", 5, 2)),
        rules.Group("monthly", entries("monthly", 5, 7)),
    ]
    full = rules.render_memory(groups, 1000, 100_000)
    assert "left out" not in full and full.index("core 0") < full.index("daily 0") < full.index("monthly 0")
    cut = rules.render_memory(groups, 12, 100_000)
    assert len(cut.splitlines()) <= 12 + 2
    assert "core 2" in cut and "monthly 0" not in cut, "the oldest group goes first, core last"
    assert re.search(r"\((\d+) older or less important entries were left out.*orchestrator memory search", cut)


# ------------------------------------------------------------------ secrets
@pytest.mark.parametrize(
    "text",
    [
        "key sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123",
        "openai sk-proj-abcdefghijklmnopqrstuvwxyz012345",
        "gh token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "github_pat_11ABCDEFG0abcdefghijklmnopqrstuvwxyz0123",
        "aws AKIAIOSFODNN7EXAMPLE",
        "slack xoxb-1234567890-abcdefghij",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow",
        "password=hunter2x",
        "token: abc123def456",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ],
)
def test_secrets_are_found(text: str) -> None:
    assert find_secret(text) is not None


@pytest.mark.parametrize(
    "text",
    [
        "we changed the password policy",
        "the token budget was 5000 tokens",
        "パスワードの方針を変えた",
        "commit e9c0825 fixed the loop",
        "ask-ant colony",
    ],
)
def test_prose_about_secrets_passes(text: str) -> None:
    assert find_secret(text) is None


# ------------------------------------------------------------------ the CLI
def test_add_search_list_show_forget_replace_stats(team: Project) -> None:
    add = mem(team, "add", "the watcher must restart on overflow", "--role", "builder", "--importance", "5")
    assert add.returncode == 0, add.stderr
    first = int(add.stdout)
    second = int(mem(team, "add", "-", "--role", "builder", "--remember", input="we value small commits\n").stdout)
    boosted = json.loads(
        mem(
            team,
            "add",
            "supervisor said so",
            "--role",
            "builder",
            "--source",
            "supervisor",
            "--importance",
            "8",
            "--json",
        ).stdout
    )
    assert boosted["importance"] == 10 and boosted["layer"] == "core"

    found = json.loads(mem(team, "search", "watcher", "--json").stdout)
    assert [e["id"] for e in found] == [first] and found[0]["layer"] == "weekly" and found[0]["period"].count("-W") == 1
    listed = mem(team, "list", "--layer", "core").stdout
    assert f"#{second} " in listed and f"#{first} " not in listed

    changed = mem(
        team, "replace", str(first), "the watcher restarts and rescans on overflow", "--why", "it also rescans"
    )
    assert changed.returncode == 0, changed.stderr
    shown = json.loads(mem(team, "show", str(first), "--json").stdout)
    assert shown["growth"][0]["before"] == "the watcher must restart on overflow"
    assert shown["growth"][0]["why"] == "it also rescans" and shown["growth"][0]["approved_at"] is None
    with as_agent(team, "builder") as memory, pytest.raises(MemoryRefusedError, match="only the supervisor or owner"):
        memory.approve(first, datetime.now().astimezone(), "agent")
    assert mem(team, "replace", "--approve", str(first)).returncode == 0
    assert json.loads(mem(team, "show", str(first), "--json").stdout)["growth"][0]["approved_by"] == "cli"

    gone = mem(team, "forget", str(second), "--why", "not true any more")
    assert gone.returncode == 0 and "tombstone" in gone.stdout
    assert json.loads(mem(team, "search", "commits", "--json").stdout) == []
    tomb = json.loads(mem(team, "show", str(second), "--json").stdout)
    assert tomb["forgotten_why"] == "not true any more" and tomb["text"] == "we value small commits"
    assert mem(team, "replace", str(second), "x", "--why", "y").returncode == 2

    stats = mem(team, "stats").stdout
    assert "builder: core 1, daily 0, weekly 1" in stats and "tombstones 1" in stats


def test_japanese_substrings_are_found_in_real_memos_even_two_characters(team: Project) -> None:
    ids: dict[str, int] = {}
    for memo in sorted(FIXTURES.glob("*.md")):
        body = memo.read_text(encoding="utf-8").split("---\n", 2)[-1]
        for n, part in enumerate(p for p in body.split("\n\n") if p.strip()):
            if len(part.encode("utf-8")) > 2000:
                continue
            result = mem(team, "add", "-", "--role", "planner", input=part)
            assert result.returncode == 0, result.stderr
            ids[f"{memo.name}:{n}"] = int(result.stdout)
    for word in ("記憶", "延期", "バックログ", "優先順位管理"):
        hits = json.loads(mem(team, "search", word, "--json").stdout)
        assert hits, f"{word} found nothing"
        assert all(word in h["text"] for h in hits)
    both = json.loads(mem(team, "search", "記憶 PM", "--json").stdout)
    assert both and all("記憶" in h["text"] and "PM" in h["text"] for h in both)
    assert json.loads(mem(team, "search", "存在しない語句", "--json").stdout) == []


def test_core_is_capped_and_big_entries_are_refused_never_cut(team: Project) -> None:
    for n in range(3):
        assert mem(team, "add", f"core {n}", "--role", "builder", "--remember").returncode == 0
    full = mem(team, "add", "core 3", "--role", "builder", "--remember")
    assert full.returncode == 20 and "core of builder is full" in full.stderr and "forget" in full.stderr
    assert len(full.stderr.strip().splitlines()) == 1
    big = mem(team, "add", "x" * 2049, "--role", "builder")
    assert big.returncode == 20 and "entry_max_bytes" in big.stderr
    assert entry_count(team) == 3


def test_a_secret_is_refused_with_its_own_status_and_never_written(team: Project) -> None:
    key = "sk-ant-api03-" + "q" * 40
    result = mem(team, "add", f"the key is {key}", "--role", "builder")
    assert result.returncode == 21 and "Anthropic API key" in result.stderr and key not in result.stderr
    ok = mem(team, "add", "we changed the password policy", "--role", "builder")
    assert ok.returncode == 0, ok.stderr
    assert mem(team, "replace", ok.stdout.strip(), "password: hunter22", "--why", "x").returncode == 21
    raw = b"".join(p.read_bytes() for p in (team.root / ".orchestrator").glob("memory.db*"))
    assert key.encode() not in raw and b"hunter22" not in raw
    assert oct((team.root / ".orchestrator").stat().st_mode & 0o777) == "0o700"
    assert oct(db_path(team.root / ".orchestrator").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    "args",
    [
        ["add", "x", "--role", "builder", "--layer", "yearly"],
        ["add", "x", "--role", "builder", "--category", "gossip"],
        ["add", "x", "--role", "builder", "--importance", "0"],
        ["add", "x", "--role", "builder", "--importance", "11"],
        ["add", "x", "--role", "builder", "--layer", "weekly", "--period", "2026-12-01"],
        ["add", "x", "--role", "builder", "--summarises", "999"],
        ["add", "   ", "--role", "builder"],
        ["add", "x", "--role", "nobody"],
        ["add", "x"],
        ["search", "x", "--layer", "yearly"],
        ["show", "12345"],
    ],
)
def test_bad_input_exits_2_with_one_line_and_stores_nothing(team: Project, args: list[str]) -> None:
    assert mem(team, "add", "seed", "--role", "builder").returncode == 0
    result = mem(team, *args)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert entry_count(team) == 1


def test_stdin_that_is_not_utf8_is_refused(team: Project) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "memory", "add", "-", "--role", "builder", "--root", str(team.root)],
        input=b"\xff\xfe bad",
        capture_output=True,
    )
    assert result.returncode == 2 and b"not UTF-8" in result.stderr


def test_a_corrupt_database_is_one_line_and_a_non_zero_exit(team: Project) -> None:
    path = db_path(team.root / ".orchestrator")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not a database" * 100)
    for args in (["add", "x", "--role", "builder"], ["search", "x"]):
        result = mem(team, *args)
        assert result.returncode == 22 and "unreadable" in result.stderr and "Traceback" not in result.stderr


def test_an_agent_sees_its_own_role_and_team_only(team: Project) -> None:
    """The rules of scope, for a caller the CLI identified as an agent (``control.permission``); its environment
    says nothing (an agent of ``tests/test_authority.py`` proves that end to end)."""
    assert mem(team, "add", "planner secret plan", "--role", "planner").returncode == 0
    assert mem(team, "add", "team shared fact", "--role", "team").returncode == 0
    now = datetime.now().astimezone()
    with as_agent(team, "builder") as memory:
        mine = memory.add("builder note", now=now)
        assert (mine["role"], mine["run_id"]) == ("builder", "7")
        seen = [e["text"] for e in memory.list()]
        assert "builder note" in seen and "team shared fact" in seen and "planner secret plan" not in seen
        with pytest.raises(MemoryRefusedError, match="only its own memory"):
            memory.search("plan", role="planner")
        with pytest.raises(MemoryRefusedError):
            memory.add("x", now=now, role="planner")
        with pytest.raises(MemoryRefusedError):
            memory.add("from above", now=now, role="planner", source="supervisor")  # a claim is no authority
    with as_agent(team, "keeper") as memory:
        assert memory.search("plan", role="planner")
    assert mem(team, "search", "plan", "--role", "planner").returncode == 0, "outside an agent every role is open"
    pretend = mem(team, "search", "plan", "--json", ORCHESTRATOR_ROLE="builder", ORCHESTRATOR_RUN_ID="7")
    assert "planner secret plan" in pretend.stdout, "the environment makes no agent: a person stays a person"


def test_ten_agents_adding_at_once_lose_nothing(team: Project) -> None:
    script = (
        "import subprocess, sys\n"
        "procs = [subprocess.Popen([sys.executable, '-m', 'orchestrator', 'memory', 'add', f'agent {i} entry {j}',"
        " '--role', 'builder', '--root', sys.argv[1]]) for i in range(10) for j in range(3)]\n"
        "sys.exit(max(p.wait() for p in procs))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(team.root)], env=team.env(), timeout=120)
    assert done.returncode == 0
    assert entry_count(team) == 30
    texts = {e["text"] for e in json.loads(mem(team, "list", "--limit", "100", "--json").stdout)}
    assert texts == {f"agent {i} entry {j}" for i in range(10) for j in range(3)}


def test_memory_fills_the_prompt_of_a_real_run(team: Project) -> None:
    team.configure(
        {"builder": {}, "keeper": {}},
        prompt="BEGIN\n$memory\nEND\n",
        memory={"curator": "keeper", "prompt_budget": {"lines": 8, "bytes": 10000}},
    )
    (team.root / "prompts" / "builder.md").write_text("BEGIN\n$memory\nEND\n", encoding="utf-8")
    assert mem(team, "add", "never force-push main", "--role", "builder", "--remember").returncode == 0
    assert mem(team, "add", "shared: the demo is on friday", "--role", "team", "--importance", "2").returncode == 0
    for n in range(6):
        assert mem(team, "add", f"old weekly {n}", "--role", "builder", "--importance", "5").returncode == 0
    orch = team.up()
    team.drop("builder", "a.md", {"id": "a"})
    record = wait_for(lambda: team.records(), what="the agent's record")[0]
    prompt = record["prompt"]
    assert prompt.index("never force-push main") < prompt.index("shared: the demo is on friday")
    assert "were left out" in prompt and "orchestrator memory search" in prompt
    assert orch.stop() == 0


# ------------------------------------------------------------------ compaction through the real loop
def test_weekly_compaction_memo_once_then_its_answer_lets_retention_retire(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = Replay(root, {"builder": {}, "keeper": {}}, memory={"curator": "keeper", "daily_days": 3})
        # Monday 2026-11-30 09:00: three daily entries of week 2026-W49
        db = MemoryDB(db_path(r.config.state_dir))
        ids = [
            db.add(
                {
                    "role": "builder",
                    "layer": "daily",
                    "period": f"2026-12-0{d}",
                    "text": f"day {d}",
                    "category": "event",
                    "importance": 2,
                    "source": "agent",
                    "created_at": "2026-12-01T09:00",
                },
                100,
            )
            for d in (1, 2, 3)
        ]
        r.memory.start()
        assert r.folder("keeper", "inbox") == []
        await r.advance((6 * 24 + 14) * 3600 + 60)  # to Sunday 23:01
        assert r.folder("keeper", "inbox") == ["memory-weekly-2026-W49.md"]
        text = (r.config.role_dir("keeper") / "inbox" / "memory-weekly-2026-W49.md").read_text(encoding="utf-8")
        command = f"orchestrator memory add --role builder --layer weekly --period 2026-W49 --summarises {','.join(map(str, ids))}"
        assert command in text and "day 2" in text
        await r.advance(3600)
        r.memory.check()
        assert r.folder("keeper", "inbox") == ["memory-weekly-2026-W49.md"], "written once per period"

        # past retention, but no summary yet: nothing is deleted
        await r.advance(3 * 24 * 3600)
        assert len(db.entries(["builder"], layer="daily")) == 3
        # the keeper answers; the next daily check retires the summarised entries
        summary = db.add(
            {
                "role": "builder",
                "layer": "weekly",
                "period": "2026-W49",
                "text": "a week",
                "category": "event",
                "importance": 5,
                "source": "agent",
                "created_at": "2026-12-07T09:00",
                "summarises": ids,
            },
            100,
        )
        await r.advance(24 * 3600)
        assert db.entries(["builder"], layer="daily") == []
        assert all(f"summarised by #{summary}" in db.get(i)["forgotten_why"] for i in ids)
        db.close()
        r.close()

        # a restart on the same root does not write the memo again
        again = Replay(root, {"builder": {}, "keeper": {}}, memory={"curator": "keeper", "daily_days": 3})
        (again.config.role_dir("keeper") / "inbox" / "memory-weekly-2026-W49.md").unlink()
        again.clock = ManualClock(datetime(2026, 12, 6, 23, 30).astimezone())
        again.memory.clock = again.clock
        again.memory.start()
        assert again.folder("keeper", "inbox") == []
        again.close()

    play(tmp_path, scenario)
