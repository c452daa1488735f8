"""Every command but the client ones: the full parser and the table from a command's name to its function.

``cli.main`` comes here for ``up``, ``history``, ``memory``, ``config`` and the rest (and for a TAB in the
shell, whose answer needs the whole parser); the client commands never load this module.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from orchestrator.commands import (
    asking,
    completion,
    configuration,
    memos,
    notify,
    parser,
    project,
    records,
    running,
    schedule,
    service,
    up,
    upkeep,
)
from orchestrator.commands.common import utf8_only
from orchestrator.commands.doctor import cmd_doctor
from orchestrator.memory import command as memory_command

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "up": up.cmd_up,
    "web": up.cmd_web,
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
    "diff": memos.cmd_diff,
    "land": running.cmd_land,
    "release": memos.cmd_release,
    "ask": asking.cmd_ask,
    "answer": asking.cmd_answer,
    "gc": upkeep.cmd_gc,
    "init": project.cmd_init,
    "demo": project.cmd_demo,
    "schedule": schedule.cmd_schedule,
    "wake": running.cmd_wake,
    "task": schedule.cmd_task,
    "memory": memory_command.run,
    "service": service.cmd_service,
    "config": configuration.cmd_config,
    "completion": completion.cmd_completion,
    "doctor": cmd_doctor,
    "notify": notify.cmd_notify,
}


def run(argv: Sequence[str] | None) -> int:
    """Parse ``argv`` with the full parser and run its command (errors are ``cli.main``'s to report)."""
    completion.answer_if_asked(parser.build)  # a TAB in the shell: answers and exits
    args = memory_command.parse_alone(argv) or parser.build().parse_args(argv)  # an agent's memory call starts fast
    utf8_only(args)
    return COMMANDS[args.command](args)
