"""A bug of ours reaches a person as one line and exit status 70, never as a traceback; the traceback is kept in a
file the line names."""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.core.errors import UsageError
from orchestrator.memory import command as memory_command


@pytest.fixture
def one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path):
    """Run ``memory list`` with its ``run`` replaced by ``broken``: (exit status, the one line, the kept file)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again

    def call(broken):
        monkeypatch.setattr(memory_command, "run", broken)
        code = cli.main(["memory", "list"])
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        kept = re.search(r"the traceback is in ([^\s)]+)", err)
        return code, err.strip(), Path(kept.group(1)) if kept else None

    return call


def test_an_unexpected_exception_is_one_line_naming_it_and_exit_70(one_line, tmp_path: Path) -> None:
    def broken(args: argparse.Namespace) -> int:
        return {}["curator"]  # a KeyError, as a bug would raise it

    code, line, kept = one_line(broken)
    assert code == cli.INTERNAL_ERROR == 70
    assert line.startswith("orchestrator: internal error: KeyError: 'curator' at test_cli_errors.py:"), line
    assert "this is a bug, please report it" in line
    assert kept is not None and kept.parent == tmp_path and "KeyError" in kept.read_text()
    assert "Traceback (most recent call last)" in kept.read_text() and kept.stat().st_mode & 0o077 == 0


def test_the_place_named_is_in_our_own_code_when_a_library_raised(one_line) -> None:
    def broken(args: argparse.Namespace) -> int:
        return int(json.loads("{"))

    code, line, _kept = one_line(broken)
    assert code == 70 and "JSONDecodeError" in line and " at test_cli_errors.py:" in line, line


def test_an_os_error_says_the_file_and_the_system_s_words_with_status_1(one_line, tmp_path: Path) -> None:
    def broken(args: argparse.Namespace) -> int:
        (tmp_path / "missing" / "x").read_text()
        return 0

    code, line, kept = one_line(broken)
    assert code == 1
    assert line.startswith(f"orchestrator: {tmp_path / 'missing' / 'x'}: No such file or directory (at "), line
    assert kept is not None and "FileNotFoundError" in kept.read_text()


def test_an_orchestrator_error_keeps_its_own_status(one_line) -> None:
    def refused(args: argparse.Namespace) -> int:
        raise UsageError("memory list: no")

    code, line, kept = one_line(refused)
    assert (code, line, kept) == (2, "orchestrator: memory list: no", None)


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "--limit", "99999999999999999999999"],
        ["history", "--before", "99999999999999999999999"],
        ["task", "add", "builder", "hi", "--priority", "99999999999999999999999"],
        ["memory", "show", "99999999999999999999999"],
        ["memory", "forget", "99999999999999999999999", "--why", "x"],
        ["journal", "--last", "-99999999999999999999999"],
    ],
)
def test_a_number_no_record_can_hold_is_a_usage_error_not_an_internal_one(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite's integers are 64 bits: a larger one was refused only when a query bound it (OverflowError, exit 70)."""
    (tmp_path / "roles.yaml").write_text("roles:\n  builder: {command: [sleep, '1'], prompt: p.md}\n")
    (tmp_path / "p.md").write_text("$memo\n")
    assert cli.main([*argv, "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is out of range (-9223372036854775808 to 9223372036854775807)" in err, err
