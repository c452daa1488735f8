"""What ended: ``history`` (cost and tokens per run), ``journal`` and ``handoff``."""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.commands.common import project_root, show


def cmd_history(args: argparse.Namespace) -> int:
    """``orchestrator history``: cost and tokens per run, per role and per day."""
    from orchestrator.control import history

    report = history.collect(
        project_root(args),
        role=args.role,
        since=args.since,
        until=args.until,
        limit=args.limit,
        every=args.all,
        before=args.before,
    )
    from orchestrator.control.history_view import print_history

    return show(args.json, report, print_history)


def cmd_journal(args: argparse.Namespace) -> int:
    """``orchestrator journal``: the journal, one entry per ended run."""
    from orchestrator.continuity import commands

    entries = commands.journal_entries(project_root(args), role=args.role, since=args.since, last=args.last)
    return show(args.json, entries, commands.print_journal)


def cmd_handoff(args: argparse.Namespace) -> int:
    """``orchestrator handoff``: a role's handoff file, its kept versions, or one of them restored."""
    from orchestrator.continuity import commands
    from orchestrator.control import permission

    root = project_root(args)
    permission.require(root, "handoff --restore" if args.restore is not None else "handoff", args.role)
    result: Any
    if args.history:
        result = commands.handoff_history(root, args.role)
    elif args.show is not None:
        result = {"role": args.role, "seq": args.show, "text": commands.handoff_version(root, args.role, args.show)}
    elif args.restore is not None:
        result = commands.handoff_restore(root, args.role, args.restore)
    else:
        result = commands.handoff_current(root, args.role)
    return show(args.json, result, commands.print_handoff)
