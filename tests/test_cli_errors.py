"""A bug of ours reaches a person as one line and exit status 70, never as a traceback."""

from __future__ import annotations

import argparse

import pytest

from orchestrator import cli
from orchestrator.memory import command as memory_command


def test_an_unexpected_exception_is_one_line_naming_it_and_exit_70(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(args: argparse.Namespace) -> int:
        return {}["curator"]  # a KeyError, as a bug would raise it

    monkeypatch.setattr(memory_command, "run", broken)
    code = cli.main(["memory", "list"])
    err = capsys.readouterr().err
    assert code == cli.INTERNAL_ERROR == 70
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("orchestrator: internal error: KeyError: 'curator' at test_cli_errors.py:"), err
    assert err.rstrip().endswith("this is a bug in the orchestrator, please report it"), err


def test_an_orchestrator_error_keeps_its_own_status(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.core.errors import UsageError

    def refused(args: argparse.Namespace) -> int:
        raise UsageError("memory list: no")

    monkeypatch.setattr(memory_command, "run", refused)
    assert cli.main(["memory", "list"]) == 2
