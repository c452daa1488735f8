"""The real Codex CLI for the tests that need it, and a stand-in of OpenAI's Responses API for it to talk to.

``codex_binary()`` installs ``@openai/codex`` at ``VERSION`` once into a cache folder with npm (None, with the
reason in ``why_not``, when npm is missing or the install fails: the tests skip saying so). ``ResponsesStub``
serves ``POST /v1/responses`` on 127.0.0.1 as the API streams it (server-sent events), one scripted answer per
request, chosen by a mark in the prompt: an answer with usage, a call of the shell tool ``exec_command``, a
usage limit (429 ``usage_limit_reached``), an authentication failure (401), a slow stream, an answer held back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

VERSION = "0.169.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchestrator-tests" / f"codex-{VERSION}"
INSTALL_SECONDS = 600.0
USAGE = {
    "input_tokens": 1200,
    "input_tokens_details": {"cached_tokens": 200},
    "output_tokens": 300,
    "output_tokens_details": {"reasoning_tokens": 120},
    "total_tokens": 1500,
}
why_not = ""
_lock = threading.Lock()


def codex_binary() -> Path | None:
    """The pinned Codex CLI, installed once into ``CACHE``; None (``why_not`` says why) when it cannot be."""
    global why_not
    binary = CACHE / "node_modules" / ".bin" / "codex"
    with _lock:
        if binary.exists():
            return binary
        npm = shutil.which("npm")
        if npm is None:
            why_not = "npm is not installed (Debian: apt-get install npm); `.ci/run` installs it"
            return None
        try:
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), f"@openai/codex@{VERSION}"],
                capture_output=True,
                text=True,
                timeout=INSTALL_SECONDS,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            why_not = f"npm install @openai/codex@{VERSION} failed: {exc}"
            return None
        if done.returncode != 0 or not binary.exists():
            why_not = f"npm install @openai/codex@{VERSION} failed: {(done.stderr or done.stdout).strip()[-300:]}"
            return None
        return binary


def provider(port: int) -> dict[str, str]:
    """A codex role's ``config`` that points Codex at the stand-in on ``port`` (its key in ``MOCK_KEY``), with
    no retries of its own (a 401 is otherwise asked five more times)."""
    table = (
        f'{{name="mock", base_url="http://127.0.0.1:{port}/v1", env_key="MOCK_KEY", wire_api="responses", '
        "request_max_retries=0, stream_max_retries=0}"
    )
    return {"model_provider": "mock", "model_providers.mock": table}


def provider_args(port: int) -> list[str]:
    """The same as ``-c`` arguments."""
    return [arg for key, value in provider(port).items() for arg in ("-c", f"{key}={value}")]


def _sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def _created(n: int) -> dict[str, Any]:
    return {"type": "response.created", "response": {"id": f"resp_{n}"}}


def _completed(n: int) -> dict[str, Any]:
    return {"type": "response.completed", "response": {"id": f"resp_{n}", "usage": USAGE}}


def _message(n: int, text: str) -> dict[str, Any]:
    item = {
        "type": "message",
        "role": "assistant",
        "id": f"msg_{n}",
        "content": [{"type": "output_text", "text": text}],
    }
    return {"type": "response.output_item.done", "item": item}


def _call(n: int, cmd: str) -> dict[str, Any]:
    item = {
        "type": "function_call",
        "id": f"fc_{n}",
        "call_id": f"call_{n}",
        "name": "exec_command",
        "arguments": json.dumps({"cmd": cmd}),
    }
    return {"type": "response.output_item.done", "item": item}


class ResponsesStub:
    """A stand-in of the Responses API on 127.0.0.1: each request's prompt (its body's text) picks the answer.

    ``[shell: CMD]`` asks for ``exec_command`` with CMD first (then answers once its output comes back);
    ``[limit]`` answers 429 ``usage_limit_reached`` with ``resets_at`` (``resets_at`` attribute);
    ``[auth]`` answers 401; ``[slow]`` starts a stream and never ends it; ``[held]`` answers once ``hold`` is set,
    ``[later]`` once ``later`` is set;
    ``[then500]`` answers 500 once a command's output comes back.
    ``requests`` keeps every body."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.resets_at = int(time.time()) + 3600
        self.limited_while: Path | None = None  # while this file exists, every request meets the usage limit
        self.released = threading.Event()
        self.hold = threading.Event()  # a ``[held]`` request is answered once this is set
        self.later = threading.Event()  # a ``[later]`` request (a told turn's, say) is answered once this is set
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                pass

            def do_POST(self) -> None:  # noqa: N802 - the base class's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                stub.requests.append(body)
                stub.answer(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ResponsesStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    def answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        """One request's answer, by the marks in its text."""
        text = json.dumps(body.get("input") or [])
        n = len(self.requests)
        if "[auth]" in text:
            error = {
                "error": {
                    "message": "Incorrect API key provided",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            }
            return self._json(handler, 401, error)
        if "[limit]" in text or (self.limited_while is not None and self.limited_while.exists()):
            error = {
                "error": {
                    "type": "usage_limit_reached",
                    "message": "The usage limit has been reached",
                    "plan_type": "plus",
                    "resets_at": self.resets_at,
                }
            }
            return self._json(handler, 429, error)
        if "[then500]" in text and '"function_call_output"' in text:
            return self._json(handler, 500, {"error": {"message": "The server had an error", "type": "server_error"}})
        if "[held]" in text:
            self.hold.wait(60)
        if "[later]" in text:
            self.later.wait(60)
        if "[slow]" in text:
            self._stream_head(handler)
            self._chunk(handler, _sse([_created(n)]))
            self.released.wait(60)
            return None
        events = [_created(n)]
        shell = _shell_mark(text)
        if shell is not None and '"function_call_output"' not in text:
            events.append(_call(n, shell))
        else:
            events.append(_message(n, f"Done: answer {n}."))
        events.append(_completed(n))
        self._stream_head(handler)
        self._chunk(handler, _sse(events))
        self._chunk(handler, b"")
        return None

    @staticmethod
    def _json(handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    @staticmethod
    def _stream_head(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

    @staticmethod
    def _chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
        try:
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()
        except OSError:
            pass  # the client went away (a cancel)


def _shell_mark(text: str) -> str | None:
    """The command of a ``[shell: CMD]`` mark in a request's text (JSON-escaped as it is there)."""
    at = text.find("[shell: ")
    if at < 0:
        return None
    end = text.find("]", at)
    return json.loads(f'"{text[at + 8 : end]}"') if end > 0 else None
