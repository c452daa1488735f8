"""Hostile memos through a real `orchestrator up`: each is a normal case, never an internal error.

A YAML bomb, front matter YAML accepts but Python rejects, a file name that is not UTF-8,
names near the 255-byte limit, and a name starting with ``#``. Each test shows the memo's
final folder, its reason file when it failed, the warning line, that a graceful stop
(SIGTERM) still exits 0, and that no traceback or internal error reached the output.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil

from conftest import Orchestrator, Project, wait_for
from orchestrator.store import Store

BOMB_DEADLINE = 30.0  # well under the per-test timeout of pyproject.toml
SMALL_RSS = 200 * 1024 * 1024  # the bomb took 400 MB in its first 4 s; an idle orchestrator needs a fraction


def inbox(project: Project, role: str = "builder") -> Path:
    path = project.root / "memo" / role / "inbox"
    path.mkdir(parents=True, exist_ok=True)
    return path


def put(folder: Path, name: str | bytes, data: bytes) -> None:
    """Write a memo whole under a short temporary name, then rename it: names here may be 255 bytes or not UTF-8."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = os.path.join(os.fsencode(folder), b".put.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.rename(tmp, os.path.join(os.fsencode(folder), os.fsencode(name)))


def names(project: Project, folder: str, role: str = "builder", suffix: bytes = b".md") -> list[bytes]:
    """File names in a folder as bytes, so a name that is not UTF-8 is seen as it is on disk."""
    path = os.fsencode(project.root / "memo" / role / folder)
    return sorted(n for n in os.listdir(path) if n.endswith(suffix)) if os.path.isdir(path) else []


def clean_stop(orch: Orchestrator) -> None:
    """A graceful stop ends with exit status 0, and nothing internal went wrong on the way."""
    orch.signal(signal.SIGTERM)
    assert orch.wait() == 0, orch.output
    for bad in ("Traceback", "ERROR", "internal error"):
        assert bad not in orch.output, orch.output


def runs(project: Project) -> list[dict]:
    """Every run on record, with all its memos' names and ids."""
    store = Store(project.root / ".orchestrator" / "state.db", readonly=True)
    try:
        return store.history()
    finally:
        store.close()


# ------------------------------------------------------------------ front matter
def test_a_yaml_bomb_is_a_warning_and_the_memo_is_delivered_without_using_memory(project):
    project.configure({"builder": {}})
    orch = project.up()
    process = psutil.Process(orch.proc.pid)
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        levels.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    bomb = "---\n" + "\n".join(levels) + "\nid: *i\nsubject: boom\n---\nstill a memo\n"
    put(inbox(project), "bomb.md", bomb.encode())
    put(inbox(project), "after.md", b"---\nid: after\n---\nnext\n")
    peak = 0

    def settled() -> bool:
        nonlocal peak
        peak = max(peak, process.memory_info().rss)
        return peak > SMALL_RSS or names(project, "archive") == [b"after.md", b"bomb.md"]

    wait_for(settled, BOMB_DEADLINE, "both memos archived (or the orchestrator's memory exploding)")
    assert peak <= SMALL_RSS, f"the orchestrator grew to {peak // 2**20} MB"
    assert names(project, "archive") == [b"after.md", b"bomb.md"]
    orch.wait_output("bomb.md: front matter")
    line = next(line for line in orch.output.splitlines() if "bomb.md: front matter" in line)
    assert "alias" in line and line.endswith("; delivering it anyway"), line
    ids = sorted(json.dumps(r["memo_ids"]) for r in runs(project))
    assert ids == ['["after"]', "[null]"], "the bomb's id is not read"
    clean_stop(orch)


def test_front_matter_python_rejects_is_text_and_delivered_with_the_batch(project):
    project.configure({"builder": {"batch": True}})
    big = "9" * 5000
    memos = {
        "a-ok.md": "id: ok-1\n",
        "b-month.md": "id: month\ncreated_at: 2026-13-45\n",
        "c-day.md": "id: day\ncreated_at: 2026-02-30\n",
        "d-clock.md": "id: clock\ncreated_at: 2026-02-13T25:61:61Z\n",
        "e-digits.md": f"id: {big}\n",
        "f-tagged.md": "id: !!int abc\nsubject: !!float nope\n",
        "g-ok.md": "id: ok-2\n",
    }
    for name, front in memos.items():  # all waiting before the start: claimed together in one batch
        put(inbox(project), name, f"---\n{front}---\nbody\n".encode())
    orch = project.up()
    wait_for(lambda: len(names(project, "archive")) == len(memos), what=f"all memos archived:\n{orch.output}")
    assert names(project, "active") == [] and names(project, "failed") == []
    # the memos move before the run's end is committed: the row says succeeded a moment after
    done = wait_for(lambda: (r := runs(project)) and r[0]["state"] == "succeeded" and r, what="the run's end recorded")
    assert len(done) == 1, done
    assert done[0]["memo_ids"] == ["ok-1", "month", "day", "clock", big, "abc", "ok-2"]
    assert len(project.records()) == 1 and len(project.records()[0]["env_memos"].splitlines()) == len(memos)
    clean_stop(orch)


