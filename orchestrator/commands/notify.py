"""``orchestrator notify test``: a test event to every channel of ``notifications:``, one line per answer."""

from __future__ import annotations

import argparse

from orchestrator import console
from orchestrator.commands.common import project_root


def cmd_notify(args: argparse.Namespace) -> int:
    """One line per channel (``ok``/``fail``, what it answered); exit 11 when one did not take it."""
    from orchestrator.config import load_config
    from orchestrator.notify.probe import NOT_DELIVERED, probe_channels

    results = probe_channels(load_config(project_root(args)))
    for result in results:
        console.say(result.line)
    return 0 if all(result.delivered for result in results) else NOT_DELIVERED
