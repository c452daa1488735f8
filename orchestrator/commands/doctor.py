"""``orchestrator doctor [--json]``: the set-up checked before the first memo finds what is wrong with it."""

from __future__ import annotations

import argparse

from orchestrator import console
from orchestrator.commands.common import project_root


def cmd_doctor(args: argparse.Namespace) -> int:
    """One line per check (``ok``/``warn``/``fail`` and what to do), or a JSON list; exit 1 when one fails."""
    from orchestrator.ops import doctor

    findings = doctor.diagnose(project_root(args))
    if args.json:
        console.print_json([finding.to_json() for finding in findings])
    else:
        for finding in findings:
            console.say(finding.line)
        console.say(doctor.summary(findings))
    return doctor.exit_status(findings)
