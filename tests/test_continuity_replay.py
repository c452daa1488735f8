"""Continuity rules through the replay harness (real loop, fake agents, manual clock) and as plain functions."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from orchestrator.config import load_config
from orchestrator.continuity import handoff as ho
from orchestrator.continuity import journal as jn
from orchestrator.core.agent import LastWords
from orchestrator.core.events import CancelRequested
from orchestrator.core.states import RunState
from orchestrator.supervisor import memo_moves
from orchestrator.supervisor.recovery import recover
from replay import Replay

PROMPT = "$context\n$memory\n$handoff\n$journal\nmemo $memo_path\n$memo"


def play(tmp_path: Path, scenario: Callable[[Path], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario(tmp_path))


def continuity_replay(root: Path, roles: dict[str, dict[str, Any]] | None = None, **top: Any) -> Replay:
    """A replay whose prompts use every continuity placeholder.

    ``Replay`` writes its own prompt files before it builds the supervisor, so the templates are loaded again.
    """
    from orchestrator.prompts import load_template

    replay = Replay(root, roles, **top)
    for name, role in replay.config.roles.items():
        (root / role.prompt).write_text(PROMPT, encoding="utf-8")
        replay.sup.launcher.templates[name] = load_template(root / role.prompt)
    return replay


def test_the_entry_is_written_while_the_memo_is_still_in_active(tmp_path: Path, monkeypatch: Any) -> None:
    seen: list[list[str]] = []
    real = jn.append_entry

    async def scenario(root: Path) -> None:
        r = continuity_replay(root)

        def spy(folder: Path, *args: Any, **kwargs: Any) -> bool:
            seen.append(r.folder("builder", "active") + r.folder("builder", "archive"))
            return real(folder, *args, **kwargs)

        monkeypatch.setattr(jn, "append_entry", spy)
        await r.drop("builder", "B-1.md")
        await r.exit("B-1", 0)
        assert r.folder("builder", "archive") == ["B-1.md"]
        r.close()

    play(tmp_path, scenario)
    assert seen == [["B-1.md"]], "journal first, then the move"


def test_a_crash_between_entry_and_move_is_finished_without_a_second_entry(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = continuity_replay(root)
        await r.drop("builder", "B-1.md")
        run = r.run_of("B-1")
        r.continuity.before_finish(run, RunState.SUCCEEDED, None)  # the entry is written ...
        r.close()  # ... and the orchestrator dies before the memo moves
        again = continuity_replay(root)
        await recover(again.config, again.sup.store, again.console, again.sup.lc)
        folder = root / "memo" / "builder" / "journal"
        found = jn.read_entries("builder", folder)
        assert [(e.run_id, e.attempt, e.state) for e in found] == [(run.run_id, 1, "succeeded")]
        assert again.folder("builder", "inbox") == ["B-1.md"], "recovery finishes the move"
        again.close()

    play(tmp_path, scenario)


def test_sdk_runs_journal_cost_tokens_and_result_and_the_note_names_the_session(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = continuity_replay(root, {"writer": {"backend": "sdk"}})
        await r.drop("writer", "W-1.md", front={"id": "W-1", "subject": "wake", "tasks": ["check mail", "post"]})
        agent = r.agent("W-1")
        agent.result = {"cost_usd": 0.125, "input_tokens": 40, "output_tokens": 7, "session_id": "s-1"}
        agent.last_words = LastWords(result="Posted the summary.\nBye.")
        await r.exit("W-1", 0)
        await r.drop("writer", "W-2.md", front={"id": "W-2", "subject": "again"})
        agent = r.agent("W-2")
        agent.result = {"cost_usd": 0.5, "session_id": "s-2"}
        agent.last_words = LastWords("Bash: curl feed", "now fetching")
        await r.advance(65)
        await r.exit("W-2", 1)
        found = jn.read_entries("writer", root / "memo" / "writer" / "journal")
        assert "- Tasks: check mail; post" in found[0].text
        assert "- Cost: $0.1250; tokens: 40 in, 7 out" in found[0].text
        assert "> Posted the summary.\n> Bye." in found[0].text
        note = (root / "memo" / "writer" / "handoff.md").read_text(encoding="utf-8")
        assert "- Last tool use: Bash: curl feed" in note and "- Last text: now fetching" in note
        assert "- Session: s-2" in note and "after 1m 5s" in note
        r.close()

    play(tmp_path, scenario)


def test_the_note_is_kept_when_the_successful_run_never_saw_it(tmp_path: Path) -> None:
    """Two runs at once: one dies while the other works; the other's success must not remove a note it never saw."""

    async def scenario(root: Path) -> None:
        r = continuity_replay(root)
        await r.drop("builder", "A.md")
        await r.drop("builder", "B.md")
        await r.exit("A", 1)
        await r.exit("B", 0)
        text = (root / "memo" / "builder" / "handoff.md").read_text(encoding="utf-8")
        assert ho.START in text and "ended **failed**" in text
        await r.drop("builder", "C.md")
        await r.exit("C", 0)
        assert ho.START not in (root / "memo" / "builder" / "handoff.md").read_text(encoding="utf-8")
        r.close()

    play(tmp_path, scenario)


