"""The arguments of the client commands (``status``, ``cancel``, ``stop``, ``interrupt``, ``tell``, ``send``,
``release``, ``wake``), and what every command's parser shares: a usage mistake raises ``UsageError`` (one line,
exit 2) instead of argparse's own exit.

``cli`` builds the parser of a client command from this module alone (argparse and the version), so such a
command starts without the rest of the CLI; ``parser.build`` adds the same sub-parsers among all the others.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from orchestrator import __version__
from orchestrator.core.errors import UsageError


def terminal_columns() -> int:
    """``shutil.get_terminal_size().columns`` without importing shutil (and the compression modules it loads,
    about 4 ms): ``$COLUMNS``, else the terminal of standard output, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class CommandParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes one for every argument added (to check its metavar); its own would import shutil
        return argparse.HelpFormatter(self.prog, width=terminal_columns() - 2)


def root_option(default: object) -> CommandParser:
    """``--root``, before the command (default None) or after it (``argparse.SUPPRESS``: an absent one must not
    overwrite ``orchestrator --root X status``'s)."""
    common = CommandParser(add_help=False)
    common.add_argument("--root", default=default, help="project root (default: the current directory)")
    return common


def top_parser() -> CommandParser:
    """``orchestrator`` itself: ``--root`` and ``--version``, before its sub-parsers are added."""
    parser = CommandParser(
        prog="orchestrator", description="Run a team of AI agents through Markdown memos.", parents=[root_option(None)]
    )
    parser.add_argument("--version", action="version", version=f"orchestrator {__version__}")
    return parser


def add_status(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``status``: what runs, what waits, what ended."""
    status = sub.add_parser("status", parents=[common], help="what runs, what waits, what ended")
    status.add_argument("--json", action="store_true")


def add_cancel(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``cancel``: a memo's, or a role's, work."""
    cancel = sub.add_parser("cancel", parents=[common], help="stop a memo's work at any stage")
    cancel.add_argument("memo", nargs="?", help="front-matter id, file name (with or without .md), or path")
    cancel.add_argument("--role", help="cancel all of this role's queued and running work")
    cancel.add_argument("--reason", default="", help="why; recorded and told to the notify role")
    cancel.add_argument("--all", action="store_true", help="cancel every memo that matches")
    cancel.add_argument("--json", action="store_true")


def add_stop(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``stop``: end the orchestrator, gracefully or by force."""
    stop = sub.add_parser("stop", parents=[common], help="end the orchestrator: running agents finish")
    stop.add_argument("--force", action="store_true", help="kill every agent now and return their memos to the inbox")
    stop.add_argument("--wait", action="store_true", help="return only when the orchestrator has exited")
    stop.add_argument(
        "--timeout",
        metavar="DURATION",
        help="wait at most this long (5s, 10m, ...; implies --wait), then exit 11 naming what still runs "
        "(default: the longest role timeout + grace + 30s)",
    )


def add_interrupt(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``interrupt``: end an SDK agent's turn."""
    interrupt = sub.add_parser("interrupt", parents=[common], help="end an SDK agent's current turn")
    interrupt.add_argument("memo")
    interrupt.add_argument(
        "--keep", action="store_true", help="keep the session open for `tell` instead of ending the run"
    )
    interrupt.add_argument("--reason", default="interrupted")
    interrupt.add_argument("--json", action="store_true")


def add_tell(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``tell``: a follow-up message into an SDK agent's session."""
    tell = sub.add_parser("tell", parents=[common], help="send a follow-up message into an SDK agent's session")
    tell.add_argument("memo")
    tell.add_argument("text", nargs="?", help="the message (default: standard input)")
    tell.add_argument("--json", action="store_true")


def add_send(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``send``: a memo into a role's inbox."""
    send = sub.add_parser("send", parents=[common], help="write a memo into a role's inbox (for agents and people)")
    send.add_argument("--to", required=True, metavar="ROLE", help="the role that gets the memo")
    send.add_argument("text", help="the memo's text, or - to read it from standard input")
    send.add_argument("--subject", help="default: the first line of the text")
    send.add_argument("--reply-to", metavar="ID", help="the id of the memo this one answers")
    send.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    send.add_argument("--from", dest="sender", metavar="NAME", help="default: owner; an agent's memo is from its role")
    send.add_argument("--strict", action="store_true", help="refuse a --reply-to that names no known memo")
    send.add_argument("--json", action="store_true")


def add_release(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``release``: memos the loop breaker held."""
    release = sub.add_parser("release", parents=[common], help="let memos the loop breaker held run after all")
    release.add_argument("memo", nargs="?", help="front-matter id, file name (with or without .md), or path")
    release.add_argument("--role", help="only this role's held memos")
    release.add_argument("--all", action="store_true", help="every held memo that matches (with --role: all of it)")
    release.add_argument("--json", action="store_true")


def add_wake(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``wake``: a wake of a role now."""
    wake = sub.add_parser("wake", parents=[common], help="write a wake of a role now (same picking rules)")
    wake.add_argument("role")
    wake.add_argument("--task", help="force this one task (its name, or a ledger id)")
    wake.add_argument("--json", action="store_true")


def add_ask(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``ask``: an agent asks a person and its run waits."""
    ask = sub.add_parser("ask", parents=[common], help="(for agents) ask a person; the run waits for the answer")
    ask.add_argument("question", nargs="*", help="the question (- reads it from standard input)")


def add_answer(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``answer``: a person answers a waiting run's question, or allows or denies its tool call."""
    answer = sub.add_parser("answer", parents=[common], help="answer a run waiting in waiting/ (or allow or deny)")
    answer.add_argument("memo", help="front-matter id, file name (with or without .md), or path")
    answer.add_argument("text", nargs="?", help="the answer to a question (- reads it from standard input)")
    which = answer.add_mutually_exclusive_group()
    which.add_argument("--allow", action="store_true", help="approve the tool call it waits on")
    which.add_argument("--deny", action="store_true", help="refuse the call (or the question); see --note")
    answer.add_argument("--note", help="what the agent is told with --deny")
    answer.add_argument("--json", action="store_true")


#: each client command's sub-parser, by the command's name
CLIENT_COMMANDS: dict[str, Callable[[argparse._SubParsersAction, argparse.ArgumentParser], None]] = {
    "status": add_status,
    "cancel": add_cancel,
    "stop": add_stop,
    "interrupt": add_interrupt,
    "tell": add_tell,
    "send": add_send,
    "release": add_release,
    "wake": add_wake,
    "ask": add_ask,
    "answer": add_answer,
}


def client_parser(command: str) -> argparse.ArgumentParser:
    """The parser of ``orchestrator [--root R] COMMAND ...`` for one client command: its arguments, its help and
    its usage errors are those of the full parser."""
    parser = top_parser()
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    CLIENT_COMMANDS[command](sub, root_option(argparse.SUPPRESS))
    return parser
