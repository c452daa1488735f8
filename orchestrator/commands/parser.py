"""The ``orchestrator`` command's arguments: one parser with a sub-parser per command; a usage mistake raises
``UsageError`` (one line, exit 2) instead of argparse's own exit."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.commands.arguments import (
    CommandParser,
    add_answer,
    add_ask,
    add_cancel,
    add_interrupt,
    add_release,
    add_send,
    add_status,
    add_stop,
    add_tell,
    add_wake,
    root_option,
    top_parser,
)
from orchestrator.core.durations import duration_argument
from orchestrator.core.text import whole_number
from orchestrator.memory import command as memory_command


def build() -> argparse.ArgumentParser:
    """The parser of every sub-command (``memory`` adds its own through ``memory_command.add_parser``)."""
    parser = top_parser()
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    common = root_option(argparse.SUPPRESS)  # after the command it may be given again; unset, it keeps the first

    up = sub.add_parser("up", parents=[common], help="watch the inboxes and run agents (foreground)")
    up.add_argument("--until-idle", action="store_true", help="exit 0 once nothing is queued or running")
    up.add_argument("--plain", action="store_true", help="plain log lines even on a terminal")
    up.add_argument("--web", metavar="[HOST:]PORT", help="serve the dashboard there (port 0: any free port)")
    up.add_argument(
        "--rerun-unfinished",
        action="store_true",
        help="start although the last up used another executor and runs it started are under way: their memos run again",
    )

    web = sub.add_parser("web", parents=[common], help="the running dashboard's URL (with its token)")
    web.add_argument("--open", action="store_true", help="open it in a browser")

    for add in (add_status, add_cancel, add_stop, add_interrupt, add_tell):
        add(sub, common)

    history = sub.add_parser("history", parents=[common], help="cost and tokens per run, per role and per day")
    history.add_argument("--role")
    history.add_argument("--since", help="a date (YYYY-MM-DD) or ISO time (default: 7 days ago)")
    history.add_argument("--until", help="a date (up to its end) or ISO time")
    history.add_argument(
        "--limit",
        type=whole_number,
        metavar="N",
        help="the newest N runs (default 50 of the last 7 days; no 7-day window)",
    )
    history.add_argument("--all", action="store_true", help="every run on record (no 7-day window, no limit)")
    history.add_argument(
        "--before",
        type=whole_number,
        metavar="RUN_ID",
        help="the page of runs before this one (`next_before` of --json)",
    )
    history.add_argument("--json", action="store_true")

    journal = sub.add_parser("journal", parents=[common], help="the journal: one entry per ended run")
    journal.add_argument("--role")
    journal.add_argument("--since", help="a date (YYYY-MM-DD)")
    journal.add_argument("--last", type=whole_number, help="only the newest N entries")
    journal.add_argument("--json", action="store_true")

    handoff = sub.add_parser("handoff", parents=[common], help="a role's handoff file and its kept versions")
    handoff.add_argument("role")
    which = handoff.add_mutually_exclusive_group()
    which.add_argument("--history", action="store_true", help="list the versions with the run (seq) that wrote each")
    which.add_argument("--show", type=whole_number, metavar="SEQ", help="print the version written by run SEQ")
    which.add_argument(
        "--restore", type=whole_number, metavar="SEQ", help="make the version of run SEQ the handoff again"
    )
    handoff.add_argument("--json", action="store_true")
    add_send(sub, common)

    trace = sub.add_parser("trace", parents=[common], help="the conversation a memo belongs to, as a tree")
    trace.add_argument("memo", help="front-matter id, file name (with or without .md), or path")
    trace.add_argument("--json", action="store_true")

    logs = sub.add_parser("logs", parents=[common], help="the log of a memo's newest run, Claude's events readable")
    logs.add_argument("memo", help="front-matter id, file name (with or without .md), or path")
    logs.add_argument("--raw", action="store_true", help="the log as written (stream-json events unrendered)")

    add_release(sub, common)
    add_ask(sub, common)
    add_answer(sub, common)

    diff = sub.add_parser("diff", parents=[common], help="what an attempt of a memo changed in its workspace")
    diff.add_argument("memo", help="front-matter id, file name (with or without .md), or path")
    diff.add_argument("--attempt", type=whole_number, metavar="N", help="this attempt (default: the latest)")
    diff.add_argument("--stat", action="store_true", help="a summary of the files changed")

    land = sub.add_parser("land", parents=[common], help="land a workspace's branch into its base, through the queue")
    land.add_argument("target", metavar="MEMO|WORKSPACE", help="a workspace's name, or a memo worked on in it")
    land.add_argument("--into", metavar="BRANCH", default="", help="the branch to land into (default: its base)")
    land.add_argument(
        "--wait",
        type=duration_argument,
        default=900.0,
        metavar="DURATION",
        help="how long to wait for the landing (default 900 s; 15m, 1h, ...)",
    )
    land.add_argument("--json", action="store_true")

    gc = sub.add_parser("gc", parents=[common], help="remove old logs, transcripts, records and memos (retention:)")
    gc.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    gc.add_argument("--reindex", action="store_true", help="rebuild the memo index (trace) from the folders first")
    gc.add_argument("--json", action="store_true")

    init = sub.add_parser("init", parents=[common], help="scaffold roles.yaml, prompts/ and memo/ for a default team")
    init.add_argument("dir", nargs="?", type=Path, default=None)

    sub.add_parser("demo", parents=[common], help="a self-contained team that needs no API key")

    schedule = sub.add_parser("schedule", parents=[common], help="per role: next tick, tasks, last wake, skips")
    schedule.add_argument("--json", action="store_true")

    add_wake(sub, common)

    task = sub.add_parser("task", parents=[common], help="the one-off ledger: add, list, drop")
    task_sub = task.add_subparsers(dest="task_command", required=True, parser_class=CommandParser)
    task_add = task_sub.add_parser("add", parents=[common], help="a one-off task, picked like a `once` task")
    task_add.add_argument("role")
    task_add.add_argument("text")
    task_add.add_argument("--due", help="ISO 8601 time, or +DURATION such as +2h (default: now)")
    task_add.add_argument("--priority", type=whole_number, default=None, help="higher first (default 100, as `once`)")
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
    service_sub = service.add_subparsers(dest="service_command", required=True, parser_class=CommandParser)
    install = service_sub.add_parser("install", parents=[common], help="write the unit, enable and start it")
    install.add_argument("--dry-run", action="store_true", help="print the unit and the commands; change nothing")
    service_sub.add_parser("status", parents=[common], help="systemctl --user status of the unit")
    logs = service_sub.add_parser("logs", parents=[common], help="journalctl --user -u of the unit")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument("-n", "--lines", type=whole_number, metavar="N", help="only the last N lines")
    uninstall = service_sub.add_parser("uninstall", parents=[common], help="stop and disable it, remove the unit")
    uninstall.add_argument("--dry-run", action="store_true", help="print the commands; change nothing")

    config = sub.add_parser("config", parents=[common], help="roles.yaml as a JSON Schema, or checked and in force")
    config_sub = config.add_subparsers(dest="config_command", required=True, parser_class=CommandParser)
    config_sub.add_parser("schema", parents=[common], help="print the JSON Schema of roles.yaml")
    check = config_sub.add_parser("check", parents=[common], help="the checks of `up`, then the values in force")
    check.add_argument("--json", action="store_true")

    notify = sub.add_parser("notify", parents=[common], help="the notification channels of roles.yaml")
    notify_sub = notify.add_subparsers(dest="notify_command", required=True, parser_class=CommandParser)
    notify_sub.add_parser("test", parents=[common], help="send a test event to every channel, print each answer")

    completion = sub.add_parser("completion", parents=[common], help="print a shell's completion script")
    completion.add_argument("shell", choices=("bash", "zsh", "fish"))

    doctor = sub.add_parser("doctor", parents=[common], help="check the set-up: commands, login, folders, limits")
    doctor.add_argument("--json", action="store_true")