def test_runs_ending_together_write_each_note_before_its_move_with_one_fsync_and_one_version(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """``cancel --role`` of many runs: every end still writes its note before its memo moves, but the handoff is
    fsynced once and one version is kept for the turn, not two fsyncs a run (600 for 300 runs, 9 s of the loop)."""
    handoff_path = tmp_path / "memo" / "builder" / "handoff.md"
    synced: list[str] = []
    notes_at_moves: list[bool] = []
    real_fsync, real_move = os.fsync, memo_moves.move_memo

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def move(src: Path, folder: Path, before: Any = None) -> Path:
        run = next(r for r in runs if any(m.name == src.name for m in r.memos))
        notes_at_moves.append(f"run {run.seq} of builder ended cancelled" in handoff_path.read_text(encoding="utf-8"))
        return real_move(src, folder, before)

    async def scenario(root: Path) -> None:
        r = continuity_replay(root)
        for n in range(5):
            await r.drop("builder", f"C-{n}.md")
        runs.extend(r.run_of(f"C-{n}") for n in range(5))
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(memo_moves, "move_memo", move)
        await r.request(CancelRequested, role="builder")
        assert r.folder("builder", "cancelled") == [f"C-{n}.md" for n in range(5)]
        r.close()

    runs: list[Any] = []
    play(tmp_path, scenario)
    assert notes_at_moves == [True] * 5, "each note is in the handoff before its memo moves"
    versions = [path for path in synced if "/.orchestrator/handoff/builder/" in path]
    assert synced.count(str(handoff_path)) == 1 and len(versions) == 1, synced
    text = handoff_path.read_text(encoding="utf-8")
    assert text.count(ho.START) == 1
    last = [seq for seq, _ in ho.versions(load_config(tmp_path), "builder")]
    assert len(last) == 1 and f"run {last[0]} of builder ended cancelled" in text, (last, text)
    found = jn.read_entries("builder", tmp_path / "memo" / "builder" / "journal")
    assert sorted(e.state for e in found) == ["cancelled"] * 5, "the journal keeps every end"


def test_a_bug_keeping_one_roles_handoff_leaves_the_other_roles_kept(tmp_path: Path, monkeypatch: Any) -> None:
    """The turn's end keeps each role's handoff on its own: a bug in one is reported and the others are kept."""
    real = ho.snapshot

    def snapshot(config: Any, role: str, seq: int, text: str) -> bool:
        if role == "a":
            raise RuntimeError("injected")
        return real(config, role, seq, text)

    async def scenario(root: Path) -> None:
        r = continuity_replay(root, {"a": {}, "b": {}})
        await r.drop("b", "B.md")
        await r.drop("a", "A.md")
        monkeypatch.setattr(ho, "snapshot", snapshot)
        r.agent("B").exit(1)  # both in one turn of the loop, b's end first
        r.agent("A").exit(1)
        await r.settle()
        assert "internal error keeping the handoff of a" in r.console.text
        assert [seq for seq, _ in ho.versions(r.config, "b")] == [1]
        for role in ("a", "b"):
            assert "ended **failed**" in (root / "memo" / role / "handoff.md").read_text(encoding="utf-8")
        r.close()

    play(tmp_path, scenario)


def test_expiry_follows_the_injected_clock(tmp_path: Path) -> None:
    async def scenario(root: Path) -> None:
        r = continuity_replay(root)
        path = root / "memo" / "builder" / "handoff.md"
        today = r.clock.now().date()
        path.write_text(f"- today (until {today})\n- yesterday (until {today - timedelta(days=1)})\n", "utf-8")
        await r.drop("builder", "A.md")
        assert "yesterday" not in r.agent("A").spec.prompt and "- today" in r.agent("A").spec.prompt
        await r.exit("A", 0)
        await r.advance(86_400)
        await r.drop("builder", "B.md")
        assert "- today" not in r.agent("B").spec.prompt
        r.close()

    play(tmp_path, scenario)


# ------------------------------------------------------------------ plain functions
def test_journal_prompt_text_keeps_the_newest_within_the_cap() -> None:
    made = [
        jn.Entry("r", "2026-11-30", n, 1, n, "succeeded", "09:00", "09:01", f"## Run {n}\n" + "x" * 3000)
        for n in range(1, 6)
    ]
    text = jn.prompt_text(made)
    assert len(text.encode()) <= jn.PROMPT_MAX_BYTES
    assert "## Run 5" in text and "## Run 4" in text and "## Run 3" not in text
    assert text.index("## Run 4") < text.index("## Run 5")
    huge = [jn.Entry("r", "2026-11-30", 1, 1, 1, "failed", "09:00", "09:01", "y" * 20_000)]
    cut = jn.prompt_text(huge)
    assert len(cut.encode()) <= jn.PROMPT_MAX_BYTES and "[cut:" in cut


def test_journal_prompt_text_says_the_day_of_its_entries() -> None:
    """Found by a user-view review: entries of several days read `## Run 3 (09:00-09:05, ...)` alike, so an agent
    could not tell yesterday's run from today's."""
    made = [
        jn.Entry("r", day, n, 1, n, "succeeded", "09:00", "09:01", f"## Run {n} (09:00-09:01, succeeded)")
        for n, day in ((1, "2026-11-29"), (2, "2026-11-30"), (3, "2026-11-30"))
    ]
    text = jn.prompt_text(made)
    assert text.index("On 2026-11-29:") < text.index("## Run 1") < text.index("On 2026-11-30:") < text.index("## Run 2")
    assert text.count("On 2026-11-30:") == 1 and text.index("## Run 2") < text.index("## Run 3")
    some = jn.prompt_text(made, limit=110)  # room for the last two: the older kept says its day too
    assert some.startswith("On 2026-11-30:\n\n## Run 2") and "## Run 1" not in some, some


def test_closing_words_are_capped_with_a_note_and_quoted_safely() -> None:
    lines = [f"line {n} " + "z" * 200 for n in range(40)]
    text = jn.capped(lines)
    assert len(text.encode()) <= jn.CLOSING_MAX_BYTES + 100 and text.startswith("[cut: only the last")
    assert text.endswith(lines[-1])
    forged = jn.marker(99, 1, 9, "succeeded", "09:00", "09:01")
    body = jn.marker(1, 1, 1, "failed", "09:00", "09:01") + "\n## Run 1\n\n" + jn.quote(forged + "\n## Run 9") + "\n"
    parsed = jn.parse("r", "2026-11-30", body)
    assert [(e.run_id, e.state) for e in parsed] == [(1, "failed")]


def test_append_entry_is_keyed_by_run_and_attempt_across_midnight(tmp_path: Path) -> None:
    first, second = date(2026, 11, 30), date(2026, 12, 1)
    text = jn.marker(7, 2, 3, "succeeded", "23:59", "23:59") + "\n## Run 3\n"
    assert jn.append_entry(tmp_path, first, 7, 2, text)
    again = jn.marker(7, 2, 3, "returned", "23:59", "00:01") + "\n## Run 3\n"
    assert not jn.append_entry(tmp_path, second, 7, 2, again, since=first)
    assert jn.append_entry(tmp_path, second, 7, 3, jn.marker(7, 3, 3, "failed", "00:01", "00:02") + "\n")
    assert [(e.attempt, e.state) for e in jn.read_entries("r", tmp_path)] == [(2, "succeeded"), (3, "failed")]


def test_the_section_is_replaced_never_duplicated_and_expiry_spares_it() -> None:
    text = "mine\n"
    once = ho.put_section(text, "first")
    twice = ho.put_section(once, "second - item (until 2000-01-01)")
    assert twice.count(ho.START) == 1 and "second" in twice and "first" not in twice
    kept, dropped = ho.expire(twice, date(2026, 11, 30))
    assert kept == twice and dropped == []
    assert ho.remove_section(twice) == "mine\n"


def test_journal_in_the_prompt_comes_from_memory_yet_sees_a_hand_edit(tmp_path: Path, monkeypatch: Any) -> None:
    reads: list[Path] = []
    real = jn.read_entries

    def counting(role: str, folder: Path, *args: Any, **kwargs: Any) -> list[jn.Entry]:
        reads.append(folder)
        return real(role, folder, *args, **kwargs)

    async def scenario(root: Path) -> None:
        r = continuity_replay(root, {"builder": {"journal_in_prompt": 1}})
        monkeypatch.setattr(jn, "read_entries", counting)
        for name in ("A-1", "A-2", "A-3"):
            await r.drop("builder", f"{name}.md")
            await r.exit(name, 0)
        prompt = r.agent("A-3").spec.prompt
        assert "A-2" in prompt and "A-1" not in prompt, "the newest entry before A-3 is A-2"
        assert len(reads) == 2, "read while empty and once the file existed; then kept up to date by our appends"
        await r.drop("builder", "A-4.md")
        prompt = r.agent("A-4").spec.prompt
        assert "A-3" in prompt and "A-2" not in prompt
        assert len(reads) == 2, "no read for a start while the journal is as we wrote it"
        await r.exit("A-4", 0)
        journal = next((root / "memo" / "builder" / "journal").iterdir())
        journal.write_text(journal.read_text(encoding="utf-8").replace("A-4", "A-4 (edited by hand)"), encoding="utf-8")
        await r.drop("builder", "A-5.md")
        assert "A-4 (edited by hand)" in r.agent("A-5").spec.prompt, "an edit by hand is read again"
        r.close()

    play(tmp_path, scenario)


def test_the_orchestrators_own_note_does_not_count_towards_the_handoffs_cap(tmp_path: Path) -> None:
    """Found by a user-view review: a dead run's note (about 500 bytes) put a small handoff over its cap, so the
    next prompt asked the agent to compact text it did not write, the journal warned, and the notify role was
    told, after every failed run."""

    async def scenario(root: Path) -> None:
        r = continuity_replay(root, {"builder": {"handoff_max_bytes": 300}, "pm": {}}, notify="pm")
        path = ho.handoff_path(r.config, "builder")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("- the build is green\n", encoding="utf-8")
        await r.drop("builder", "F-1.md")
        await r.exit("F-1", 3)  # failed: the orchestrator's note of the dead run goes into the handoff
        assert ho.section(path.read_text(encoding="utf-8")) and path.stat().st_size > 300
        await r.drop("builder", "F-2.md")
        assert "NOTE FROM THE ORCHESTRATOR: the handoff file" not in r.agent("F-2").spec.prompt
        await r.exit("F-2", 3)
        assert "over its cap" not in r.console.text
        assert not [name for folder in ("inbox", "archive") for name in r.folder("pm", folder) if "handoff" in name]
        from orchestrator.continuity import commands

        shown = commands.handoff_current(root, "builder")  # `orchestrator handoff builder`: what the cap counts
        assert shown["counted"] == len("- the build is green\n") < shown["bytes"], shown
        r.close()

    play(tmp_path, scenario)


def test_a_start_marker_the_agent_left_without_its_end_is_the_agents_text() -> None:
    """Found by a review: the orchestrator's section was matched from such a marker to the end of its own note,
    across the agent's text, which was then neither counted towards the cap nor kept when the note went."""
    agents = "notes\n<!-- orchestrator -->\n- the agent's own facts\n"
    with_note = ho.put_section(agents, "a run died")
    assert ho.section(with_note) == "<!-- orchestrator -->\na run died\n<!-- /orchestrator -->"
    assert ho.agents_bytes(with_note) == len(agents.encode())
    assert ho.remove_section(with_note) == agents
    dated = "notes\n<!-- orchestrator -->\n- old (until 2020-01-01)\n"  # its dated items expire as the agent's do
    kept, dropped = ho.expire(ho.put_section(dated, "a run died\n- ours (until 2020-01-01)"), date(2025, 1, 1))
    assert dropped == ["- old (until 2020-01-01)"] and "- ours (until 2020-01-01)" in kept, kept
