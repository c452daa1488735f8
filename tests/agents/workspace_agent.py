#!/usr/bin/env python3
"""The agent of ``tests/test_workspaces.py``: records where it works, then does its memo's body, one command a line.

``write FILE TEXT`` writes FILE in its folder; ``commit`` commits all it has with git; ``see FILE`` records
whether FILE is in its folder and what it holds; ``send ROLE TEXT`` runs ``orchestrator send ROLE TEXT`` from its
folder (no ``--root``); ``land TARGET`` runs ``orchestrator land TARGET`` and records its exit and error;
``wait NAME`` waits until NAME exists in the project root; ``ask-unless NAME QUESTION`` runs ``orchestrator ask
QUESTION`` and ends the run (exit 0) unless NAME exists in the project root; ``fail-first`` exits 1 on
the first attempt (doing no more); ``rebase-first BRANCH`` runs ``git rebase BRANCH`` on the first attempt and ends
there (exit 0, a rebase stopped at a conflict left as it is); ``exit N`` exits N. Its record is one JSON line in ``$WS_RECORD``, written before it waits.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

DEADLINE = 30.0


def main() -> int:
    memo = Path(os.environ["ORCHESTRATOR_MEMO"]).read_text(encoding="utf-8")
    body = memo.split("---\n")[-1] if memo.startswith("---") else memo
    env = {key: value for key, value in os.environ.items() if key.startswith("ORCHESTRATOR_")}
    record = {
        "cwd": os.getcwd(),
        "env": env,
        "memo": Path(env["ORCHESTRATOR_MEMO"]).name,
        "seen": {},
        "pid": os.getpid(),
    }
    code = 0
    root = Path(env["ORCHESTRATOR_ROOT"])
    for line in body.splitlines():
        words = line.split(maxsplit=2)
        if not words:
            continue
        if words[0] == "write":
            Path(words[1]).write_text(words[2] + "\n", encoding="utf-8")
        elif words[0] == "commit":
            subprocess.run(["git", "add", "--all"], check=True)
            subprocess.run(["git", "commit", "--quiet", "-m", "the agent's own commit"], check=True)
        elif words[0] == "see":
            found = Path(words[1])
            record["seen"][words[1]] = found.read_text(encoding="utf-8").strip() if found.exists() else None
        elif words[0] == "send":
            sent = subprocess.run(
                [sys.executable, "-m", "orchestrator", "send", "--to", words[1], words[2]],
                capture_output=True,
                text=True,
            )
            record["sent"] = sent.returncode
        elif words[0] == "land":
            landed = subprocess.run(
                [sys.executable, "-m", "orchestrator", "land", words[1]], capture_output=True, text=True
            )
            record["land"] = {"code": landed.returncode, "err": landed.stderr}
        elif words[0] == "wait":
            _record(record)
            record = {}
            end = time.monotonic() + DEADLINE
            while not (root / words[1]).exists() and time.monotonic() < end:
                time.sleep(0.02)
        elif words[0] == "ask-unless" and not (root / words[1]).exists():
            subprocess.run([sys.executable, "-m", "orchestrator", "ask", words[2]], check=True, capture_output=True)
            break
        elif words[0] == "rebase-first" and env["ORCHESTRATOR_ATTEMPT"] == "1":
            subprocess.run(["git", "rebase", words[1]], capture_output=True)
            break
        elif words[0] == "fail-first" and env["ORCHESTRATOR_ATTEMPT"] == "1":
            code = 1
            break
        elif words[0] == "exit":
            code = int(words[1])
    if record:
        _record(record)
    return code


def _record(record: dict[str, object]) -> None:
    with open(os.environ["WS_RECORD"], "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    sys.exit(main())
