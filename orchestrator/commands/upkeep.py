"""Upkeep of a project's records: ``gc`` removes what the retention rules say is old, ``--reindex`` rebuilds the
memo index from the folders."""

from __future__ import annotations

import argparse
from datetime import datetime

from orchestrator import console
from orchestrator.commands.common import project_root


def cmd_gc(args: argparse.Namespace) -> int:
    """``orchestrator gc``: one retention pass now (``--dry-run``: list it, remove nothing)."""
    from orchestrator.config import load_config
    from orchestrator.retention import sweep

    config = load_config(project_root(args))
    result = sweep.collect(
        config.root, config.retention, datetime.now().astimezone(), dry_run=args.dry_run, reindex=args.reindex
    )
    if args.json:
        console.print_json(result)
    else:
        for line in sweep.render(result):
            console.say(line)
    return 0