# ------------------------------------------------------------------ names
BAD_NAME = b"bad-\xff\xfe-name.md"


def assert_failed_for_its_name(project: Project, orch: Orchestrator) -> None:
    wait_for(lambda: BAD_NAME in names(project, "failed"), what=f"the memo in failed/:\n{orch.output}")
    reason = project.root / "memo" / "builder" / "failed" / os.fsdecode(b"bad-\xff\xfe-name.reason")
    wait_for(reason.exists, what="its reason file")
    text = reason.read_text(encoding="utf-8")
    assert text.startswith("not delivered: its file name is not UTF-8; rename it"), text
    orch.wait_output("not delivered: its file name is not UTF-8")
    assert names(project, "failed") == [BAD_NAME]
    assert BAD_NAME not in names(project, "inbox") + names(project, "active")
    failed = [r for r in runs(project) if r["state"] == "failed"]
    assert len(failed) == 1 and failed[0]["memos"] == ["bad-\\xff\\xfe-name.md"], failed  # stored in a safe form
    assert all("bad-" not in (r["memo"] or "") for r in project.records()), "never delivered"


def test_a_file_name_that_is_not_utf8_goes_to_failed_with_a_reason(project):
    project.configure({"builder": {}})
    orch = project.up()
    put(inbox(project), BAD_NAME, b"---\nid: bad\n---\nfine text\n")
    project.drop("builder", "good.md", {"id": "good"})
    assert_failed_for_its_name(project, orch)
    wait_for(lambda: names(project, "archive") == [b"good.md"], what="good.md archived")
    clean_stop(orch)


def test_up_after_a_non_utf8_name_was_left_in_active_starts_and_deals_with_it(project):
    project.configure({"builder": {}})
    put(project.root / "memo" / "builder" / "active", BAD_NAME, b"left behind by a killed orchestrator\n")
    orch = project.up()
    orch.wait_output("was in active/ when the orchestrator stopped; back in the inbox")
    assert_failed_for_its_name(project, orch)
    clean_stop(orch)


def test_a_name_that_is_not_utf8_is_fine_where_the_terminal_is_strict(project):
    """On a machine with a UTF-8 locale Python's stdout refuses undecodable names: the output escapes them."""
    project.configure({"builder": {}})
    orch = project.up(PYTHONIOENCODING="utf-8:strict")
    put(inbox(project), BAD_NAME, b"fine text\n")
    assert_failed_for_its_name(project, orch)
    assert "bad-\\xff\\xfe-name.md not delivered" in orch.output
    clean_stop(orch)


BINARY = b"\xff\xfe not text\n"


def reason_texts(project: Project) -> list[str]:
    failed = project.root / "memo" / "builder" / "failed"
    return [(failed / os.fsdecode(n)).read_text(encoding="utf-8") for n in names(project, "failed", suffix=b".reason")]


def no_name_too_long(project: Project) -> None:
    """Every name in failed/ and archive/ fits in 255 bytes, and no temporary was left behind."""
    everything = [n for folder in ("failed", "archive") for n in os.listdir(project.root / "memo" / "builder" / folder)]
    assert all(len(os.fsencode(n)) <= 255 for n in everything) and not [n for n in everything if n.startswith(".")]


def test_a_249_byte_name_with_binary_content_fails_with_its_reason(project):
    project.configure({"builder": {}})
    orch = project.up()
    near = "b" * 246 + ".md"  # its reason file's name fits, that file's hidden temporary used not to
    put(inbox(project), near, BINARY)
    wait_for(lambda: names(project, "failed") == [near.encode()], what=f"{near[:8]}... in failed/:\n{orch.output}")
    reason = project.root / "memo" / "builder" / "failed" / ("b" * 246 + ".reason")
    wait_for(reason.exists, what="its reason file")
    assert reason.read_text(encoding="utf-8").startswith("not delivered: it is not UTF-8 text")
    orch.wait_output(f"{near} not delivered: it is not UTF-8 text")
    assert names(project, "inbox") == names(project, "active") == []
    no_name_too_long(project)
    clean_stop(orch)


