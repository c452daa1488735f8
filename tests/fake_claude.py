#!/usr/bin/env python3
"""A stand-in for the Claude Code CLI that speaks the SDK's stream-json control protocol.

Given to claude-agent-sdk as ``cli_path`` (through a small wrapper script the
tests write), so the SDK, the runner and the orchestrator run for real and
nothing ever reaches Anthropic. The wire format is the one claude-agent-sdk
0.2.x speaks, checked against its source and the CLI it bundles (2.1.x):

* newline-delimited JSON on stdin and stdout;
* the SDK first sends ``control_request``/``initialize`` and waits for a
  ``control_response`` with ``subtype: success`` and the same ``request_id``;
* each ``user`` message starts a turn, answered by ``system``/``init``,
  ``assistant`` messages (``message.model`` and ``message.content`` are
  required) and one ``result`` (``subtype``, ``duration_ms``,
  ``duration_api_ms``, ``is_error``, ``num_turns``, ``session_id`` are
  required); ``total_cost_usd`` and ``modelUsage`` are running totals for the
  process, ``usage`` and ``num_turns`` cover the one turn;
* an ``interrupt`` control request is acknowledged at once, and the turn then
  ends with a ``result`` of subtype ``error_during_execution``;
* end of stdin ends the process (status 1 when the last result was an error).

A reader thread keeps taking stdin during a turn, or an interrupt would never
be seen. Behaviour comes from the environment:

``FAKE_CLAUDE_MODE``           ok (default), slow, crash, overloaded, notloggedin, malformed, planlimit, keylimit,
                               nocall (a turn that ends with no model call)
``FAKE_CLAUDE_COST``           dollars added per turn (default 0.01)
``FAKE_CLAUDE_TURN_SECONDS``   how long a turn works (default 0; 60 in ``slow`` mode)
``FAKE_CLAUDE_RECORD``         a file that gets one JSON line per thing received (argv, prompts, controls)
``FAKE_CLAUDE_FAIL_ATTEMPTS``  while ``ORCHESTRATOR_ATTEMPT`` <= this, each turn spends its cost and then
                               ends with an error result (the API overloaded), so the attempt fails
``FAKE_CLAUDE_SESSIONS``       a JSON file of each session's running totals, saved at every result; a
                               ``--resume`` of a saved session carries on from its totals, as Claude Code
                               does when it resumes a session
``FAKE_CLAUDE_DEAF``           1: acknowledge an interrupt but keep working (a CLI stuck in a tool)
``FAKE_CLAUDE_LINGER``         seconds to stay after the end of stdin before exiting (a CLI saving its session);
                               the end of stdin is recorded as ``{"eof": true}``
``FAKE_CLAUDE_HONOR_BUDGET``   1: a turn that leaves this process's spend at or over ``--max-budget-usd`` ends
                               with a result of subtype ``error_max_budget_usd``, as Claude Code does (a resumed
                               session's total goes on from its saved one; the cap counts only the spend since)

and from the prompt: a prompt containing ``[slow]`` makes that turn slow, and one containing
``[wait:<path>]`` makes that turn work until the file at ``<path>`` exists (at most 60 s).
Each turn uses the Bash tool once (``echo working``), then answers
``echo: <the prompt>``.
"""

from __future__ import annotations

import json
import os
import queue
import re
import sys
import threading
import time
import uuid
from typing import Any

MODE = os.environ.get("FAKE_CLAUDE_MODE", "ok")
COST = float(os.environ.get("FAKE_CLAUDE_COST", "0.01"))
SLOW_SECONDS = 60.0
TURN_SECONDS = float(os.environ.get("FAKE_CLAUDE_TURN_SECONDS", str(SLOW_SECONDS if MODE == "slow" else 0)))
RECORD = os.environ.get("FAKE_CLAUDE_RECORD")
FAIL_ATTEMPTS = int(os.environ.get("FAKE_CLAUDE_FAIL_ATTEMPTS", "0"))
SESSIONS = os.environ.get("FAKE_CLAUDE_SESSIONS")
DEAF = os.environ.get("FAKE_CLAUDE_DEAF") == "1"
HONOR_BUDGET = os.environ.get("FAKE_CLAUDE_HONOR_BUDGET") == "1"
LINGER = float(os.environ.get("FAKE_CLAUDE_LINGER", "0"))
WAIT_MARK = re.compile(r"\[wait:([^\]]+)\]")
MODEL = "claude-fake-1"
VERSION = "2.1.332"


def record(**entry: Any) -> None:
    if RECORD:
        with open(RECORD, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"pid": os.getpid(), **entry}) + "\n")


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def option(args: list[str], name: str) -> str | None:
    """The value of ``--name=value`` or ``--name value``."""
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return None


def text_of(message: dict[str, Any]) -> str:
    content = message.get("message", {}).get("content", "")
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content if isinstance(block, dict))


