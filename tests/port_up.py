#!/usr/bin/env python3
"""``orchestrator up`` with the test-only ``PortFeature`` composed in (``app.run_up(more=...)``): the argv is the
real command's (``up --plain --root ROOT [--web HOST:PORT]``), so ``tests/conftest.Project`` runs it like the real one."""

import argparse
import sys
from pathlib import Path

from port_feature import PortFeature

from orchestrator.app import run_up
from orchestrator.core.errors import OrchestratorError


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["up"])
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--web")
    args = parser.parse_args()
    try:
        return run_up(args.root.resolve(), plain=args.plain, web=args.web, more=(PortFeature,))
    except OrchestratorError as exc:
        print(f"orchestrator: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
