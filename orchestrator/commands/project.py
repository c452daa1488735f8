"""A new project: ``init`` scaffolds one, ``demo`` runs a self-contained team."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator import console


def cmd_init(args: argparse.Namespace) -> int:
    """``orchestrator init``: scaffold ``roles.yaml``, ``prompts/`` and ``memo/`` for a default team."""
    from orchestrator.scaffold import init_project

    target = Path(args.dir or args.root or Path.cwd()).resolve()
    done = init_project(target)
    for path in done.created:
        console.say(f"created {path}")
    for path in done.kept:
        console.say(f"kept    {path} (already there)")
    for line in done.said:
        console.say(line)
    console.say(f"next: edit {target / 'roles.yaml'} and the prompts, then run `orchestrator up --root {target}`")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``orchestrator demo``: a self-contained team that needs no API key."""
    from orchestrator.demo import run_demo

    return run_demo()
