"""The schedule: ``schedule`` (per role: next tick, tasks, last wake) and the one-off ledger (``task add|list|drop``);
``wake`` asks the running orchestrator (``running``)."""

from __future__ import annotations

import argparse

from orchestrator import console
from orchestrator.commands.common import project_root, show


def cmd_schedule(args: argparse.Namespace) -> int:
    """``orchestrator schedule``: per role, the next tick, its tasks, the last wake and the skips."""
    from orchestrator.config import load_config
    from orchestrator.schedule import view

    report = view.schedule(load_config(project_root(args)))
    return show(args.json, report, view.print_schedule)


def cmd_task(args: argparse.Namespace) -> int:
    """``orchestrator task add|list|drop``: the one-off ledger."""
    from orchestrator.config import load_config
    from orchestrator.control import permission
    from orchestrator.schedule import view

    root = project_root(args)
    if args.task_command in ("add", "drop"):
        permission.require(root, f"task {args.task_command}", getattr(args, "role", None))
    config = load_config(root)
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
