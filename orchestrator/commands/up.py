"""``orchestrator up``: the orchestrator itself, in the foreground."""

from __future__ import annotations

import argparse

from orchestrator.commands.common import project_root


def cmd_up(args: argparse.Namespace) -> int:
    """``orchestrator up``: run the orchestrator in the foreground until it is stopped (or idle, with ``--until-idle``)."""
    # the supervisor loads only for `up`: the full parser (a TAB in the shell asks it) stays light
    from orchestrator.app import run_up

    return run_up(
        project_root(args),
        until_idle=args.until_idle,
        plain=args.plain,
        web=args.web,
        rerun_unfinished=args.rerun_unfinished,
    )


def cmd_web(args: argparse.Namespace) -> int:
    """``orchestrator web``: the running dashboard's URL with its token; ``--open`` opens it in a browser."""
    from orchestrator import console
    from orchestrator.web import locate

    url = locate.url(project_root(args))
    if args.open:
        locate.open_in_browser(url)
    console.say(url)
    return 0