class FakeClaude:
    def __init__(self, args: list[str]) -> None:
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.backlog: list[dict[str, Any]] = []  # user messages that arrived during a turn
        self.session_id = option(args, "--resume") or str(uuid.uuid4())
        self.cost = 0.0
        self.tokens = [0, 0]
        self.turns = 0
        self.last_error = False
        self.turn_of: str | None = None  # the uuid of the user message that started the turn
        self.max_budget = float(option(args, "--max-budget-usd") or 0) or None
        if SESSIONS and option(args, "--resume"):
            saved = load_sessions().get(self.session_id)
            if saved:
                self.cost, self.tokens = saved["cost"], list(saved["tokens"])
        self.restored = self.cost  # what the cap does not count

    def read_stdin(self) -> None:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                self.inbox.put(json.loads(line))
            except json.JSONDecodeError:
                sys.stderr.write(f"fake-claude: ignoring a line that is not JSON: {line!r}\n")
        self.inbox.put(None)

    def serve(self) -> int:
        threading.Thread(target=self.read_stdin, daemon=True).start()
        while True:
            message = self.backlog.pop(0) if self.backlog else self.inbox.get()
            if message is None:
                record(eof=True)
                time.sleep(LINGER)
                return 1 if self.last_error else 0
            if message.get("type") == "control_request":
                self.answer_control(message, in_turn=False)
            elif message.get("type") == "user":
                self.turn_of = message.get("uuid")
                self.turn(text_of(message))

    def answer_control(self, message: dict[str, Any], in_turn: bool) -> str:
        request = message.get("request", {})
        subtype = request.get("subtype")
        record(control=subtype, in_turn=in_turn)
        if subtype in ("initialize", "interrupt"):
            body: dict[str, Any] = {"commands": [], "output_style": "default"} if subtype == "initialize" else {}
            send(
                {
                    "type": "control_response",
                    "response": {"subtype": "success", "request_id": message.get("request_id"), "response": body},
                }
            )
        else:
            refusal = f"fake-claude does not do {subtype}"
            send(
                {
                    "type": "control_response",
                    "response": {"subtype": "error", "request_id": message.get("request_id"), "error": refusal},
                }
            )
        return str(subtype)

    def assistant(self, content: list[dict[str, Any]], error: str | None = None) -> None:
        message: dict[str, Any] = {
            "type": "assistant",
            "parent_tool_use_id": None,
            "session_id": self.session_id,
            "uuid": str(uuid.uuid4()),
            "message": {
                "id": f"msg_{uuid.uuid4().hex[:12]}",
                "role": "assistant",
                "model": MODEL,
                "content": content,
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 5},
            },
        }
        if error:
            message["error"] = error
        send(message)

    def result(self, subtype: str, is_error: bool, text: str | None, **extra: Any) -> None:
        self.turns += 1
        self.last_error = is_error
        usage = {
            "input_tokens": 100,
            "output_tokens": 20,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }  # this turn only; modelUsage below is the running total
        message = {
            "type": "result",
            "subtype": subtype,
            "is_error": is_error,
            "duration_ms": 5,
            "duration_api_ms": 4,
            "num_turns": 1,
            "session_id": self.session_id,
            "total_cost_usd": round(self.cost, 6),
            "usage": usage,
            "modelUsage": {
                MODEL: {
                    "inputTokens": self.tokens[0],
                    "outputTokens": self.tokens[1],
                    "cacheReadInputTokens": 0,
                    "cacheCreationInputTokens": 0,
                    "costUSD": round(self.cost, 6),
                }
            },
            "permission_denials": [],
            "uuid": str(uuid.uuid4()),
            "stop_reason": None,
            **({"user_message_uuid": self.turn_of, "user_message_uuids": [self.turn_of]} if self.turn_of else {}),
            **({"result": text} if text is not None else {}),
            **extra,
        }
        if SESSIONS:  # saved before the result goes out, and whole: a retry may resume the session at once
            sessions = load_sessions()
            sessions[self.session_id] = {"cost": self.cost, "tokens": self.tokens}
            tmp = f"{SESSIONS}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(sessions, handle)
            os.replace(tmp, SESSIONS)
        send(message)

    def turn(self, prompt: str) -> None:
        record(prompt=prompt)
        send(
            {
                "type": "system",
                "subtype": "init",
                "session_id": self.session_id,
                "uuid": str(uuid.uuid4()),
                "cwd": os.getcwd(),
                "model": MODEL,
                "tools": ["Bash", "Read"],
                "claude_code_version": VERSION,
                "permissionMode": "default",
                "apiKeySource": "none",
            }
        )
        if MODE == "crash":
            sys.stderr.write("fake-claude: reading the prompt\n")
            sys.stderr.write("fake-claude: fatal: segmentation fault in the tokenizer\n")
            sys.stderr.flush()
            os._exit(2)
        if MODE == "malformed":
            sys.stdout.write('{"type": "assistant", "message": {this is not json\n')
            sys.stdout.flush()
            return
        if MODE == "notloggedin":
            text = "Not logged in · Please run /login"
            self.assistant([{"type": "text", "text": text}], error="authentication_failed")
            self.result("success", True, text)
            return
        if MODE in ("planlimit", "keylimit"):  # Claude Code 2.1 on a 429: a plan's login also says which limit
            if MODE == "planlimit":
                info = {"status": "rejected", "resetsAt": 1767225600, "rateLimitType": "five_hour"}
                send(
                    {
                        "type": "rate_limit_event",
                        "rate_limit_info": info,
                        "uuid": str(uuid.uuid4()),
                        "session_id": self.session_id,
                    }
                )
            text = "API Error: Request rejected (429) · Number of request tokens has exceeded your rate limit"
            self.assistant([{"type": "text", "text": text}], error="rate_limit")
            self.result("success", True, text, api_error_status=429, terminal_reason="api_error")
            return
        if MODE == "nocall":  # a turn that ends without asking the model (reported with an empty prompt)
            zero = {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            }
            self.result("success", False, "", usage=zero, modelUsage={}, num_turns=0, total_cost_usd=0)
            return
        if MODE == "overloaded":  # as Claude Code 2.1: its own retries first, then a synthetic answer
            retries = int(os.environ.get("CLAUDE_CODE_MAX_RETRIES") or "10")
            for attempt in range(1, retries + 1):
                send(
                    {
                        "type": "system",
                        "subtype": "api_retry",
                        "attempt": attempt,
                        "max_retries": retries,
                        "retry_delay_ms": 1,
                        "error_status": 529,
                        "error": "overloaded",
                        "session_id": self.session_id,
                        "uuid": str(uuid.uuid4()),
                    }
                )
            text = "API Error: Repeated 529 Overloaded errors"
            self.assistant([{"type": "text", "text": text}], error="server_error")
            self.result("success", True, text, api_error_status=529, terminal_reason="completed")
            return
        self.cost += COST
        self.tokens[0] += 100
        self.tokens[1] += 20
        self.assistant(
            [
                {
                    "type": "tool_use",
                    "id": f"toolu_{uuid.uuid4().hex[:8]}",
                    "name": "Bash",
                    "input": {"command": "echo working", "description": "say it works"},
                }
            ]
        )
        seconds = SLOW_SECONDS if "[slow]" in prompt else TURN_SECONDS
        gate = WAIT_MARK.search(prompt)
        if self.work(SLOW_SECONDS if gate else seconds, gate.group(1) if gate else None):
            send(
                {
                    "type": "user",
                    "session_id": self.session_id,
                    "parent_tool_use_id": None,
                    "message": {"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user]"}]},
                }
            )
            self.result("error_during_execution", True, None, errors=[], terminal_reason="aborted_streaming")
            return
        if FAIL_ATTEMPTS and int(os.environ.get("ORCHESTRATOR_ATTEMPT") or "1") <= FAIL_ATTEMPTS:
            text = "API Error: Repeated 529 Overloaded errors"
            self.assistant([{"type": "text", "text": text}], error="overloaded")
            self.result("success", True, text, api_error_status=529)
            return
        if HONOR_BUDGET and self.max_budget is not None and self.cost - self.restored >= self.max_budget:
            self.result("error_max_budget_usd", True, None, errors=[f"Reached maximum budget (${self.max_budget})"])
            return
        answer = f"echo: {prompt}"
        self.assistant([{"type": "text", "text": answer}])
        self.result("success", False, answer, terminal_reason="completed")

    def work(self, seconds: float, gate: str | None = None) -> bool:
        """Work for ``seconds`` (or until ``gate`` exists) while answering control requests; True when interrupted."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (gate is not None and os.path.exists(gate)):
                return False
            try:
                message = self.inbox.get(timeout=min(left, 0.02) if gate is not None else left)
            except queue.Empty:
                if gate is None:
                    return False
                continue
            if message is None:
                self.inbox.put(None)  # end of input: finish the turn, then exit
                return False
            if message.get("type") == "control_request":
                if self.answer_control(message, in_turn=True) == "interrupt" and not DEAF:
                    return True
            elif message.get("type") == "user":
                self.backlog.append(message)


def load_sessions() -> dict[str, Any]:
    try:
        with open(SESSIONS or "", encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def main() -> int:
    args = sys.argv[1:]
    if args == ["--version"]:  # the orchestrator's start-up check; not recorded, it starts no session
        print(f"{VERSION} (Claude Code)")
        return 0
    watched = ("CLAUDE_CODE_ENTRYPOINT", "ORCHESTRATOR_RUN_ID", "PYTHONPATH")
    record(argv=args, cwd=os.getcwd(), env={k: os.environ.get(k) for k in watched})
    if "--input-format" not in args or option(args, "--input-format") != "stream-json":
        sys.stderr.write("fake-claude: only --input-format stream-json is supported\n")
        return 2
    return FakeClaude(args).serve()


if __name__ == "__main__":
    sys.exit(main())
