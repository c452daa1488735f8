"""The ``orchestrator`` command's arguments: one parser with a sub-parser per command; a usage mistake raises
``UsageError`` (one line, exit 2) instead of argparse's own exit."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator import __version__
from orchestrator.core.errors import UsageError
from orchestrator.memory import command as memory_command


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def root_option(default: object) -> _Parser:
    """``--root``, before the command (default None) or after it (``argparse.SUPPRESS``: an absent one must not
    overwrite ``orchestrator --root X status``'s)."""
    common = _Parser(add_help=False)
    common.add_argument("--root", type=Path, default=default, help="project root (default: the current directory)")
    return common


def build() -> argparse.ArgumentParser:
    """The parser of every sub-command (``memory`` adds its own through ``memory_command.add_parser``)."""
    parser = _Parser(
        prog="orchestrator", description="Run a team of AI agents through Markdown memos.", parents=[root_option(None)]
    )
    common = root_option(argparse.SUPPRESS)  # after the command it may be given again; unset, it keeps the first
    parser.add_argument("--version", action="version", version=f"orchestrator {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    up = sub.add_parser("up", parents=[common], help="watch the inboxes and run agents (foreground)")
    up.add_argument("--until-idle", action="store_true", help="exit 0 once nothing is queued or running")
    up.add_argument("--plain", action="store_true", help="plain log lines even on a terminal")
    up.add_argument("--web", metavar="[HOST:]PORT", help="serve the dashboard there (port 0: any free port)")

    web = sub.add_parser("web", parents=[common], help="the running dashboard's URL (with its token)")
    web.add_argument("--open", action="store_true", help="open it in a browser")

    status = sub.add_parser("status", parents=[common], help="what runs, what waits, what ended")
    status.add_argument("--json", action="store_true")

    cancel = sub.add_parser("cancel", parents=[common], help="stop a memo's work at any stage")
    cancel.add_argument("memo", nargs="?", help="front-matter id, file name (with or without .md), or path")
    cancel.add_argument("--role", help="cancel all of this role's queued and running work")
    cancel.add_argument("--reason", default="", help="why; recorded and told to the notify role")
    cancel.add_argument("--all", action="store_true", help="cancel every memo that matches")
    cancel.add_argument("--json", action="store_true")

    stop = sub.add_parser("stop", parents=[common], help="end the orchestrator: running agents finish")
    stop.add_argument("--force", action="store_true", help="kill every agent now and return their memos to the inbox")
    stop.add_argument("--wait", action="store_true", help="return only when the orchestrator has exited")
    stop.add_argument(
        "--timeout",
        metavar="DURATION",
        help="wait at most this long (5s, 10m, ...; implies --wait), then exit 1 naming what still runs "
        "(default: the longest role timeout + grace + 30s)",
    )

    interrupt = sub.add_parser("interrupt", parents=[common], help="end an SDK agent's current turn")
    interrupt.add_argument("memo")
    interrupt.add_argument(
        "--keep", action="store_true", help="keep the session open for `tell` instead of ending the run"
    )
    interrupt.add_argument("--reason", default="interrupted")
    interrupt.add_argument("--json", action="store_true")

    tell = sub.add_parser("tell", parents=[common], help="send a follow-up message into an SDK agent's session")
    tell.add_argument("memo")
    tell.add_argument("text", nargs="?", help="the message (default: standard input)")
    tell.add_argument("--json", action="store_true")

    history = sub.add_parser("history", parents=[common], help="cost and tokens per run, per role and per day")
    history.add_argument("--role")
    history.add_argument("--since", help="a date (YYYY-MM-DD) or ISO time (default: 7 days ago)")
    history.add_argument("--until", help="a date (up to its end) or ISO time")
    history.add_argument("--limit", type=int, metavar="N", help="only the newest N runs (no 7-day window)")
    history.add_argument("--all", action="store_true", help="every run on record (no 7-day window)")
    history.add_argument("--json", action="store_true")

    journal = sub.add_parser("journal", parents=[common], help="the journal: one entry per ended run")
    journal.add_argument("--role")
    journal.add_argument("--since", help="a date (YYYY-MM-DD)")
    journal.add_argument("--last", type=int, help="only the newest N entries")
    journal.add_argument("--json", action="store_true")

    handoff = sub.add_parser("handoff", parents=[common], help="a role's handoff file and its kept versions")
    handoff.add_argument("role")
    which = handoff.add_mutually_exclusive_group()
    which.add_argument("--history", action="store_true", help="list the versions with the run (seq) that wrote each")
    which.add_argument("--show", type=int, metavar="SEQ", help="print the version written by run SEQ")
    which.add_argument("--restore", type=int, metavar="SEQ", help="make the version of run SEQ the handoff again")
    handoff.add_argument("--json", action="store_true")
    send = sub.add_parser("send", parents=[common], help="write a memo into a role's inbox (for agents and people)")
    send.add_argument("--to", required=True, metavar="ROLE", help="the role that gets the memo")
    send.add_argument("text", help="the memo's text, or - to read it from standard input")
    send.add_argument("--subject", help="default: the first line of the text")
    send.add_argument("--reply-to", metavar="ID", help="the id of the memo this one answers")
    send.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    send.add_argument("--from", dest="sender", metavar="NAME", help="default: $ORCHESTRATOR_ROLE, else owner")
    send.add_argument("--strict", action="store_true", help="refuse a --reply-to that names no known memo")
    send.add_argument("--json", action="store_true")

    trace = sub.add_parser("trace", parents=[common], help="the conversation a memo belongs to, as a tree")
    trace.add_argument("memo", help="front-matter id, file name (with or without .md), or path")
    trace.add_argument("--json", action="store_true")

    logs = sub.add_parser("logs", parents=[common], help="the log of a memo's newest run, Claude's events readable")
    logs.add_argument("memo", help="front-matter id, file name (with or without .md), or path")
    logs.add_argument("--raw", action="store_true", help="the log as written (stream-json events unrendered)")

    release = sub.add_parser("release", parents=[common], help="let memos the loop breaker held run after all")
    release.add_argument("memo", nargs="?", help="front-matter id, file name (with or without .md), or path")
    release.add_argument("--role", help="only this role's held memos")
    release.add_argument("--all", action="store_true", help="every held memo that matches (with --role: all of it)")
    release.add_argument("--json", action="store_true")

    gc = sub.add_parser("gc", parents=[common], help="remove old logs, transcripts, records and memos (retention:)")
    gc.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    gc.add_argument("--reindex", action="store_true", help="rebuild the memo index (trace) from the folders first")
    gc.add_argument("--json", action="store_true")

    init = sub.add_parser("init", parents=[common], help="scaffold roles.yaml, prompts/ and memo/ for a default team")
    init.add_argument("dir", nargs="?", type=Path, default=None)

    sub.add_parser("demo", parents=[common], help="a self-contained team that needs no API key")

    schedule = sub.add_parser("schedule", parents=[common], help="per role: next tick, tasks, last wake, skips")
    schedule.add_argument("--json", action="store_true")

    wake = sub.add_parser("wake", parents=[common], help="write a wake of a role now (same picking rules)")
    wake.add_argument("role")
    wake.add_argument("--task", help="force this one task (its name, or a ledger id)")
    wake.add_argument("--json", action="store_true")

    task = sub.add_parser("task", parents=[common], help="the one-off ledger: add, list, drop")
    task_sub = task.add_subparsers(dest="task_command", required=True, parser_class=_Parser)
    task_add = task_sub.add_parser("add", parents=[common], help="a one-off task, picked like a `once` task")
    task_add.add_argument("role")
    task_add.add_argument("text")
    task_add.add_argument("--due", help="ISO 8601 time, or +DURATION such as +2h (default: now)")
    task_add.add_argument("--priority", type=int, default=None, help="higher first (default 100, as `once`)")
    task_add.add_argument("--json", action="store_true")
    task_list = task_sub.add_parser("list", parents=[common], help="the ledger's tasks, open and done")
    task_list.add_argument("--role")
    task_list.add_argument("--json", action="store_true")
    task_drop = task_sub.add_parser("drop", parents=[common], help="remove a task from the ledger")
    task_drop.add_argument("id")
    _add_ops(sub, common)
    memory_command.add_parser(sub, common)
    return parser


def _add_ops(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``service``, ``config``, ``completion`` and ``doctor``: running a team unattended."""
    service = sub.add_parser("service", parents=[common], help="run this root's team as a systemd user service")
    service_sub = service.add_subparsers(dest="service_command", required=True, parser_class=_Parser)
    install = service_sub.add_parser("install", parents=[common], help="write the unit, enable and start it")
    install.add_argument("--dry-run", action="store_true", help="print the unit and the commands; change nothing")
    service_sub.add_parser("status", parents=[common], help="systemctl --user status of the unit")
    logs = service_sub.add_parser("logs", parents=[common], help="journalctl --user -u of the unit")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument("-n", "--lines", type=int, metavar="N", help="only the last N lines")
    uninstall = service_sub.add_parser("uninstall", parents=[common], help="stop and disable it, remove the unit")
    uninstall.add_argument("--dry-run", action="store_true", help="print the commands; change nothing")

    config = sub.add_parser("config", parents=[common], help="roles.yaml as a JSON Schema, or checked and in force")
    config_sub = config.add_subparsers(dest="config_command", required=True, parser_class=_Parser)
    config_sub.add_parser("schema", parents=[common], help="print the JSON Schema of roles.yaml")
    check = config_sub.add_parser("check", parents=[common], help="the checks of `up`, then the values in force")
    check.add_argument("--json", action="store_true")

    completion = sub.add_parser("completion", parents=[common], help="print a shell's completion script")
    completion.add_argument("shell", choices=("bash", "zsh", "fish"))

    doctor = sub.add_parser("doctor", parents=[common], help="check the set-up: commands, login, folders, limits")
    doctor.add_argument("--json", action="store_true")
