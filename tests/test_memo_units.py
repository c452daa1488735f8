"""Unit tests of the pure parts: memo names, front matter, moves (memo.py), prompt templates (prompts.py),
and roles.yaml parsing (config). No orchestrator process is started here."""

from __future__ import annotations

import os
import string
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from orchestrator.config import RetryPolicy, load_config, parse_duration
from orchestrator.core.errors import ConfigError
from orchestrator.intake import front_matter
from orchestrator.intake import memo as memo_mod
from orchestrator.intake.memo import (
    FRONT_MATTER_MAX_ALIASES,
    FRONT_MATTER_MAX_CHARS,
    FRONT_MATTER_MAX_DEPTH,
    NAME_MAX,
    BadMemo,
    fit_name,
    free_name,
    front_matter_problem,
    is_memo_name,
    move_memo,
    new_memo_id,
    open_for_writing,
    parse_front_matter,
    read_memo,
    render_memo,
    slug,
    write_atomically,
)
from orchestrator.intake.notices import reason_path, write_reason
from orchestrator.prompts import PLACEHOLDERS, load_template
from orchestrator.store import Store, safe_text

FIXTURES = Path(__file__).parent / "fixtures" / "yolo"


# ---------------------------------------------------------------- names
@pytest.mark.parametrize(
    "name",
    [
        "a.md",
        "B-031.md",
        "日本語 メモ.md",
        "$(touch x).md",
        "x.y.md",
        "-.md",
        "a b.md",
        "x.md.md",
        "a~b.md",
        "#42-issue.md",
        "#x.md",
    ],
)
def test_memo_names(name: str) -> None:
    assert is_memo_name(name)


@pytest.mark.parametrize(
    "name",
    [
        ".hidden.md",
        "x.md~",
        ".#x.md",
        "#x.md#",
        "x.swp",
        "x.tmp",
        "x.md.tmp",
        "x.md.swp",
        "x.md.swx",
        "notes.txt",
        "x.MD",
        "md",
        "x.md/",
        "a/b.md",
        ".x.md.123.tmp",
        "",
    ],
)
def test_names_that_are_no_memo(name: str) -> None:
    assert not is_memo_name(name)


# ---------------------------------------------------------------- front matter
def test_front_matter_fields() -> None:
    text = (
        '---\nid: "19c561b2270"\nsubject: "計画依頼: メモツール"\nfrom: "project manager"\nto: builder\n'
        'created_at: "2026-02-13T17:25:44.816+09:00"\ntags:\n  - reply\n  - 実装\nreply_to: "19c561b1e88"\n'
        "agent: {sleep: 1}\n---\n\nbody with --- inside\n---\n"
    )
    header = parse_front_matter(text)
    assert header.id == "19c561b2270" and header.subject == "計画依頼: メモツール"
    assert header.sender == "project manager" and header.to == "builder"
    assert header.created_at == "2026-02-13T17:25:44.816+09:00"
    assert header.tags == ("reply", "実装") and header.reply_to == "19c561b1e88"
    assert header.warning is None and header.extra["agent"] == {"sleep": 1}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("---\nid: 12345\n---\n", {"id": "12345"}),  # numbers become text
        ("---\nid: 0x1f\n---\n", {"id": "31"}),  # YAML's own reading of the scalar
        ("---\nreply_to: null\nsubject: '  '\n---\n", {"reply_to": None, "subject": None}),
        ("---\ntags: single\n---\n", {"tags": ("single",)}),
        ("---\ntags: 7\n---\n", {"tags": ("7",)}),
        ("---\nid: A\n...\nbody", {"id": "A"}),  # YAML's document end closes it too
        ("---\r\nid: CRLF\r\n---\r\nbody\r\n", {"id": "CRLF"}),
        ("---\n---\nbody", {"id": None, "warning": None}),
        ("no front matter\n---\nid: X\n---\n", {"id": None, "warning": None}),
        ("---not a fence\nid: X\n---\n", {"id": None, "warning": None}),
        ("", {"id": None, "warning": None}),
    ],
)
def test_front_matter_variants(text: str, expected: dict[str, object]) -> None:
    header = parse_front_matter(text)
    for key, value in expected.items():
        assert getattr(header, key) == value, key


