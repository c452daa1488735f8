"""The command line: parse arguments, call one core function, turn errors into an exit status once.

Two layers start here. A client command (``status``, ``cancel``, ``stop``, ``interrupt``, ``tell``, ``wake``,
``send``, ``release``) is parsed by its own sub-parser (``commands.arguments``) and run from modules that
import the standard library only: it asks the running orchestrator, or acts on files, and its start-up is
Python's own. Every other command loads the full CLI (``commands.dispatch``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from orchestrator import console
from orchestrator.commands import arguments, asking, memos, running
from orchestrator.commands.common import utf8_only
from orchestrator.commands.completion import ASKING
from orchestrator.core.errors import OrchestratorError

INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE: what no error of ours is
PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
CLIENT: dict[str, Callable[[argparse.Namespace], int]] = {
    "status": running.cmd_status,
    "cancel": running.cmd_cancel,
    "stop": running.cmd_stop,
    "interrupt": running.cmd_interrupt,
    "tell": running.cmd_tell,
    "wake": running.cmd_wake,
    "send": memos.cmd_send,
    "release": memos.cmd_release,
    "ask": asking.cmd_ask,
    "answer": asking.cmd_answer,
}


def client_command(argv: Sequence[str]) -> str | None:
    """The client command ``argv`` names (after an optional ``--root R``), or None: another command, an option
    only the full parser knows (``--help``, ``--version``), or a shell asking for completions."""
    if ASKING in os.environ:
        return None
    words = list(argv)
    if words[:1] == ["--root"]:
        words = words[2:]
    elif words[:1] and words[0].startswith("--root="):
        words = words[1:]
    return words[0] if words and words[0] in CLIENT else None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``orchestrator`` command; every error becomes one line and an exit status."""
    try:
        words = sys.argv[1:] if argv is None else argv
        command = client_command(words)
        if command is not None:
            return CLIENT[command](utf8_only(arguments.client_parser(command).parse_args(words)))
        if list(words[:1]) == ["memory"] and ASKING not in os.environ:
            # an agent's memory call starts without the rest of the CLI: memory's own parser, memory's own code
            from orchestrator.memory import command as memory_command

            memory_args = memory_command.parse_alone(words)
            if memory_args is not None:
                return memory_command.run(utf8_only(memory_args))
        # every other command needs the whole CLI; importing it here keeps it off the client commands' path
        from orchestrator.commands import dispatch

        return dispatch.run(argv)
    except OrchestratorError as exc:
        console.fail(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        console.fail("interrupted")
        return 130
    except BrokenPipeError:
        return 1
    except OSError as exc:  # the machine's answer we did not expect (a full disk, a permission): its own words
        where = f"{exc.filename}: " if exc.filename else ""
        console.fail(f"{where}{exc.strerror or exc} (at {_where(exc)}{_kept(exc)})")
        return 1
    except Exception as exc:  # noqa: BLE001 - a bug of ours: one line that names it, never a traceback
        console.fail(f"internal error: {internal_line(exc)}; this is a bug, please report it{_kept(exc)}")
        return INTERNAL_ERROR


def internal_line(exc: BaseException) -> str:
    """An unexpected exception in one line: its type, its text and where it was raised."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}{': ' + text[0] if text else ''} at {_where(exc)}"


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame that is not a library's (Python's own or another installed package),
    where a bug is looked for."""
    import sysconfig
    import traceback  # here, as tempfile below: a client command's start-up is only what it needs (about 8 ms)

    paths = sysconfig.get_paths()
    libraries = tuple({os.path.join(paths[k], "") for k in ("stdlib", "platstdlib", "purelib", "platlib")})
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f.filename.startswith(PACKAGE) or not f.filename.startswith(libraries)] or frames
    return f"{os.path.basename(ours[-1].filename)}:{ours[-1].lineno}" if ours else "?"


def _kept(exc: BaseException) -> str:
    """The whole traceback, written to a file of its own (owner only) for the report: "; the traceback is in F"."""
    import tempfile
    import traceback

    try:
        fd, path = tempfile.mkstemp(prefix="orchestrator-crash-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("".join(traceback.format_exception(exc)))
    except OSError:
        return ""
    return f"; the traceback is in {path}"


if __name__ == "__main__":
    sys.exit(main())
