"""The command line: parse arguments, call one core function, turn errors into an exit status once."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from orchestrator import console
from orchestrator.commands import (
    completion,
    configuration,
    memos,
    parser,
    project,
    records,
    running,
    schedule,
    service,
    upkeep,
)
from orchestrator.commands.doctor import cmd_doctor
from orchestrator.core.errors import OrchestratorError
from orchestrator.memory import command as memory_command

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "up": running.cmd_up,
    "web": running.cmd_web,
    "status": running.cmd_status,
    "cancel": running.cmd_cancel,
    "stop": running.cmd_stop,
    "interrupt": running.cmd_interrupt,
    "tell": running.cmd_tell,
    "history": records.cmd_history,
    "journal": records.cmd_journal,
    "handoff": records.cmd_handoff,
    "send": memos.cmd_send,
    "trace": memos.cmd_trace,
    "logs": memos.cmd_logs,
    "release": memos.cmd_release,
    "gc": upkeep.cmd_gc,
    "init": project.cmd_init,
    "demo": project.cmd_demo,
    "schedule": schedule.cmd_schedule,
    "wake": schedule.cmd_wake,
    "task": schedule.cmd_task,
    "memory": memory_command.run,
    "service": service.cmd_service,
    "config": configuration.cmd_config,
    "completion": completion.cmd_completion,
    "doctor": cmd_doctor,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``orchestrator`` command; every error becomes one line and an exit status."""
    try:
        completion.answer_if_asked(parser.build)  # a TAB in the shell: answers and exits
        args = memory_command.parse_alone(argv) or parser.build().parse_args(argv)  # an agent's memory call starts fast
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
