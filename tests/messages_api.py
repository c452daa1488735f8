"""A stand-in for the Anthropic Messages API on 127.0.0.1, for running the real Claude Code CLI in tests.

``python tests/messages_api.py PORTFILE LOGFILE`` (or ``MessagesApi`` in process)
serves ``POST /v1/messages`` with Anthropic's streaming server-sent events
(``message_start``, ``content_block_start``/``delta``/``stop``, ``message_delta``
with ``usage``, ``message_stop``), and a plain JSON answer when ``stream`` is
false. Every request is appended to the log as one JSON line (``path``, the text
of every user message, how many tool results it carries and their text, the
time), so a test can see what the model was shown and when.

What to answer is chosen by a marker in the conversation's first user message:

``[answer]`` (or no marker)  an immediate short text answer
``[slow:N]``                 400 words streamed over N seconds (one token a word, 10 input tokens), usage only at
                             the end; the log's ``streamed`` line says how many were sent before the client left
``[bash:CMD]``               a Bash tool call running CMD; the answer after its result is ``done``
``[steps:N]``                N Bash calls of ``sleep 1``, one per model call, then an answer
``[write:PATH]``             a Write tool call creating PATH (relative to the agent's folder) with ``written``
``[status:CODE]``            an error answer with that HTTP status (529 overloaded, 401, 429, ...)

While the file ``MessagesApi.limited_while`` names exists, every model call is answered 429 ``rate_limit_error``
as a plan's exhausted limit is: ``retry-after: 3600`` and ``anthropic-ratelimit-unified-status: rejected`` with
its ``-reset`` (an hour on) and ``-representative-claim: five_hour``; remove the file and it answers again.

A later user message (a ``tell``) that contains ``[reply]`` is answered at once with ``heard: <its text>``,
whatever the first marker says. An answer names the model the request asked for; streamed answers count
1000 input tokens (10 for ``[slow]``) and one output token a word (at least 20).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODEL = "claude-sonnet-4-20250514"
MARK = re.compile(r"\[(answer|slow|bash|steps|write|status)(?::([^\]]*))?\]")
ERRORS = {
    529: ("overloaded_error", "Overloaded"),
    401: ("authentication_error", "invalid x-api-key"),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
    500: ("api_error", "Internal server error"),
}


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            out.append(str(block.get("text", "")))
    return out


def _tool_results(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return []
    return [b for b in content or [] if isinstance(b, dict) and b.get("type") == "tool_result"]


def _result_text(result: dict[str, Any]) -> str:
    """A tool result's text (a string, or its text blocks), with ``[error]`` in front when it is one."""
    content = result.get("content")
    text = content if isinstance(content, str) else " ".join(_texts(content))
    return ("[error] " if result.get("is_error") else "") + text