@pytest.mark.parametrize(
    "text, warning",
    [
        ("---\nid: A\nbody without an end\n", "no closing '---'"),
        ("---\nid: [unclosed\n---\nbody\n", "not valid YAML at line"),
        ("---\n- a\n- b\n---\n", "not a mapping"),
        ("---\njust text\n---\n", "not a mapping"),
    ],
)
def test_broken_front_matter_is_a_warning_not_an_error(text: str, warning: str) -> None:
    header = parse_front_matter(text)
    assert warning in (header.warning or "")
    assert header.id is None


# ---------------------------------------------------------------- hostile front matter
def yaml_bomb(levels: int = 9, width: int = 9) -> str:
    """Each anchor refers to the previous one ``width`` times: ``width ** levels`` items once expanded."""
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * width)}]")
    return "\n".join(lines) + f"\nid: *l{levels - 1}\nsubject: boom\n"


def test_a_yaml_bomb_is_refused_before_it_expands() -> None:
    tracemalloc.start()
    try:
        header = parse_front_matter(f"---\n{yaml_bomb()}---\nbody\n")
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert header.warning == (
        "front matter would expand past 1048576 nodes and characters through its aliases; its fields are not read"
    ), header.warning
    assert header.id is None and header.subject is None and header.extra == {}
    assert peak < 5 * 2**20, f"reading it took {peak // 2**20} MB"


@pytest.mark.parametrize(
    "block, problem",
    [
        ("a: " + "[" * (FRONT_MATTER_MAX_DEPTH + 1) + "]" * (FRONT_MATTER_MAX_DEPTH + 1), "deeper than 32 levels"),
        ("a: &a x\nb: [" + ", ".join(["*a"] * (FRONT_MATTER_MAX_ALIASES + 1)) + "]", "more than 100 aliases"),
        ("a: " + "x" * FRONT_MATTER_MAX_CHARS, "longer than 65536 characters"),
        ("a: &a [*a]", "an alias (*a) to no finished anchor"),  # a list that contains itself
        ("a: *nowhere", "an alias (*nowhere) to no finished anchor"),
        (yaml_bomb(levels=30, width=2), "would expand past"),  # few aliases (58), still 2**30 items
        ("a: &a " + "y" * 60_000 + "\nb: [" + ", ".join(["*a"] * 20) + "]", "would expand past"),  # a text, 20 times
    ],
)
def test_front_matter_limits(block: str, problem: str) -> None:
    assert problem in (front_matter_problem(block) or ""), front_matter_problem(block)
    header = parse_front_matter(f"---\n{block}\nid: X\n---\n")
    assert problem in (header.warning or "") and header.id is None


def test_deep_and_long_front_matter_within_the_limits_is_read() -> None:
    nested = "[" * 30 + "'" + "y" * 60_000 + "'" + "]" * 30  # counted once, not once per level
    assert front_matter_problem(f"a: {nested}") is None
    assert parse_front_matter(f"---\na: {nested}\nid: deep\n---\n").id == "deep"


def test_aliases_within_the_limits_are_read() -> None:
    block = "base: &b {owner: pm}\nfirst: *b\nsecond:\n  <<: *b\n  extra: 1\nid: &id A-1\nreply_to: *id\n"
    assert front_matter_problem(block) is None
    header = parse_front_matter(f"---\n{block}---\n")
    assert header.warning is None and header.id == "A-1" and header.reply_to == "A-1"
    assert header.extra["second"] == {"owner": "pm", "extra": 1}


@pytest.mark.parametrize(
    "line, field, text",
    [
        ("created_at: 2026-13-45", "created_at", "2026-13-45"),  # YAML's timestamp pattern, no such month
        ("created_at: 2026-02-30", "created_at", "2026-02-30"),
        ("created_at: 2026-02-13T25:61:61Z", "created_at", "2026-02-13T25:61:61Z"),
        ("created_at: 2026-02-13T17:25:44.816+09:00", "created_at", "2026-02-13T17:25:44.816+09:00"),  # as written
        ("created_at: 2026-02-13", "created_at", "2026-02-13"),
        ("id: " + "9" * 5000, "id", "9" * 5000),  # Python refuses to read more than 4300 digits
        ("id: 0x" + "f" * 4000, "id", "0x" + "f" * 4000),  # it reads them, and then refuses to print them
        ("id: !!int abc", "id", "abc"),
        ("subject: !!float nope", "subject", "nope"),
        ("subject: !!bool maybe", "subject", "maybe"),
        ("id: 0x1f", "id", "31"),  # a number Python takes is still read as YAML reads it
    ],
)
def test_front_matter_python_rejects_is_read_as_text(line: str, field: str, text: str) -> None:
    header = parse_front_matter(f"---\n{line}\nsubject_after: ok\n---\nbody\n")
    assert header.warning is None
    assert getattr(header, field) == text
    assert header.extra["subject_after"] == "ok"


