#!/usr/bin/env python3
"""A stand-in agent for the tests: records what it was given, then behaves as its memo says.

Behaviour comes from an ``agent:`` mapping in the memo's front matter (first memo
for batch roles), with defaults from STANDIN_* environment variables:
  sleep: seconds to work          exit: exit status
  fail_attempts: exit 1 while ORCHESTRATOR_ATTEMPT <= this
  ignore_term: ignore SIGTERM     grandchild: start a sleeping grandchild (same group)
  orphan: start a grandchild, then its parent exits (the grandchild stays in the group)
  setsid: start a grandchild that leaves the group with setsid
  stubborn_child: n               while ORCHESTRATOR_ATTEMPT <= n, leave a child in the group that ignores SIGTERM
  reply: {to: role, subject: s}   write a reply memo before exiting
  until: path                     after the sleep, work on until this file exists (at most 60 s)
  sleep_by_attempt: {2: 0.1}      per-attempt sleep, overrides sleep for the attempts it names
  say: text                       print "<text> (attempt N)" to stdout (the run's log) at start
  kill_self: SIGKILL              after sleeping, kill itself with this signal (no core dump) ...
  kill_attempts: n                ... only while ORCHESTRATOR_ATTEMPT <= n (default: every attempt)
  until_file: path                after sleeping, wait until this file exists (at most 60 s)
  record_peers: true              record the pids of other live processes of this project that carry
                                  the same memo file name (ORCHESTRATOR_MEMO), as "peers"
  commands: [[stop, --force], ...] after the sleep, run each as `orchestrator ARGS --root ROOT` and
                                  append {argv, code, stdout, stderr, ppid, sid} per command to the file
                                  named by results: path (then results.done is created)
  command_env: {NAME: value}      the commands' environment changes (null unsets NAME)
  commands_when: path             run the commands once this file exists (at most 60 s)
  escape: true                    run the commands from a process that left: setsid, then a double fork
                                  (the agent waits for results.done)
A batch role's memos are read from $ORCHESTRATOR_MEMOS_FILE ("memos" in the record; "env_memos" is
$ORCHESTRATOR_MEMOS, "memos_file" the file's path). Every start appends one JSON line to $STANDIN_RECORD; with $STANDIN_ENDS set, every agent that
finishes by itself (not killed) appends one line with its start and end times there.
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
    except Exception:  # noqa: BLE001 - any front matter it cannot read means no instructions
        return {}
    return data if isinstance(data, dict) else {}


def peers(memo_name, own):
    """Pids of other live processes (not in ``own``) of this project root whose ORCHESTRATOR_MEMO has this file name."""
    root = os.environ.get("ORCHESTRATOR_ROOT", "")
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in own:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                if handle.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            with open(f"/proc/{name}/environ", "rb") as handle:
                env = dict(item.split(b"=", 1) for item in handle.read().split(b"\0") if b"=" in item)
        except (OSError, IndexError, ValueError):
            continue
        if (
            env.get(b"ORCHESTRATOR_ROOT", b"").decode() == root
            and memo_name
            and os.path.basename(env.get(b"ORCHESTRATOR_MEMO", b"").decode()) == memo_name
        ):
            found.append(int(name))
    return found


def run_commands(spec, root):
    """The ``commands`` of the memo, one after another; one JSON line each in the ``results`` file."""
    env = dict(os.environ)
    for key, value in (spec.get("command_env") or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    lines = []
    for argv in spec["commands"]:
        argv = [str(a) for a in argv]
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", *argv, "--root", root],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        lines.append(
            {
                "argv": argv,
                "code": done.returncode,
                "stdout": done.stdout,
                "stderr": done.stderr,
                "pid": os.getpid(),
                "ppid": os.getppid(),
                "sid": os.getsid(0),
            }
        )
    with open(spec["results"], "a", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(line) + "\n" for line in lines))
    open(spec["results"] + ".done", "w").close()


def escape_and_run_commands(spec, root):
    """Run the commands from a grandchild in a session of its own whose parent has exited (setsid, double fork)."""
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        parent = os.getppid()
        give_up = time.time() + 10
        while os.getppid() == parent and time.time() < give_up:  # until the middle process is gone
            time.sleep(0.01)
        try:
            run_commands(spec, root)
        finally:
            os._exit(0)
    os.waitpid(middle, 0)
    give_up = time.time() + 60
    while not os.path.exists(spec["results"] + ".done") and time.time() < give_up:
        time.sleep(0.02)


def main():
    started = time.time()
    prompt = sys.stdin.read() if os.environ.get("STANDIN_PROMPT_VIA", "stdin") == "stdin" else sys.argv[-1]
    listed = os.environ.get("ORCHESTRATOR_MEMOS_FILE")
    if listed:  # a batch role: the file names every memo (ORCHESTRATOR_MEMOS only while the list is short)
        with open(listed, encoding="utf-8") as handle:
            memos = handle.read().splitlines()
    else:
        memos = (os.environ.get("ORCHESTRATOR_MEMOS") or os.environ.get("ORCHESTRATOR_MEMO") or "").splitlines()
    spec = {}
    if memos:
        spec = front(memos[0]).get("agent") or {}
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
        "root": os.environ.get("ORCHESTRATOR_ROOT"),
        "env_memos": os.environ.get("ORCHESTRATOR_MEMOS"),
        "memos_file": listed,
    }
    children = []
    if spec.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if spec.get("grandchild"):
        children.append(subprocess.Popen(["sleep", "300"]).pid)
    if spec.get("orphan"):
        middle = subprocess.Popen(
            [sys.executable, "-c", "import subprocess,sys; p=subprocess.Popen(['sleep','300']); print(p.pid)"],
            stdout=subprocess.PIPE,
            text=True,
        )
        children.append(int(middle.stdout.readline()))
        middle.wait()
    if spec.get("setsid"):
        children.append(subprocess.Popen(["setsid", "sleep", "300"]).pid)
    if attempt <= int(spec.get("stubborn_child", 0)):  # a child in our group that ignores SIGTERM
        children.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)",
                ]
            ).pid
        )
    record["children"] = children
    if spec.get("record_peers"):
        record["peers"] = peers(os.path.basename(record["memo"] or ""), {os.getpid(), *children})
    if spec.get("say"):
        print(f"{spec['say']} (attempt {attempt})", flush=True)
    path = os.environ.get("STANDIN_RECORD")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
    sleep = float(spec.get("sleep", os.environ.get("STANDIN_SLEEP", "0")))
    by_attempt = spec.get("sleep_by_attempt") or {}
    if attempt in by_attempt or str(attempt) in by_attempt:
        sleep = float(by_attempt.get(attempt, by_attempt.get(str(attempt))))
    deadline = time.time() + sleep
    while time.time() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.time())))
    if spec.get("commands"):
        root = os.environ["ORCHESTRATOR_ROOT"]
        when = spec.get("commands_when")
        give_up = time.time() + 60
        while when and not os.path.exists(when) and time.time() < give_up:
            time.sleep(0.02)
        if spec.get("escape"):
            escape_and_run_commands(spec, root)
        else:
            run_commands(spec, root)
    until = spec.get("until_file")
    if until:
        deadline = time.time() + 60
        while not os.path.exists(until) and time.time() < deadline:
            time.sleep(0.02)
    if spec.get("kill_self") and attempt <= int(spec.get("kill_attempts", attempt)):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), getattr(signal, spec["kill_self"]))
        time.sleep(5)
    gate = spec.get("until")
    if gate:  # work until this file exists (a test opens the gate), at most a minute
        give_up = time.time() + 60
        while not os.path.exists(gate) and time.time() < give_up:
            time.sleep(0.02)
    reply = spec.get("reply")
    if reply:
        root = os.environ["ORCHESTRATOR_ROOT"]
        name = f"reply-{os.environ['ORCHESTRATOR_RUN_ID']}.md"
        tmp = os.path.join(root, "memo", reply["to"], "inbox", "." + name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(
                f"---\nid: reply-{os.environ['ORCHESTRATOR_RUN_ID']}\nsubject: {reply.get('subject', 'reply')}\n"
                f"reply_to: {reply.get('reply_to', '')}\n---\nreply\n"
            )
        os.rename(tmp, tmp.replace("." + name + ".tmp", name))
    if attempt <= int(spec.get("fail_attempts", os.environ.get("STANDIN_FAIL_ATTEMPTS", "0"))):
        code = 1
    else:
        code = int(spec.get("exit", os.environ.get("STANDIN_EXIT", "0")))
    ends = os.environ.get("STANDIN_ENDS")
    if ends:  # one line per agent that finished on its own, in a file of its own: records.jsonl keeps only starts
        with open(ends, "a", encoding="utf-8") as handle:
            handle.write(
                json.dumps(
                    {
                        "role": record["role"],
                        "run_id": record["run_id"],
                        "attempt": attempt,
                        "pid": record["pid"],
                        "start": started,
                        "end": time.time(),
                        "exit": code,
                    }
                )
                + "\n"
            )
    sys.exit(code)


if __name__ == "__main__":
    main()
