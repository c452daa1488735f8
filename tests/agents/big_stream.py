#!/usr/bin/env python3
"""A Claude-shaped stand-in with a long stream: answers ``--version`` like Claude Code; otherwise reads its prompt,
writes ``--mb`` megabytes (default 50) of stream-json events (an init, assistant messages with text and tool uses,
their tool results) ending with a successful result event, and exits 0.

The tests' slow-callback check and the benchmark's big-end scenario run it as a role's ``claude`` command.
"""

import json
import os
import sys


def main() -> int:
    argv = sys.argv[1:]
    if "--version" in argv:
        print("2.1.0 (Claude Code)")
        return 0
    megabytes = float(argv[argv.index("--mb") + 1]) if "--mb" in argv else 50.0
    sys.stdin.read()
    session = "big-stream-session"
    lines = [{"type": "system", "subtype": "init", "session_id": session, "model": "stand-in", "tools": ["Bash"]}]
    text = "Reading the next part of the repository and noting what it does. " * 20
    step = [
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "text", "text": text},
                    {"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "cat part.txt"}},
                ]
            },
            "session_id": session,
        },
        {
            "type": "user",
            "message": {"content": [{"type": "tool_result", "tool_use_id": "t", "content": text}]},
            "session_id": session,
        },
    ]
    chunk = "".join(json.dumps(event) + "\n" for event in step * 64).encode()
    os.write(1, "".join(json.dumps(event) + "\n" for event in lines).encode())
    written, target = 0, int(megabytes * 1024 * 1024)
    while written < target:
        view = memoryview(chunk)
        while view:
            view = view[os.write(1, view) :]
        written += len(chunk)
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "Read the whole repository.\nDone.",
        "num_turns": 1,
        "total_cost_usd": 0.01,
        "usage": {"input_tokens": 100, "output_tokens": 10},
        "permission_denials": [],
        "session_id": session,
    }
    os.write(1, (json.dumps(result) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
