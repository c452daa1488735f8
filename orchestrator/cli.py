"""The command line: parse arguments, call one core function, turn errors into an exit status once."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator import __version__, console
from orchestrator.core.errors import NotRunningError, OrchestratorError, UsageError
from orchestrator.memory import command as memory_command


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def _parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--root", type=Path, default=None, help="project root (default: the current directory)")
    parser = _Parser(
        prog="orchestrator", description="Run a team of AI agents through Markdown memos.", parents=[common]
    )
    parser.add_argument("--version", action="version", version=f"orchestrator {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    up = sub.add_parser("up", parents=[common], help="watch the inboxes and run agents (foreground)")
    up.add_argument("--until-idle", action="store_true", help="exit 0 once nothing is queued or running")
    up.add_argument("--plain", action="store_true", help="plain log lines even on a terminal")

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
    history.add_argument("--since", help="a date (YYYY-MM-DD) or ISO time")
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

    release = sub.add_parser("release", parents=[common], help="let memos the loop breaker held run after all")
    release.add_argument("memo", nargs="?", help="front-matter id, file name (with or without .md), or path")
    release.add_argument("--role", help="only this role's held memos")
    release.add_argument("--all", action="store_true", help="every held memo that matches (with --role: all of it)")
    release.add_argument("--json", action="store_true")

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
    memory_command.add_parser(sub, common)
    return parser


def _root(args: argparse.Namespace) -> Path:
    return (args.root or Path.cwd()).resolve()


def _who() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name is no reason to fail
        user = str(os.getuid())
    return f"{user} (pid {os.getpid()})"


def cmd_up(args: argparse.Namespace) -> int:
    from orchestrator.app import run_up

    return run_up(_root(args), until_idle=args.until_idle, plain=args.plain)


def cmd_status(args: argparse.Namespace) -> int:
    from orchestrator.control import status

    snap = status.collect(_root(args))
    if args.json:
        console.print_json(snap)
    else:
        console.print_status(snap)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from orchestrator.control import channel as control

    if not args.memo and not args.role:
        raise UsageError("orchestrator cancel: name a memo (id, file name or path) or use --role ROLE")
    if args.memo and args.role:
        raise UsageError("orchestrator cancel: name a memo or use --role ROLE, not both")
    memo = args.memo
    if memo and os.sep in memo:
        memo = str(Path(memo).resolve())
    result = control.call(
        _root(args), "cancel", timeout=None, memo=memo, role=args.role, reason=args.reason, all=args.all, who=_who()
    )
    if args.json:
        console.print_json(result)
        return 0
    items = result.get("cancelled", [result]) if "cancelled" in result else [result]
    if not items:
        console.say(result.get("message", "nothing to cancel"))
    for item in items:
        console.say(_describe_cancel(item))
    return 0


def _describe_cancel(item: dict[str, Any]) -> str:
    if item.get("note"):
        return f"{item['memo']}: {item['note']}; it is cancelled now"
    memos = item.get("memos") or [item.get("memo")]
    held = f"; the batch run held {', '.join(memos)}" if len(memos) > 1 else ""
    if item.get("previous_state") in ("running", "timing_out"):
        how = f"{len(item.get('pids', []))} process(es) ended {item.get('pids')} in {item.get('seconds', 0):.2f}s" + (
            " (needed SIGKILL)" if item.get("escalated") else ""
        )
    else:
        how = "it never ran" if item.get("previous_state") == "queued" else "its retry will not happen"
    survivors = f"; WARNING: still alive after SIGKILL: {item['survivors']}" if item.get("survivors") else ""
    return (
        f"cancelled {item.get('memo_id') or item['memo']} ({item['role']}, was {item['previous_state']}): {how}{held}; "
        f"moved to memo/{item['role']}/cancelled/{survivors}"
    )


def cmd_stop(args: argparse.Namespace) -> int:
    from orchestrator.control import channel as control

    root = _root(args)
    before = control.call(root, "status")
    control.call(root, "stop", force=args.force, who=_who())
    running = before.get("limits", {}).get("running", 0)
    if args.force:
        console.say(f"orchestrator (pid {before.get('pid')}) is killing {running} agent(s) and returning their memos")
    else:
        console.say(
            f"orchestrator (pid {before.get('pid')}) is ending: {running} running agent(s) finish, nothing new starts"
        )
    if args.wait or args.force:
        _wait_for_exit(root)
    return 0


def _wait_for_exit(root: Path) -> None:
    from orchestrator.control import channel as control

    while True:
        try:
            control.call(root, "status", timeout=5)
        except NotRunningError:
            return
        except OrchestratorError:
            pass
        time.sleep(0.1)


def cmd_interrupt(args: argparse.Namespace) -> int:
    from orchestrator.control import channel as control

    result = control.call(
        _root(args), "interrupt", timeout=None, memo=args.memo, keep=args.keep, reason=args.reason, who=_who()
    )
    if args.json:
        console.print_json(result)
    else:
        console.say(
            f"interrupted {args.memo} (run {result.get('run_id')}, role {result.get('role')}): now {result.get('state')}"
        )
    return 0


def cmd_tell(args: argparse.Namespace) -> int:
    from orchestrator.control import channel as control

    text = args.text if args.text is not None else sys.stdin.read()
    if not text.strip():  # here, not in the orchestrator: the control channel would turn it into a plain refusal
        raise UsageError("orchestrator tell: nothing to tell: give the text as an argument or on standard input")
    result = control.call(_root(args), "tell", memo=args.memo, text=text, who=_who())
    if args.json:
        console.print_json(result)
    else:
        console.say(f"told {args.memo} (run {result.get('run_id')}, role {result.get('role')})")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from orchestrator.control import history

    report = history.collect(_root(args), role=args.role, since=args.since)
    if args.json:
        console.print_json(report)
    else:
        console.print_history(report)
    return 0


def cmd_journal(args: argparse.Namespace) -> int:
    from orchestrator.continuity import commands

    entries = commands.journal_entries(_root(args), role=args.role, since=args.since, last=args.last)
    if args.json:
        console.print_json(entries)
    else:
        console.print_journal(entries)
    return 0


def cmd_handoff(args: argparse.Namespace) -> int:
    from orchestrator.continuity import commands

    root = _root(args)
    result: Any
    if args.history:
        result = commands.handoff_history(root, args.role)
    elif args.show is not None:
        result = {"role": args.role, "seq": args.show, "text": commands.handoff_version(root, args.role, args.show)}
    elif args.restore is not None:
        result = commands.handoff_restore(root, args.role, args.restore)
    else:
        result = commands.handoff_current(root, args.role)
    if args.json:
        console.print_json(result)
    else:
        console.print_handoff(result)
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    from orchestrator.tools.send import send

    # an agent runs anywhere: its own root comes from its environment when --root is not given
    root = (args.root or Path(os.environ.get("ORCHESTRATOR_ROOT") or Path.cwd())).resolve()
    text = sys.stdin.read() if args.text == "-" else args.text
    result = send(
        root,
        args.to,
        text,
        subject=args.subject,
        reply_to=args.reply_to,
        tags=args.tag,
        sender=args.sender,
        strict=args.strict,
    )
    if result.warning:
        console.fail(result.warning)
    if args.json:
        console.print_json({"id": result.memo_id, "path": str(result.path), "warning": result.warning})
    else:
        console.say(str(result.path))
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from orchestrator.tools import trace

    memo = str(Path(args.memo).resolve()) if os.sep in args.memo else args.memo
    report = trace.trace(_root(args), memo)
    if args.json:
        console.print_json(report)
    else:
        for line in trace.render(report):
            console.say(line)
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    from orchestrator.tools.release import release

    memo = str(Path(args.memo).resolve()) if args.memo and os.sep in args.memo else args.memo
    done = release(_root(args), memo, role=args.role, every=args.all, who=_who())
    if args.json:
        console.print_json({"released": done})
        return 0
    if not done:
        console.say(f"nothing to release: memo/{args.role}/held/ is empty")
    for item in done:
        console.say(
            f"released {item['from']} -> memo/{item['role']}/inbox/{item['memo']}; it runs and is not held again"
        )
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from orchestrator.scaffold import init_project

    target = (args.dir or args.root or Path.cwd()).resolve()
    created, kept = init_project(target)
    for path in created:
        console.say(f"created {path}")
    for path in kept:
        console.say(f"kept    {path} (already there)")
    console.say(f"next: edit {target / 'roles.yaml'} and the prompts, then run `orchestrator up --root {target}`")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from orchestrator.demo import run_demo

    return run_demo()


def cmd_schedule(args: argparse.Namespace) -> int:
    from orchestrator.config import load_config
    from orchestrator.schedule import view

    report = view.schedule(load_config(_root(args)))
    if args.json:
        console.print_json(report)
    else:
        console.print_schedule(report)
    return 0


def cmd_wake(args: argparse.Namespace) -> int:
    from orchestrator.control import channel as control

    result = control.call(_root(args), "wake", timeout=120, role=args.role, task=args.task, who=_who())
    if args.json:
        console.print_json(result)
    else:
        console.say(f"wrote {result['memo']} for {result['role']}: tasks {', '.join(result['tasks']) or '(none)'}")
    return 0


def cmd_task(args: argparse.Namespace) -> int:
    from orchestrator.config import load_config
    from orchestrator.schedule import view

    config = load_config(_root(args))
    if args.task_command == "add":
        row = view.add_task(config, args.role, args.text, args.due, args.priority)
        if args.json:
            console.print_json(row)
        else:
            console.say(f"added {row['id']} for {row['role']}, due {row['due_at']}")
    elif args.task_command == "list":
        rows = view.list_tasks(config, args.role)
        if args.json:
            console.print_json({"tasks": rows})
        else:
            for row in rows:
                state = f"done {row['done_at']} (run {row['seq']})" if row["done_at"] else "open"
                console.say(
                    f"{row['id']}  {row['role']}  due {row['due_at']}  p{row['priority']}  {state}  {row['text']}"
                )
    else:
        view.drop_task(config, args.id)
        console.say(f"dropped {args.id}")
    return 0


COMMANDS = {
    "up": cmd_up,
    "status": cmd_status,
    "cancel": cmd_cancel,
    "stop": cmd_stop,
    "interrupt": cmd_interrupt,
    "tell": cmd_tell,
    "history": cmd_history,
    "journal": cmd_journal,
    "handoff": cmd_handoff,
    "send": cmd_send,
    "trace": cmd_trace,
    "release": cmd_release,
    "init": cmd_init,
    "demo": cmd_demo,
    "schedule": cmd_schedule,
    "wake": cmd_wake,
    "task": cmd_task,
    "memory": memory_command.run,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``orchestrator`` command; every error becomes one line and an exit status."""
    try:
        args = memory_command.parse_alone(argv) or _parser().parse_args(argv)  # an agent's memory call starts fast
        return COMMANDS[args.command](args)
    except OrchestratorError as exc:
        console.fail(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        console.fail("interrupted")
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
