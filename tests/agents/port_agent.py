#!/usr/bin/env python3
"""The agent of ``tests/test_port.py``: records where and how it was started, then does what its memo's body says.

It appends one JSON line to ``$PORT_RECORD`` (its folder, its arguments, ``$PORT_FOLDER``), then, by the body's
first word: ``park`` writes ``park.txt`` in its folder (the test feature parks the run), ``wrong`` exits 3 (the
feature fails it), ``ask ROLE`` sends the feature's ``port_folders`` request about ROLE over the control socket
and records the answer or the refusal; anything else exits 0.
"""

import json
import os
import sys
from pathlib import Path

from orchestrator.control import client
from orchestrator.core.errors import OrchestratorError


def main() -> int:
    memo = Path(os.environ["ORCHESTRATOR_MEMO"]).read_text(encoding="utf-8")
    words = memo.split("---")[-1].split()
    record = {"cwd": os.getcwd(), "argv": sys.argv[1:], "folder": os.environ.get("PORT_FOLDER"), "words": words}
    if words[:1] == ["park"]:
        Path("park.txt").write_text("which of the two designs?\n", encoding="utf-8")
    elif words[:1] == ["ask"]:
        try:
            record["answer"] = client.call(Path(os.environ["ORCHESTRATOR_ROOT"]), "port_folders", role=words[1])
        except OrchestratorError as exc:
            record["refused"] = str(exc)
    with open(os.environ["PORT_RECORD"], "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
    return 3 if words[:1] == ["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