@pytest.mark.parametrize(
    "block",
    [
        "a: !!binary '%%%'",
        "? [a]\n: 1",
        "a: !!python/object:os.system x",
        "a: !!set 1",
        "a: !!omap x",
        "a: !!map x",
        "a: !!timestamp x",
        "a: !!str [1]",
        "\ta: b",
        'a: "\\q"',
    ],
)
def test_front_matter_never_raises(block: str) -> None:
    header = parse_front_matter(f"---\n{block}\n---\nbody\n")
    assert header.warning is not None or header.extra, header


def test_an_unforeseen_error_in_front_matter_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_block: str) -> None:
        raise RuntimeError("something nobody foresaw")

    monkeypatch.setattr(front_matter, "front_matter_problem", broken)
    header = parse_front_matter("---\nid: A\n---\n")
    assert header.warning == "front matter could not be read: RuntimeError: something nobody foresaw"
    assert header.id is None


def test_header_text_is_always_utf8() -> None:
    assert front_matter._text("\ud800 x ") == "\ufffd x"  # what the pure-Python YAML reader makes of "\\ud800"
    assert front_matter._text(" 日本 ") == "日本"


def test_the_real_memos_front_matter() -> None:
    paths = sorted(FIXTURES.glob("*/*.md"))
    assert len(paths) >= 30
    for path in paths:
        text = path.read_text(encoding="utf-8")
        expected = yaml.safe_load(text.split("---", 2)[1])
        header = parse_front_matter(text)
        assert header.warning is None, path
        assert header.id == str(expected["id"]) and header.subject == expected["subject"]
        assert header.reply_to == (str(expected["reply_to"]) if expected["reply_to"] else None)
        assert header.to is not None and header.to.replace(" ", "-") == path.parent.name  # as people wrote it


def test_render_memo_round_trips() -> None:
    header = {
        "id": "abc",
        "subject": "件名: a 'quoted' \"text\" #1",
        "from": "builder",
        "to": "reviewer",
        "tags": ["x", "日本"],
        "reply_to": None,
    }
    text = render_memo(header, "本文\n\n")
    parsed = parse_front_matter(text)
    assert (parsed.id, parsed.subject, parsed.sender, parsed.to, parsed.tags, parsed.reply_to) == (
        "abc",
        header["subject"],
        "builder",
        "reviewer",
        ("x", "日本"),
        None,
    )
    assert text.endswith("---\n\n本文\n")


def test_slug_and_new_ids() -> None:
    assert slug("Review: メモツール改善 (v2)!") == "review-v2"
    assert slug("日本語") == "memo"
    assert len(slug("a" * 100)) == 40
    ids = {new_memo_id() for _ in range(3)}
    assert all(int(i, 16) > 0 for i in ids)


# ---------------------------------------------------------------- reading and moving
def test_read_memo(tmp_path: Path) -> None:
    path = tmp_path / "m.md"
    path.write_text("---\nid: 1\n---\n日本語\n", encoding="utf-8")
    assert read_memo(path, 1000) == "---\nid: 1\n---\n日本語\n"
    with pytest.raises(BadMemo, match="larger than max_memo_bytes"):
        read_memo(path, 5)
    (tmp_path / "bin.md").write_bytes(b"ok \xff\xfe")
    with pytest.raises(BadMemo, match="not UTF-8"):
        read_memo(tmp_path / "bin.md", 1000)
    (tmp_path / "link.md").symlink_to(path)
    with pytest.raises(BadMemo, match="symbolic link"):
        read_memo(tmp_path / "link.md", 1000)
    os.mkfifo(tmp_path / "fifo.md")
    with pytest.raises(BadMemo, match="not a regular file"):
        read_memo(tmp_path / "fifo.md", 1000)
    with pytest.raises(FileNotFoundError):
        read_memo(tmp_path / "gone.md", 1000)


