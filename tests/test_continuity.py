"""Continuity end to end through a real ``orchestrator up``: context files, journal, handoff, the note of a dead run.

The agents are the stand-in (``tests/agents/stand_in.py``); its ``say`` goes to the
run's log (its standard output), which is what the journal quotes as closing words.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import Project, wait_for

START, END = "<!-- orchestrator -->", "<!-- /orchestrator -->"


def journal(project: Project, role: str = "builder") -> str:
    folder = project.root / "memo" / role / "journal"
    if not folder.is_dir():
        return ""
    return "".join(p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.md")))


def entries(project: Project, *args: str) -> list[dict[str, Any]]:
    result = project.cli("journal", "--json", *args)
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout))


def handoff(project: Project, role: str = "builder") -> Path:
    return project.root / "memo" / role / "handoff.md"


def prompt_of(project: Project, memo: str) -> str:
    found = [r["prompt"] for r in project.records() if r["memo"] and Path(r["memo"]).name == memo]
    assert found, f"no agent started for {memo}"
    return str(found[-1])


def done(project: Project, role: str, folder: str, name: str) -> None:
    wait_for(lambda: name in project.folder(role, folder), what=f"{name} in {role}/{folder}")


CONT_PROMPT = "$context\n$memory\n$handoff\n$journal\nmemo $memo_path\n$memo"


def test_journal_entries_for_each_end_state_in_order(project: Project, tmp_path: Path) -> None:
    project.configure({"builder": {"timeout": "1s", "grace": "0.2s"}}, prompt=CONT_PROMPT)
    gate = tmp_path / "gate"
    project.up()
    project.drop("builder", "S-1.md", {"id": "S-1", "subject": "works", "agent": {"say": "all done here"}})
    done(project, "builder", "archive", "S-1.md")
    project.drop("builder", "F-1.md", {"id": "F-1", "subject": "breaks", "agent": {"say": "oops", "exit": 3}})
    done(project, "builder", "failed", "F-1.md")
    project.drop("builder", "T-1.md", {"id": "T-1", "subject": "slow", "agent": {"sleep": 30}})
    done(project, "builder", "failed", "T-1.md")
    project.drop("builder", "C-1.md", {"id": "C-1", "subject": "called off", "agent": {"until": str(gate)}})
    wait_for(lambda: any(r["memo"] and r["memo"].endswith("C-1.md") for r in project.records()), what="C-1 runs")
    cancel = project.cli("cancel", "C-1", "--reason", "not needed")
    assert cancel.returncode == 0, cancel.stderr
    done(project, "builder", "cancelled", "C-1.md")
    got = entries(project, "--role", "builder")
    assert [(e["seq"], e["state"]) for e in got] == [
        (1, "succeeded"),
        (2, "failed"),
        (3, "timed_out"),
        (4, "cancelled"),
    ]
    texts = [e["text"] for e in got]
    assert '- Memo: S-1 "works"' in texts[0] and "> all done here (attempt 1)" in texts[0]
    assert all("=== run" not in text for text in texts), "closing words are the agent's, not the log's header"
    assert "- Reason: exit code 3" in texts[1] and "> oops (attempt 1)" in texts[1]
    assert "- Reason: timed out after 1s" in texts[2]
    assert "- Reason: cancelled by" in texts[3] and "not needed" in texts[3]
    assert re.match(r"## Run 1 \(\d\d:\d\d-\d\d:\d\d, succeeded\)", texts[0])
    # the entry was on disk before the memo reached archive/ (the rename sets the memo's ctime)
    first = sorted((project.root / "memo" / "builder" / "journal").glob("*.md"))[0]
    archived = project.root / "memo" / "builder" / "archive" / "S-1.md"
    assert len(re.findall(r"^<!-- journal run_id=", first.read_text(), re.M)) == 4
    assert archived.exists()
    # --last and --since, and the text view
    assert [e["seq"] for e in entries(project, "--last", "2")] == [3, 4]
    assert entries(project, "--since", "2999-01-01") == []
    text = project.cli("journal", "--role", "builder", "--last", "1")
    assert text.returncode == 0 and "## Run 4" in text.stdout and "## Run 3" not in text.stdout


def test_the_next_prompt_holds_the_journal_and_the_load_order(project: Project) -> None:
    (project.root / "persona.md").write_text("I am Ada, the builder.\n", encoding="utf-8")
    project.configure({"builder": {"context": ["persona.md"], "journal_in_prompt": 1}}, prompt=CONT_PROMPT)
    handoff(project).parent.mkdir(parents=True, exist_ok=True)
    handoff(project).write_text("- the proxy works when the usual route times out\n", encoding="utf-8")
    project.up()
    project.drop("builder", "A-1.md", {"id": "A-1", "subject": "one", "agent": {"say": "first words"}})
    done(project, "builder", "archive", "A-1.md")
    project.drop("builder", "A-2.md", {"id": "A-2", "subject": "two", "agent": {"say": "second words"}})
    done(project, "builder", "archive", "A-2.md")
    project.drop("builder", "A-3.md", {"id": "A-3", "subject": "three"})
    done(project, "builder", "archive", "A-3.md")
    prompt = prompt_of(project, "A-3.md")
    order = [prompt.index(s) for s in ("I am Ada", "the proxy works", "## Run 2", "memo ")]
    assert order == sorted(order), prompt
    assert "## Run 1" not in prompt, "journal_in_prompt: 1 keeps only the newest entry"
    assert "> second words (attempt 1)" in prompt


@pytest.mark.parametrize(
    ("recovery", "expected"),
    [
        # the running agent is adopted at the restart and finishes its run: one entry for it
        ("adopt", [(1, "succeeded"), (2, "succeeded")]),
        # the old way: the run is returned and its memo runs again as the next run
        ("restart", [(1, "succeeded"), (2, "returned"), (3, "succeeded")]),
    ],
)
def test_a_sigkill_between_runs_neither_loses_nor_doubles_an_entry(
    project: Project, tmp_path: Path, recovery: str, expected: list[tuple[int, str]]
) -> None:
    project.configure({"builder": {}}, recovery=recovery)
    gate = tmp_path / "gate"
    orch = project.up()
    project.drop("builder", "K-0.md", {"id": "K-0"})
    done(project, "builder", "archive", "K-0.md")
    project.drop("builder", "K-1.md", {"id": "K-1", "agent": {"until": str(gate)}})
    wait_for(lambda: any(r["memo"] and r["memo"].endswith("K-1.md") for r in project.records()), what="K-1 runs")
    orch.signal(signal.SIGKILL)
    orch.wait()
    gate.touch()
    again = project.up()
    done(project, "builder", "archive", "K-1.md")
    again.stop()
    keys = [(e["run_id"], e["attempt"]) for e in entries(project)]
    assert len(keys) == len(set(keys)), keys
    states = [(e["seq"], e["state"]) for e in entries(project)]
    assert states == expected, states
    # a third start, no new run: nothing written twice
    project.up("--until-idle").wait()
    assert [(e["run_id"], e["attempt"]) for e in entries(project)] == keys


def test_handoff_versions_history_show_and_restore(project: Project) -> None:
    project.configure({"builder": {}})
    path = handoff(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    project.up()
    for n in (1, 2):
        path.write_text(f"- version {n}\n", encoding="utf-8")
        project.drop("builder", f"V-{n}.md", {"id": f"V-{n}"})
        done(project, "builder", "archive", f"V-{n}.md")
    project.drop("builder", "V-3.md", {"id": "V-3"})  # unchanged: no new version
    done(project, "builder", "archive", "V-3.md")
    history = project.cli("handoff", "builder", "--history", "--json")
    assert history.returncode == 0, history.stderr
    assert [v["seq"] for v in json.loads(history.stdout)] == [1, 2]
    shown = project.cli("handoff", "builder", "--show", "1")
    assert shown.returncode == 0 and "- version 1" in shown.stdout
    path.write_text("- edited by hand\n", encoding="utf-8")
    restored = project.cli("handoff", "builder", "--restore", "1", "--json")
    assert restored.returncode == 0, restored.stderr
    assert path.read_text(encoding="utf-8") == "- version 1\n"
    kept = json.loads(restored.stdout)["replaced_kept_at"]
    assert kept and Path(kept).read_text(encoding="utf-8") == "- edited by hand\n"
    current = project.cli("handoff", "builder")
    assert current.returncode == 0 and "- version 1" in current.stdout
    missing = project.cli("handoff", "builder", "--show", "9")
    assert missing.returncode == 2 and "versions: 1, 2" in missing.stderr and "Traceback" not in missing.stderr
    unknown = project.cli("handoff", "nobody")
    assert unknown.returncode == 2 and "no role 'nobody'" in unknown.stderr


def test_a_handoff_over_its_cap_is_warned_noted_and_told_once(project: Project) -> None:
    project.configure({"builder": {"handoff_max_bytes": 100}, "pm": {}}, prompt=CONT_PROMPT, notify="pm")
    path = handoff(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("- a fact\n" * 30, encoding="utf-8")
    orch = project.up()
    for n in (1, 2):
        project.drop("builder", f"H-{n}.md", {"id": f"H-{n}"})
        done(project, "builder", "archive", f"H-{n}.md")
    orch.wait_output("over its cap of 100 bytes")
    assert "- Warning: the handoff is 270 bytes, over its cap of 100 bytes" in journal(project)
    assert prompt_of(project, "H-2.md").startswith("NOTE FROM THE ORCHESTRATOR: the handoff file")

    def told() -> list[str]:
        return [n for f in ("inbox", "active", "archive") for n in project.folder("pm", f) if "handoff" in n]

    wait_for(told, what="the notify role told")
    wait_for(lambda: not project.folder("pm", "inbox") and not project.folder("pm", "active"), what="pm idle")
    assert len(told()) == 1, told()
    assert path.read_text(encoding="utf-8") == "- a fact\n" * 30, "the agent's text is not changed"


def test_expired_items_are_dropped_before_the_next_run_and_journaled(project: Project) -> None:
    project.configure({"builder": {}}, prompt=CONT_PROMPT)
    path = handoff(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "# State\n- old news (until 2000-01-01)\n- still true (until 2999-12-31)\nplain (until 2000-01-01)\n"
    path.write_text(text, encoding="utf-8")
    project.up()
    project.drop("builder", "E-1.md", {"id": "E-1"})
    done(project, "builder", "archive", "E-1.md")
    assert path.read_text(encoding="utf-8") == "# State\n- still true (until 2999-12-31)\nplain (until 2000-01-01)\n"
    prompt = prompt_of(project, "E-1.md")
    assert "old news" not in prompt and "still true" in prompt
    assert "- Handoff: removed the expired line `- old news (until 2000-01-01)`" in journal(project)


def test_the_note_of_a_dead_run_is_replaced_then_removed_after_a_success(project: Project, tmp_path: Path) -> None:
    project.configure({"builder": {"timeout": "1s", "grace": "0.2s"}}, prompt=CONT_PROMPT)
    path = handoff(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("- my own line\n", encoding="utf-8")
    project.up()
    project.drop(
        "builder", "D-1.md", {"id": "D-1", "subject": "first try", "agent": {"say": "editing x.py", "exit": 1}}
    )
    done(project, "builder", "failed", "D-1.md")
    note = path.read_text(encoding="utf-8")
    assert note.startswith("- my own line\n") and note.count(START) == 1 and note.count(END) == 1
    assert "ended **failed**" in note and 'D-1 "first try"' in note and "editing x.py (attempt 1)" in note
    assert ".orchestrator/logs/" in note

    project.drop("builder", "D-2.md", {"id": "D-2", "agent": {"say": "still going", "sleep": 30}})
    done(project, "builder", "failed", "D-2.md")
    note = path.read_text(encoding="utf-8")
    assert note.count(START) == 1 and "ended **timed_out**" in note and "ended **failed**" not in note

    gate = tmp_path / "gate"
    project.drop("builder", "D-3.md", {"id": "D-3", "agent": {"until": str(gate)}})
    wait_for(lambda: any(r["memo"] and r["memo"].endswith("D-3.md") for r in project.records()), what="D-3 runs")
    assert project.cli("cancel", "D-3").returncode == 0
    done(project, "builder", "cancelled", "D-3.md")
    note = path.read_text(encoding="utf-8")
    assert note.count(START) == 1 and "ended **cancelled**" in note

    project.drop("builder", "D-4.md", {"id": "D-4"})
    done(project, "builder", "archive", "D-4.md")
    assert "ended **cancelled**" in prompt_of(project, "D-4.md"), "the next run saw the note"
    assert path.read_text(encoding="utf-8") == "- my own line\n", "removed after a success that saw it"


def test_context_files_missing_at_start_and_at_run_time(project: Project) -> None:
    project.configure({"builder": {"context": ["persona.md", "goals.md"]}}, prompt=CONT_PROMPT)
    (project.root / "persona.md").write_text("persona\n", encoding="utf-8")
    up = project.cli("up", "--until-idle")
    assert up.returncode == 2 and "roles.builder.context: context file goals.md is missing" in up.stderr
    assert len(up.stderr.strip().splitlines()) == 1
    (project.root / "goals.md").write_text("x" * 70_000, encoding="utf-8")
    big = project.cli("up", "--until-idle")
    assert (
        big.returncode == 2 and "over context_max_bytes 65536" in big.stderr and "goals.md (70000 bytes)" in big.stderr
    )
    (project.root / "goals.md").write_text("ship the site\n", encoding="utf-8")
    project.up()
    (project.root / "goals.md").unlink()
    project.drop("builder", "X-1.md", {"id": "X-1"})
    wait_for(lambda: project.status().get("holds", {}).get("builder"), what="builder held")
    assert project.folder("builder", "inbox") == ["X-1.md"] and not project.records()
    assert "goals.md is missing" in project.status()["holds"]["builder"]["context"]
    text = project.cli("status")
    assert "held: builder: context file goals.md is missing" in text.stdout
    (project.root / "goals.md").write_text("ship the site\n", encoding="utf-8")
    done(project, "builder", "archive", "X-1.md")
    prompt = prompt_of(project, "X-1.md")
    assert prompt.index("persona") < prompt.index("ship the site")
    assert not project.status().get("holds")


@pytest.mark.parametrize("kind", ["not-utf8", "directory", "symlink-out"])
def test_a_bad_handoff_is_noted_and_never_touched(project: Project, tmp_path: Path, kind: str) -> None:
    project.configure({"builder": {}}, prompt=CONT_PROMPT)
    path = handoff(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    outside = tmp_path.parent / f"outside-{tmp_path.name}.md"
    if kind == "not-utf8":
        path.write_bytes(b"\xff\xfe- bad\n")
    elif kind == "directory":
        path.mkdir()
    else:
        outside.write_text("- secret (until 2000-01-01)\n", encoding="utf-8")
        path.symlink_to(outside)
    orch = project.up()
    project.drop("builder", "B-1.md", {"id": "B-1", "agent": {"exit": 1}})
    done(project, "builder", "failed", "B-1.md")
    prompt = prompt_of(project, "B-1.md")
    assert prompt.startswith("NOTE FROM THE ORCHESTRATOR: memo/builder/handoff.md is"), prompt
    assert "secret" not in prompt
    orch.wait_output("the run starts without it")
    if kind == "not-utf8":
        assert path.read_bytes() == b"\xff\xfe- bad\n"
    elif kind == "directory":
        assert path.is_dir() and not list(path.iterdir())
    else:
        assert outside.read_text(encoding="utf-8") == "- secret (until 2000-01-01)\n"
        outside.unlink()
    assert "## Run 1" in journal(project), "the journal is still written"


def test_a_journal_folder_that_cannot_be_written(project: Project) -> None:
    project.configure({"builder": {}})
    role = project.root / "memo" / "builder"
    role.mkdir(parents=True)
    (role / "journal").write_text("a file where the folder should be\n", encoding="utf-8")
    orch = project.up()
    project.drop("builder", "J-1.md", {"id": "J-1"})
    done(project, "builder", "archive", "J-1.md")
    orch.wait_output("cannot write the journal")
    snap = project.status()
    assert "cannot write the journal" in snap["journal_problems"]["builder"]
    assert snap["recent"][0]["state"] == "succeeded" and not snap["runs"]
    assert "journal: builder: cannot write the journal" in project.cli("status").stdout


def test_bad_journal_and_config_input_is_one_line_exit_2(project: Project) -> None:
    project.configure({"builder": {"journal_in_prompt": -1}})
    bad = project.cli("up")
    assert bad.returncode == 2 and "roles.builder.journal_in_prompt" in bad.stderr
    project.configure({"builder": {}})
    since = project.cli("journal", "--since", "yesterday")
    assert since.returncode == 2 and "expected a date" in since.stderr
    role = project.cli("journal", "--role", "nobody")
    assert role.returncode == 2 and len(role.stderr.strip().splitlines()) == 1


def test_init_templates_put_continuity_first_in_the_fixed_order(tmp_path: Path) -> None:
    target = tmp_path / "team"
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "init", str(target)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    for prompt in (target / "prompts").glob("*.md"):
        head = prompt.read_text(encoding="utf-8").splitlines()[:4]
        assert head == ["$context", "$memory", "$handoff", "$journal"], prompt