def test_a_255_byte_name_arriving_twice_gets_a_clash_name_cut_to_fit(project):
    project.configure({"builder": {}})
    orch = project.up()
    longest = "日" * 84 + ".md"  # 255 bytes of three-byte characters: the clash name must drop a whole one
    assert len(longest.encode()) == 255
    put(inbox(project), longest, b"---\nid: long-1\n---\nfirst\n")
    wait_for(lambda: names(project, "archive") == [longest.encode()], what=f"the first one archived:\n{orch.output}")
    put(inbox(project), longest, b"---\nid: long-2\n---\nsecond\n")
    wait_for(lambda: len(names(project, "archive")) == 2, what=f"the second one archived:\n{orch.output}")
    clash = "日" * 83 + ".1.md"
    assert sorted(names(project, "archive")) == sorted([longest.encode(), clash.encode()])
    archive = project.root / "memo" / "builder" / "archive"
    assert (archive / clash).read_text(encoding="utf-8").endswith("second\n")
    wait_for(lambda: [r["state"] for r in runs(project)] == ["succeeded", "succeeded"], what="both ends recorded")
    no_name_too_long(project)
    clean_stop(orch)


def test_a_255_byte_name_failing_twice_keeps_two_reason_files(project):
    project.configure({"builder": {}})
    orch = project.up()
    longest = "x" * 252 + ".md"
    for count in (1, 2):
        put(inbox(project), longest, BINARY)
        wait_for(lambda c=count: len(names(project, "failed")) == c, what=f"failure {count} in failed/:\n{orch.output}")
        wait_for(lambda c=count: len(names(project, "failed", suffix=b".reason")) == c, what=f"reason {count}")
    assert names(project, "failed") == sorted([longest.encode(), ("x" * 250 + ".1.md").encode()])
    texts = reason_texts(project)
    assert len(texts) == 2 and all(t.startswith("not delivered: it is not UTF-8 text") for t in texts), texts
    assert names(project, "inbox") == names(project, "active") == []
    no_name_too_long(project)
    clean_stop(orch)


def test_a_name_starting_with_a_hash_is_delivered_and_editor_files_are_not(project):
    project.configure({"builder": {}})
    orch = project.up()
    for name in (".#42-issue.md", "#42-issue.md#", "42-issue.md~"):  # Emacs' lock and auto-save files, a backup
        put(inbox(project), name, b"an editor's file\n")
    project.drop("builder", "#42-issue.md", {"id": "42"})
    wait_for(lambda: names(project, "archive") == [b"#42-issue.md"], what=f"#42-issue.md archived:\n{orch.output}")
    assert sorted(os.listdir(inbox(project))) == ["#42-issue.md#", ".#42-issue.md", "42-issue.md~"]
    assert [Path(r["memo"]).name for r in project.records()] == ["#42-issue.md"]
    clean_stop(orch)


def test_a_name_with_a_line_break_or_an_escape_cannot_forge_a_log_line_or_drive_the_terminal(project):
    """A file name may hold any byte but ``/``: a line break in it made the rest of the name a line of the log that
    read as an event of its own, and an ESC in it reached the terminal as a control sequence."""
    project.configure({"builder": {}})
    orch = project.up()
    forged = "x\n2026-12-05 10:00:00.000 [builder] done FORGED.md in 1.0s (run 99); archived 1 memo(s)\x1b[2J\x85.md"
    project.drop("builder", forged)  # no id: its name is its label in every line, the state changes' included
    wait_for(lambda: len(names(project, "archive")) == 1, what=f"the memo archived:\n{orch.output}")
    clean_stop(orch)
    for text in (orch.output, (project.root / ".orchestrator" / "orchestrator.log").read_text(encoding="utf-8")):
        assert "\x1b" not in text and "\x85" not in text and "\\x1b[2J\\x85" in text
        lines = [line for line in text.splitlines() if "FORGED" in line]
        assert lines and all(line.startswith("    2026-12-05 10:00:00.000 [builder] done FORGED") for line in lines)