def test_moves_keep_the_name_and_never_overwrite(tmp_path: Path) -> None:
    inbox, archive = tmp_path / "inbox", tmp_path / "archive"
    inbox.mkdir()
    moved = []
    for number in range(3):
        (inbox / "a.md").write_text(f"version {number}", encoding="utf-8")
        moved.append(move_memo(inbox / "a.md", archive))
    assert [p.name for p in moved] == ["a.md", "a.1.md", "a.2.md"]
    assert [p.read_text(encoding="utf-8") for p in moved] == ["version 0", "version 1", "version 2"]
    (inbox / "noext").write_text("x", encoding="utf-8")
    (archive / "noext").write_text("y", encoding="utf-8")
    assert free_name(archive, "noext") == archive / "noext.1"
    with pytest.raises(FileNotFoundError):  # the rename is the arbiter: a memo moved once cannot move twice
        move_memo(inbox / "a.md", archive)
    assert sorted(p.name for p in archive.iterdir()) == ["a.1.md", "a.2.md", "a.md", "noext"]


# ---------------------------------------------------------------- names near the limit, names not UTF-8
@pytest.mark.parametrize("char", ["a", "é", "日", "😀", "\udcff"])  # 1, 2, 3, 4 bytes; a byte that is not UTF-8
@pytest.mark.parametrize("tail", ["", ".1.md", ".12345.md", ".reason", ".4242.tmp"])
def test_fit_name_cuts_the_stem_at_a_character_boundary(char: str, tail: str) -> None:
    for count in range(40, 260):
        stem = char * count
        name = fit_name(stem, tail)
        assert len(os.fsencode(name)) <= NAME_MAX and name.endswith(tail)
        kept = name.removesuffix(tail) if tail else name
        assert kept == char * len(kept), "only whole characters are kept"
        if len(os.fsencode(stem + tail)) <= NAME_MAX:
            assert name == stem + tail, "a name that fits is not touched"
        else:
            assert len(os.fsencode(name + char)) > NAME_MAX, "no more is cut than needed"


def test_clash_names_of_the_longest_names_fit(tmp_path: Path) -> None:
    inbox, archive = tmp_path / "inbox", tmp_path / "archive"
    inbox.mkdir()
    longest = "日" * 84 + ".md"
    assert len(longest.encode()) == NAME_MAX
    moved = []
    for number in range(3):
        (inbox / longest).write_text(f"version {number}", encoding="utf-8")
        moved.append(move_memo(inbox / longest, archive))
    assert [p.name for p in moved] == [longest, "日" * 83 + ".1.md", "日" * 83 + ".2.md"]
    assert [p.read_text(encoding="utf-8") for p in moved] == ["version 0", "version 1", "version 2"]
    (archive / ("x" * 255)).write_text("no suffix", encoding="utf-8")
    assert free_name(archive, "x" * 255) == archive / ("x" * 253 + ".1")


def test_reason_files_of_long_names_fit_and_stay_distinct(tmp_path: Path) -> None:
    assert reason_path(tmp_path / "B-1.md") == tmp_path / "B-1.reason"
    near = "b" * 246 + ".md"
    assert reason_path(tmp_path / near) == tmp_path / ("b" * 246 + ".reason")  # 253 bytes: it fits as it is
    longest, clash = "x" * 252 + ".md", "x" * 250 + ".1.md"
    first, second = reason_path(tmp_path / longest), reason_path(tmp_path / clash)
    assert first != second, "a memo and its clash name have a reason file each"
    for path in (first, second):
        assert len(path.name.encode()) <= NAME_MAX and path.name.startswith("x" * 200) and path.name.endswith(".reason")
    assert reason_path(tmp_path / longest) == first, "the same memo always has the same reason file"
    for name in (near, longest, clash, "日" * 84 + ".md"):
        written = write_reason(tmp_path / name, "why\n")
        assert written.read_text(encoding="utf-8") == "why\n"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary is left"
    assert len(list(tmp_path.iterdir())) == 4


def test_write_atomically_to_the_longest_name(tmp_path: Path) -> None:
    target = tmp_path / ("日" * 84 + ".md")
    write_atomically(target, "whole")
    assert target.read_text(encoding="utf-8") == "whole"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_a_file_name_that_is_not_utf8_is_never_delivered(tmp_path: Path) -> None:
    path = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"bad-\xff\xfe-name.md")))
    path.write_text("fine text\n", encoding="utf-8")
    with pytest.raises(BadMemo, match=r"^its file name is not UTF-8; rename it"):
        read_memo(path, 1000)
    assert is_memo_name(path.name), "it is a memo, one that goes to failed/ with a reason"
    with pytest.raises(FileNotFoundError):  # one deleted before its claim is simply gone, whatever its name
        read_memo(path.with_name("gone-\udcff.md"), 1000)


