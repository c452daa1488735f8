#!/usr/bin/env python3
"""A stand-in agent that always answers: it replies to its memo with `orchestrator send` to $PEER, forever.

Two roles running it bounce memos back and forth, each a reply to the last: the runaway loop
the breaker must stop. Every start appends one JSON line to $STANDIN_RECORD.
"""

import json
import os
import subprocess
import sys

import yaml


def main():
    sys.stdin.read()
    path = os.environ["ORCHESTRATOR_MEMO"]
    text = open(path, encoding="utf-8").read()
    front = yaml.safe_load(text.split("---", 2)[1]) if text.startswith("---") else {}
    with open(os.environ["STANDIN_RECORD"], "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"role": os.environ["ORCHESTRATOR_ROLE"], "memo": os.path.basename(path)}) + "\n")
    sent = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "send",
            "--to",
            os.environ["PEER"],
            "--reply-to",
            str(front["id"]),
            "--subject",
            f"re: {front.get('subject', '')}"[:60],
            "ping",
        ],
        capture_output=True,
        text=True,
    )
    sys.stderr.write(sent.stderr)
    sys.exit(sent.returncode)


if __name__ == "__main__":
    main()