class Handler(BaseHTTPRequestHandler):
    """One request; the server object holds the log path."""

    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class names it so
        pass

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        self._json(200, {"data": [], "has_more": False})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            body = {}
        path = self.path.split("?")[0]
        messages = body.get("messages") or []
        users = [m for m in messages if m.get("role") == "user"]
        user_texts = [" ".join(_texts(m.get("content"))) for m in users]
        results = [r for m in users for r in _tool_results(m.get("content"))]
        limited = self.server.limited_while
        refused = path.endswith("/messages") and limited is not None and limited.exists()
        self.server.record(
            {
                "path": path,
                "limited": refused,
                "stream": bool(body.get("stream")),
                "user_texts": user_texts,
                "tool_results": len(results),
                "tool_result_texts": [_result_text(r) for r in results],
                "max_tokens": body.get("max_tokens"),
            }
        )
        if refused:
            self._limited()
            return
        if not path.endswith("/messages"):
            if path.endswith("/count_tokens"):
                self._json(200, {"input_tokens": 10})
            else:
                self._json(200, {})
            return
        first = next((t for t in user_texts if MARK.search(t)), user_texts[0] if user_texts else "")
        found = MARK.search(first)
        kind, arg = (found.group(1), found.group(2) or "") if found else ("answer", "")
        last = user_texts[-1] if user_texts else ""
        if len(users) > 1 and "[reply]" in last:
            self._answer(body, [("text", f"heard: {last.strip()}")])
            return
        if kind == "status":
            self._error(int(arg or 529))
        elif kind == "slow":
            self._answer(body, [("text", "slow " * 400)], seconds=float(arg or 10), input_tokens=10)
        elif kind == "bash":
            if results:
                self._answer(body, [("text", "done")])
            else:
                self._answer(body, [("tool", {"name": "Bash", "input": {"command": arg, "description": "run"}})])
        elif kind == "steps":
            if len(results) >= int(arg or 3):
                self._answer(body, [("text", "all steps done")])
            else:
                step = {"command": "sleep 1", "description": f"step {len(results) + 1}"}
                self._answer(body, [("tool", {"name": "Bash", "input": step})])
        elif kind == "write":
            if results:
                self._answer(body, [("text", "done")])
            else:
                target = str(Path(self.server.cwd_hint(body)) / arg) if not arg.startswith("/") else arg
                tool = {"name": "Write", "input": {"file_path": target, "content": "written\n"}}
                self._answer(body, [("tool", tool)])
        else:
            self._answer(body, [("text", "answered")])

    # -- answers

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:12]}")
        self.end_headers()
        self.wfile.write(data)

    def _limited(self) -> None:
        """A plan's limit, with the headers the API sends with it."""
        kind, message = ERRORS[429]
        data = json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
        reset = str(int(time.time()) + 3600)
        self.send_response(429)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:12]}")
        self.send_header("retry-after", "3600")
        self.send_header("anthropic-ratelimit-unified-status", "rejected")
        self.send_header("anthropic-ratelimit-unified-reset", reset)
        self.send_header("anthropic-ratelimit-unified-representative-claim", "five_hour")
        self.send_header("anthropic-ratelimit-unified-5h-status", "rejected")
        self.send_header("anthropic-ratelimit-unified-5h-reset", reset)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int) -> None:
        kind, message = ERRORS.get(status, ("api_error", f"status {status}"))
        self._json(status, {"type": "error", "error": {"type": kind, "message": message}})

    def _answer(
        self, body: dict[str, Any], blocks: list[tuple[str, Any]], seconds: float = 0.0, input_tokens: int = 1000
    ) -> None:
        model = str(body.get("model") or MODEL)
        text_tokens = sum(len(str(b[1]).split()) for b in blocks if b[0] == "text")
        output_tokens = max(text_tokens, 20)
        stop = "tool_use" if any(b[0] == "tool" for b in blocks) else "end_turn"
        msg_id = f"msg_{uuid.uuid4().hex[:20]}"
        if not body.get("stream"):
            content = [self._block(kind, value) for kind, value in blocks]
            usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
            message = {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content}
            self._json(200, {**message, "stop_reason": stop, "stop_sequence": None, "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:12]}")
        self.end_headers()
        self.close_connection = True
        self.streamed = 0
        try:
            start_usage = {"input_tokens": input_tokens, "output_tokens": 1}
            self._event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": msg_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": start_usage,
                    },
                },
            )
            for index, (kind, value) in enumerate(blocks):
                if kind == "text":
                    self._stream_text(index, str(value), seconds)
                else:
                    self._stream_tool(index, value)
            self._event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": output_tokens},
                },
            )
            self._event("message_stop", {"type": "message_stop"})
            aborted = False
        except (BrokenPipeError, ConnectionResetError):
            aborted = True
        self.server.record({"streamed": self.streamed, "input_tokens": input_tokens, "aborted": aborted})

    def _block(self, kind: str, value: Any) -> dict[str, Any]:
        if kind == "text":
            return {"type": "text", "text": value}
        return {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}", **value}

    def _stream_text(self, index: int, text: str, seconds: float) -> None:
        self._event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
        )
        words = text.split(" ")
        chunks = [" ".join(words[i : i + 10]) + " " for i in range(0, len(words), 10)] or [text]
        pause = seconds / len(chunks) if seconds else 0.0
        for chunk in chunks:
            if pause:
                time.sleep(pause)
            self.streamed += len(chunk.split())
            self._event(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": chunk}},
            )
        self._event("content_block_stop", {"type": "content_block_stop", "index": index})

    def _stream_tool(self, index: int, tool: dict[str, Any]) -> None:
        block = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}", "name": tool["name"], "input": {}}
        self._event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})
        delta = {"type": "input_json_delta", "partial_json": json.dumps(tool["input"])}
        self._event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        self._event("content_block_stop", {"type": "content_block_stop", "index": index})

    def _event(self, name: str, data: dict[str, Any]) -> None:
        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    """The HTTP server, with the request log."""

    daemon_threads = True

    def __init__(self, log: Path, cwd: Path | None = None) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.log = log
        self.cwd = cwd
        self.limited_while: Path | None = None  # every model call is answered 429 while this file exists
        self._lock = threading.Lock()

    def record(self, entry: dict[str, Any]) -> None:
        """One request, as a JSON line in the log."""
        with self._lock, open(self.log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"ts": time.time(), **entry}) + "\n")

    def cwd_hint(self, body: dict[str, Any]) -> str:
        """The agent's working folder: the one the test gave, else the current one."""
        return str(self.cwd or Path.cwd())


class MessagesApi:
    """The stand-in API in a background thread: ``url`` to give as ``ANTHROPIC_BASE_URL``, ``requests()`` seen."""

    def __init__(self, log: Path, cwd: Path | None = None) -> None:
        self.log = log
        self.server = Server(log, cwd)
        self.thread = threading.Thread(target=self.server.serve_forever, name="messages-api", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """The base URL, as ``ANTHROPIC_BASE_URL``."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def requests(self) -> list[dict[str, Any]]:
        """Every request so far, in order."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines() if line.strip()]

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    api = MessagesApi(Path(sys.argv[2]))
    Path(sys.argv[1]).write_text(api.url, encoding="utf-8")
    api.thread.join()