def test_the_store_keeps_names_that_are_not_utf8(tmp_path: Path) -> None:
    bad = os.fsdecode(b"bad-\xff\xfe-name.md")
    assert safe_text(bad) == "bad-\\xff\\xfe-name.md" and safe_text(safe_text(bad)) == safe_text(bad)
    assert safe_text("日本語.md") == "日本語.md" and safe_text("\ud800") == "\\ud800"
    store = Store(tmp_path / "state.db")
    try:
        store.set_memo_attempts("builder", bad, 2)
        assert store.memo_attempts("builder", bad) == 2
        store.forget_memo_attempts("builder", [bad])
        assert store.memo_attempts("builder", bad) == 0
        run_id = store.insert_run(
            role="builder", memos=[bad], memo_ids=[None], subject=bad, state="failed", reason=f"not delivered: {bad}"
        )
        store.update_run(run_id, memos=[bad, "ok.md"], reason=bad)
        store.record_attempt(run_id, 1, reason=bad, log_path=bad)
        store.record_cancellation(role="builder", memo=bad, memo_id=bad, cancelled_at="now")
        row = store.run(run_id)
        assert row is not None and row["memos"] == ["bad-\\xff\\xfe-name.md", "ok.md"]
        assert row["subject"] == safe_text(bad)
        assert store.attempts(run_id)[0]["reason"] == safe_text(bad)
        assert store.cancellation_of(bad)["memo"] == safe_text(bad)  # type: ignore[index]
    finally:
        store.close()


def test_write_atomically_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "m.md"
    write_atomically(target, "whole")
    write_atomically(target, "whole again")
    assert target.read_text(encoding="utf-8") == "whole again"
    assert [p.name for p in target.parent.iterdir()] == ["m.md"]


def test_write_atomically_that_fails_leaves_no_temporary(tmp_path: Path) -> None:
    """Its temporary's name is cut to fit, the target's is not: the rename fails, and takes the temporary with it."""
    with pytest.raises(OSError, match="too long"):
        write_atomically(tmp_path / ("x" * 256), "whole")
    assert list(tmp_path.iterdir()) == []


def test_open_for_writing_sees_writers_only(tmp_path: Path) -> None:
    writing, reading, closed = tmp_path / "w.md", tmp_path / "r.md", tmp_path / "c.md"
    for path in (writing, reading, closed):
        path.write_text("x", encoding="utf-8")
    with open(writing, "a", encoding="utf-8"), open(reading, encoding="utf-8"):
        assert open_for_writing([writing, reading, closed]) == {writing}
        with open(reading, "r+", encoding="utf-8"):
            assert open_for_writing([writing, reading, closed]) == {writing, reading}
    assert open_for_writing([writing, reading, closed]) == set()
    assert open_for_writing([]) == set()
    assert memo_mod.open_for_writing([tmp_path / "missing.md"]) == set()


# ---------------------------------------------------------------- prompts
def test_placeholders_are_the_documented_set() -> None:
    assert PLACEHOLDERS == {
        "role",
        "run_id",
        "seq",
        "time",
        "context",
        "memory",
        "handoff",
        "journal",
        "tasks",
        "signals",
        "answers",
        "attempt",
        "memo_path",
        "memo_paths",
        "memo",
        "root",
        "now",
        "date",
        "weekday",
        "INPUT_MEMO_FILES",
    }


