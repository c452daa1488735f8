#!/usr/bin/env python3
"""A stand-in agent for the tests: records what it was given, then behaves as its memo says.

Behaviour comes from an ``agent:`` mapping in the memo's front matter (first memo
for batch roles), with defaults from STANDIN_* environment variables:
  sleep: seconds to work          exit: exit status
  fail_attempts: exit 1 while ORCHESTRATOR_ATTEMPT <= this
  ignore_term: ignore SIGTERM     grandchild: start a sleeping grandchild (same group)
  orphan: start a grandchild, then its parent exits (the grandchild stays in the group)
  setsid: start a grandchild that leaves the group with setsid
  reply: {to: role, subject: s}   write a reply memo before exiting
Every start appends one JSON line to $STANDIN_RECORD.
"""

import json
import os
import signal
import subprocess
import sys
import time

import yaml


def front(path):
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return {}
    if not text.startswith("---"):
        return {}
    try:
        data = yaml.safe_load(text.split("---", 2)[1])
    except Exception:
        return {}
    return data if isinstance(data, dict) else {}


def main():
    started = time.time()
    prompt = sys.stdin.read() if os.environ.get("STANDIN_PROMPT_VIA", "stdin") == "stdin" else sys.argv[-1]
    memos = (os.environ.get("ORCHESTRATOR_MEMOS") or os.environ.get("ORCHESTRATOR_MEMO") or "").splitlines()
    spec = {}
    if memos:
        spec = (front(memos[0]).get("agent") or {})
    attempt = int(os.environ.get("ORCHESTRATOR_ATTEMPT", "1"))
    record = {
        "role": os.environ.get("ORCHESTRATOR_ROLE"),
        "run_id": int(os.environ.get("ORCHESTRATOR_RUN_ID", "0")),
        "attempt": attempt,
        "memo": os.environ.get("ORCHESTRATOR_MEMO"),
        "memos": memos,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
        "start": started,
        "argv": sys.argv[1:],
        "prompt": prompt,
        "extra_env": os.environ.get("EXTRA"),
        "cwd": os.getcwd(),
    }
    children = []
    if spec.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if spec.get("grandchild"):
        children.append(subprocess.Popen(["sleep", "300"]).pid)
    if spec.get("orphan"):
        middle = subprocess.Popen([sys.executable, "-c",
                                   "import subprocess,sys; p=subprocess.Popen(['sleep','300']); print(p.pid)"],
                                  stdout=subprocess.PIPE, text=True)
        children.append(int(middle.stdout.readline()))
        middle.wait()
    if spec.get("setsid"):
        children.append(subprocess.Popen(["setsid", "sleep", "300"]).pid)
    record["children"] = children
    path = os.environ.get("STANDIN_RECORD")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
    sleep = float(spec.get("sleep", os.environ.get("STANDIN_SLEEP", "0")))
    deadline = time.time() + sleep
    while time.time() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.time())))
    reply = spec.get("reply")
    if reply:
        root = os.environ["ORCHESTRATOR_ROOT"]
        name = f"reply-{os.environ['ORCHESTRATOR_RUN_ID']}.md"
        tmp = os.path.join(root, "memo", reply["to"], "inbox", "." + name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(f"---\nid: reply-{os.environ['ORCHESTRATOR_RUN_ID']}\nsubject: {reply.get('subject', 'reply')}\n"
                         f"reply_to: {reply.get('reply_to', '')}\n---\nreply\n")
        os.rename(tmp, tmp.replace("." + name + ".tmp", name))
    if attempt <= int(spec.get("fail_attempts", os.environ.get("STANDIN_FAIL_ATTEMPTS", "0"))):
        sys.exit(1)
    sys.exit(int(spec.get("exit", os.environ.get("STANDIN_EXIT", "0"))))


if __name__ == "__main__":
    main()