def _template(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prompt.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_render_single_memo(tmp_path: Path) -> None:
    text = " ".join(f"{name}=${{{name}}}" for name in sorted(PLACEHOLDERS)) + " $$ $$memo"
    template = load_template(_template(tmp_path, text))
    now = datetime(2026, 11, 30, 9, 5, 7, tzinfo=UTC)
    out = template.render(
        role="builder",
        run_id=7,
        attempt=2,
        root=Path("/r"),
        memo_paths=[Path("/r/a b.md")],
        memo_text="$role stays ${as} is",
        batch=False,
        now=now,
    )
    values = dict(item.split("=", 1) for item in out.rsplit(" $ $memo", 1)[0].split(" ") if "=" in item)
    assert out.endswith(" $ $memo")
    assert values["role"] == "builder" and values["run_id"] == "7" and values["attempt"] == "2"
    assert values["root"] == "/r" and values["date"] == "2026-11-30" and values["weekday"] == "Monday"
    assert values["memo_path"] == values["memo_paths"] == values["INPUT_MEMO_FILES"] == "/r/a"
    assert "memo=$role stays ${as} is" in out  # memo text is inserted, never expanded
    assert values["now"].startswith("2026-11-30T") and datetime.fromisoformat(values["now"]).tzinfo is not None


def test_render_batch(tmp_path: Path) -> None:
    template = load_template(_template(tmp_path, "[$memo_path][$memo][$memo_paths][$INPUT_MEMO_FILES]"))
    paths = [Path("/r/1.md"), Path("/r/2.md")]
    out = template.render(
        role="pm", run_id=1, attempt=1, root=Path("/r"), memo_paths=paths, memo_text="ignored", batch=True
    )
    assert out == "[][][/r/1.md\n/r/2.md][/r/1.md\n/r/2.md]"


@pytest.mark.parametrize(
    "text, message",
    [
        ("$nope", "unknown placeholder $nope"),
        ("${nope} and $other", "unknown placeholder $nope (and $other)"),
        ("$Role", "unknown placeholder $Role"),
        ("a\nb\ncosts $ 5", "line 3: a '$' that starts no placeholder"),
        ("$5", "line 1: a '$' that starts no placeholder"),
        ("${memo", "line 1: a '$' that starts no placeholder"),
        ("end $", "line 1: a '$' that starts no placeholder"),
    ],
)
def test_template_errors_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = _template(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_template(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_template_file_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="prompt file not found"):
        load_template(tmp_path / "missing.md")
    (tmp_path / "bad.md").write_bytes(b"\xff$memo")
    with pytest.raises(ConfigError, match="cannot read prompt"):
        load_template(tmp_path / "bad.md")


def test_a_template_without_placeholders_is_fine(tmp_path: Path) -> None:
    template = load_template(_template(tmp_path, "just do it; it costs $$5"))
    assert isinstance(template.template, string.Template)
    assert (
        template.render(
            role="r", run_id=1, attempt=1, root=tmp_path, memo_paths=[tmp_path / "m.md"], memo_text="", batch=False
        )
        == "just do it; it costs $5"
    )


# ---------------------------------------------------------------- roles.yaml
@pytest.mark.parametrize(
    "value, seconds",
    [
        (5, 5.0),
        (0, 0.0),
        (1.5, 1.5),
        ("5s", 5.0),
        ("500ms", 0.5),
        ("30m", 1800.0),
        ("1h", 3600.0),
        ("2d", 172800.0),
        ("0.25s", 0.25),
        (" 7 s ", 7.0),
        ("10", 10.0),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["5 minutes", "soon", "-1s", "5x", "", "s", None, True, [5], -1, "1e3s"])
def test_bad_durations(value: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


def test_retry_delay_repeats_the_last_backoff() -> None:
    policy = RetryPolicy.model_validate({"max": 5, "backoff": ["1s", "2s"]})
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 2.0, 2.0]


def _config(tmp_path: Path, data: dict[str, object]) -> Path:
    (tmp_path / "roles.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return tmp_path


def test_defaults_apply_and_small_mappings_merge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCHESTRATOR_SPAWN_CMD", raising=False)
    root = _config(
        tmp_path,
        {
            "max_concurrent": 4,
            "notify": "pm",
            "rescan_interval": "250ms",
            "defaults": {
                "command": ["agent", "-p"],
                "timeout": "2m",
                "retry": {"max": 1, "backoff": ["1s"]},
                "env": {"A": "1", "B": "2"},
            },
            "roles": {
                "pm": {"batch": True, "max_concurrent": 3},
                "builder": {
                    "max_concurrent": 2,
                    "retry": {"max": 4},
                    "env": {"B": "own"},
                    "prompt": "p/b.md",
                    "command": ["other"],
                    "prompt_via": "arg",
                    "cwd": "sub",
                },
            },
        },
    )
    config = load_config(root)
    assert config.root == tmp_path.resolve() and config.path == tmp_path.resolve() / "roles.yaml"
    assert (config.max_concurrent, config.notify, config.rescan_interval) == (4, "pm", 0.25)
    pm, builder = config.roles["pm"], config.roles["builder"]
    assert pm.prompt == "prompts/pm.md" and pm.command == ["agent", "-p"] and pm.timeout == 120.0
    assert pm.limit == 1  # a batch role runs alone, whatever max_concurrent says
    assert pm.retry.max == 1 and pm.retry.backoff == [1.0] and pm.env == {"A": "1", "B": "2"}
    assert builder.limit == 2 and builder.retry.max == 4 and builder.retry.backoff == [1.0]
    assert builder.env == {"A": "1", "B": "own"}
    assert (builder.prompt, builder.command, builder.prompt_via, builder.cwd) == ("p/b.md", ["other"], "arg", "sub")
    assert builder.grace == 10.0 and builder.stop_on_failure is False and builder.batch is False
    assert list(config.roles) == ["pm", "builder"]


def test_an_unlimited_role(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, {"roles": {"r": {}}}))
    assert config.roles["r"].limit >= 1000 and config.max_concurrent == 10 and config.notify is None


@pytest.mark.parametrize(
    "raw, argv",
    [
        ("echo", ["echo"]),
        ("python3 /x/stand_in.py --flag 'two words'", ["python3", "/x/stand_in.py", "--flag", "two words"]),
        ('"/path with spaces/agent" -p', ["/path with spaces/agent", "-p"]),
    ],
)
def test_spawn_cmd_overrides_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: str, argv: list[str]
) -> None:
    monkeypatch.setenv("ORCHESTRATOR_SPAWN_CMD", raw)
    data = {"defaults": {"command": ["a"]}, "roles": {"x": {}, "y": {"command": ["b"]}}}
    config = load_config(_config(tmp_path, data))
    assert config.roles["x"].command == argv and config.roles["y"].command == argv


def test_a_blank_spawn_cmd_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_SPAWN_CMD", "  ")
    config = load_config(_config(tmp_path, {"roles": {"x": {"command": ["b"]}}}))
    assert config.roles["x"].command == ["b"]


def test_an_unsplittable_spawn_cmd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_SPAWN_CMD", "agent 'open")
    with pytest.raises(ConfigError, match="ORCHESTRATOR_SPAWN_CMD: cannot split"):
        load_config(_config(tmp_path, {"roles": {"x": {}}}))


@pytest.mark.parametrize(
    "data, message",
    [
        ({"roles": {"x": {}}, "max_concurent": 1}, "roles.yaml: max_concurent: unknown key"),
        (
            {"roles": {"x": {"retry": {"max": -1}}}},
            "roles.yaml: roles.x.retry.max: expected a whole number >= 0, got -1",
        ),
        ({"roles": {"x": {"crash": {"window": "never"}}}}, "roles.x.crash.window: expected a duration"),
        ({"roles": {"x": {"budget": {"per_run_usd": 0}}}}, "roles.x.budget.per_run_usd:"),
        ({"roles": {"x": {}}, "notify": "y"}, "roles.yaml: notify: names 'y'"),
        ({"roles": {".x": {}}}, "roles..x: a role name must start with a letter or digit"),
        ({"roles": {"x": {"max_concurrent": 1.5}}}, "roles.x.max_concurrent:"),
        ({"roles": {"x": {"env": ["A=1"]}}}, "roles.x.env:"),
        ({"roles": {"x": {"workspace": {"copy_files": [".env"]}}}}, "roles.x.workspace.copy_files: unknown key"),
    ],
)
def test_config_errors_name_the_file_and_key(tmp_path: Path, data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, data))
    assert message in str(info.value)
    assert str(info.value).startswith(str(tmp_path.resolve() / "roles.yaml"))


def test_several_problems_give_one_line_each(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, {"roles": {"x": {"promt": "a", "timeout": "soon"}}, "extra": 1}))
    lines = str(info.value).splitlines()
    assert len(lines) == 3
    assert all(line.startswith(str(tmp_path.resolve() / "roles.yaml") + ": ") for line in lines)


def test_the_scan_makes_the_same_paths_with_or_without_pathlibs_own_child_maker(tmp_path: Path) -> None:
    from orchestrator.intake.queue import _child_maker

    class NoPrivateMaker(type(tmp_path)):  # type: ignore[misc]
        _make_child_relpath = None  # a Python without it: the public join instead

    for folder in (tmp_path, NoPrivateMaker(tmp_path)):
        made = _child_maker(folder)("m 1.md")
        assert made == tmp_path / "m 1.md" and str(made) == f"{tmp_path}/m 1.md" and made.name == "m 1.md"
