"""The control channel's wire format and its server, without a supervisor.

The request models and their errors are checked directly; the server runs on a
real socket in tmp_path with a stand-in ``handle`` (the one faked boundary),
asked through the real client or a raw socket.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.control import channel as control
from orchestrator.control import protocol
from orchestrator.core import errors

# exactly what cli.py sends for each command (its argparse defaults included)
CLI_REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("status", {}),
    ("stop", {"force": True, "who": "me (pid 1)"}),
    ("cancel", {"memo": "B-031", "role": None, "reason": "", "all": False, "who": "me (pid 1)"}),
    ("cancel", {"memo": None, "role": "builder", "reason": "enough", "all": False, "who": "me (pid 1)"}),
    ("interrupt", {"memo": "B-031", "keep": True, "reason": "interrupted", "who": "me (pid 1)"}),
    ("tell", {"memo": "B-031", "text": "and the footer [too]", "who": "me (pid 1)"}),
    ("wake", {"role": "rin", "task": None, "who": "me (pid 1)"}),
    ("wake", {"role": "rin", "task": "diary", "who": "me (pid 1)"}),
    ("schedule_changed", {}),
    ("authorize", {"command": "release", "role": None}),
    ("authorize", {"command": "memory forget", "role": "planner"}),
]


def line(data: Any) -> bytes:
    return json.dumps(data).encode() + b"\n"


def refusal(raw: bytes) -> str:
    with pytest.raises(errors.UsageError) as caught:
        protocol.parse_request(raw)
    return str(caught.value)


# ------------------------------------------------------------------ requests


@pytest.mark.parametrize(("op", "args"), CLI_REQUESTS)
def test_every_request_the_cli_sends_is_valid_and_keeps_its_fields(op: str, args: dict[str, Any]) -> None:
    request = protocol.parse_request(line({"op": op, **args}))
    assert request.op == op
    assert request.model_dump() == {**request.model_dump(), **args, "op": op}


def test_defaults_are_filled_in() -> None:
    assert protocol.parse_request(b'{"op": "stop"}').model_dump() == {"op": "stop", "force": False, "who": "unknown"}
    assert protocol.parse_request(b'{"op": "cancel"}').model_dump() == {
        "op": "cancel",
        "memo": None,
        "role": None,
        "reason": "",
        "all": False,
        "who": "unknown",
    }
    interrupt = protocol.parse_request(b'{"op": "interrupt", "memo": "x"}')
    assert isinstance(interrupt, protocol.InterruptRequest) and not interrupt.keep and interrupt.reason == "interrupted"


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b'{"op": "stop", "force": "yes"}', 'malformed request: field "force": Input should be a valid boolean'),
        (b'{"op": "stop", "force": 1}', 'field "force": Input should be a valid boolean'),
        (b'{"op": "cancel", "memo": ["a", "list"]}', 'field "memo": Input should be a valid string'),
        (b'{"op": "cancel", "role": 7}', 'field "role": Input should be a valid string'),
        (b'{"op": "status", "pad": "x"}', 'field "pad": Extra inputs are not permitted'),
        (b'{"op": "tell", "memo": "x"}', 'field "text": Field required'),
        (b'{"op": "interrupt"}', 'field "memo": Field required'),
        (b'{"op": "authorize", "command": "rm -rf /"}', "field \"command\": Value error, unknown command 'rm -rf /'"),
        (b'{"memo": "B-031"}', 'field "op": Field required'),
        (b'{"op": "explode"}', "unknown request 'explode'; known: status, stop, cancel, interrupt, tell"),
        (b'{"op": 5}', "unknown request 5"),
        (b"[1, 2, 3]", "expected a JSON object"),
        (b"null", "expected a JSON object"),
        (b"this is not json", "expected one JSON object per line"),
        (b'{"op": "status"', "expected one JSON object per line"),
        (b"\xff\xfe\x00 not utf-8", "expected one JSON object per line"),
        (b'{"op": "cancel", "memo": "x\\ud800"}', "a text in it is not Unicode (a lone surrogate)"),
        (b'{"op": "tell", "memo": "x", "text": "\\udfff"}', "a text in it is not Unicode"),
        (b"", "expected one JSON object per line"),
    ],
)
def test_a_malformed_request_is_a_usage_error_that_names_what_is_wrong(raw: bytes, text: str) -> None:
    assert text in refusal(raw)


def test_two_bad_fields_are_both_named() -> None:
    text = refusal(b'{"op": "cancel", "all": "yes", "who": 3}')
    assert 'field "all"' in text and 'field "who"' in text and "\n" not in text


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000,
        b"{" * 100_000,
        b'{"a": ' * 100_000,
        b"[" * (protocol.MAX_DEPTH + 1) + b"]" * (protocol.MAX_DEPTH + 1),
        b'{"op": "status", "x": ' + b"[" * 5000,
    ],
)
def test_nesting_deeper_than_the_limit_is_refused_before_it_is_parsed(raw: bytes) -> None:
    assert protocol.too_deep(raw)
    assert "nested deeper than" in refusal(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * protocol.MAX_DEPTH + b"]" * protocol.MAX_DEPTH,
        b"[" + b"[], " * 100_000 + b"[]]",  # many lists, none inside another
        line({"op": "tell", "memo": "x", "text": "[" * 100_000}),
        line({"op": "tell", "memo": "x", "text": '\\"[{' * 10_000}),  # escaped quotes do not end the string
    ],
)
def test_brackets_that_are_not_deep_nesting_pass_the_scan(raw: bytes) -> None:
    assert not protocol.too_deep(raw)
    json.loads(raw)  # and json.loads copes with them


def test_brackets_inside_a_string_are_text() -> None:
    request = protocol.parse_request(line({"op": "tell", "memo": "x", "text": '"[' * 50_000}))
    assert isinstance(request, protocol.TellRequest) and request.text == '"[' * 50_000


# ------------------------------------------------------------------ answers


def test_answers_have_one_of_two_shapes() -> None:
    assert json.loads(protocol.Answer.success({"a": None, "p": Path("/x")}).to_line()) == {
        "ok": True,
        "result": {"a": None, "p": "/x"},
    }
    assert json.loads(protocol.Answer.failure("usage", "no").to_line()) == {"ok": False, "code": "usage", "error": "no"}
    for bad in (
        {"ok": True},
        {"ok": True, "result": {}, "error": "x"},
        {"ok": False, "code": "error"},
        {"ok": False, "code": "error", "error": "x", "result": {}},
    ):
        with pytest.raises(ValueError):
            protocol.Answer(**bad)


# ------------------------------------------------------------------ the server with a stand-in handler

Handle = Callable[[protocol.Request, control.Peer], Awaitable[dict[str, Any]]]


def serve(root: Path, handle: Handle, client: Callable[[], Any], **server_args: Any) -> tuple[Any, list[str]]:
    """Run a ControlServer for ``root`` with ``handle`` while ``client()`` runs in a thread; its value and the log."""
    logged: list[str] = []

    async def main() -> Any:
        server = control.ControlServer(control.socket_path(root), handle, logged.append, **server_args)
        await server.start()
        try:
            return await asyncio.wait_for(asyncio.to_thread(client), 30)
        finally:
            await server.close()

    return asyncio.run(main()), logged


def raw_ask(root: Path, *raws: bytes) -> list[dict[str, Any]]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(control.socket_path(root)))
        answers = sock.makefile("rb")
        out = []
        for raw in raws:
            sock.sendall(raw)
            out.append(json.loads(answers.readline()))
        return out


def test_the_handler_gets_the_validated_model_and_its_result_is_the_answer(tmp_path: Path) -> None:
    """...with the peer's pid as the kernel gives it (the client is this process)."""
    seen: list[protocol.Request] = []
    pids: set[int] = set()

    async def handle(request: protocol.Request, peer: control.Peer) -> dict[str, Any]:
        seen.append(request)
        pids.add(peer.pid)
        return {"op": request.op, "where": tmp_path}

    def client() -> list[dict[str, Any]]:
        return [control.call(tmp_path, op, timeout=10, **args) for op, args in CLI_REQUESTS]

    results, logged = serve(tmp_path, handle, client)
    assert [r["op"] for r in results] == [op for op, _ in CLI_REQUESTS]
    assert results[0]["where"] == str(tmp_path)
    assert [type(r).__name__ for r in seen] == [
        "StatusRequest",
        "StopRequest",
        "CancelRequest",
        "CancelRequest",
        "InterruptRequest",
        "TellRequest",
        "WakeRequest",
        "WakeRequest",
        "ScheduleChangedRequest",
        "AuthorizeRequest",
        "AuthorizeRequest",
    ]
    assert pids == {os.getpid()}
    assert isinstance(seen[2], protocol.CancelRequest) and seen[2].memo == "B-031" and seen[2].all is False
    assert logged == []


@pytest.mark.parametrize(
    "error",
    [
        errors.UsageError("name a memo"),
        errors.UnknownMemoError("no such memo"),
        errors.AmbiguousMemoError("two"),
        errors.UnsupportedError("command backend"),
        errors.ControlError("not now"),
    ],
)
def test_an_orchestrator_error_from_the_handler_reaches_the_client_as_itself(
    tmp_path: Path, error: errors.OrchestratorError
) -> None:
    async def handle(request: protocol.Request, peer: control.Peer) -> dict[str, Any]:
        raise error

    def client() -> errors.OrchestratorError:
        with pytest.raises(errors.OrchestratorError) as caught:
            control.call(tmp_path, "cancel", timeout=10, memo="x")
        return caught.value

    raised, logged = serve(tmp_path, handle, client)
    assert type(raised) is type(error) and str(raised) == str(error) and raised.exit_code == error.exit_code
    assert logged == []


def test_any_other_failure_is_logged_with_its_traceback_and_the_server_keeps_serving(tmp_path: Path) -> None:
    async def handle(request: protocol.Request, peer: control.Peer) -> dict[str, Any]:
        if request.op == "stop":
            raise KeyError("the handler's own bug")
        if request.op == "cancel":
            cycle: dict[str, Any] = {}
            cycle["self"] = cycle
            return cycle  # JSON cannot hold it
        return {"fine": True}

    def client() -> list[Any]:
        out: list[Any] = []
        for op in ("stop", "cancel"):
            with pytest.raises(errors.ControlError) as caught:
                control.call(tmp_path, op, timeout=10)
            out.append((type(caught.value), str(caught.value)))
        out.append(control.call(tmp_path, "status", timeout=10))
        return out

    (stop, cancel, status), logged = serve(tmp_path, handle, client)
    assert stop == cancel == (errors.ControlError, "internal error; see .orchestrator/orchestrator.log")
    assert status == {"fine": True}
    assert len(logged) == 2
    assert (
        "control request 'stop' failed" in logged[0]
        and "Traceback" in logged[0]
        and "the handler's own bug" in logged[0]
    )
    assert "Traceback" in logged[1] and "ValueError" in logged[1]


def test_a_malformed_request_never_reaches_the_handler_and_is_a_usage_error(tmp_path: Path) -> None:
    seen: list[protocol.Request] = []

    async def handle(request: protocol.Request, peer: control.Peer) -> dict[str, Any]:
        seen.append(request)
        return {}

    def client() -> list[Any]:
        out = []
        for args in ({"force": "yes"}, {"pad": "x"}):
            with pytest.raises(errors.UsageError) as caught:
                control.call(tmp_path, "stop", timeout=10, **args)
            out.append(str(caught.value))
        out.append(raw_ask(tmp_path, b"[" * 100_000 + b"\n", b'{"op": 1}\n', b'{"op": "status"}\n'))
        return out

    (force, pad, raw), logged = serve(tmp_path, handle, client)
    assert force == 'malformed request: field "force": Input should be a valid boolean'
    assert pad == 'malformed request: field "pad": Extra inputs are not permitted'
    assert [a["ok"] for a in raw] == [False, False, True] and [a.get("code") for a in raw[:2]] == ["usage", "usage"]
    assert [type(r).__name__ for r in seen] == ["StatusRequest"] and logged == []


def test_a_request_longer_than_the_limit_is_a_usage_error_and_others_are_still_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "MAX_LINE", 64 * 1024)

    async def handle(request: protocol.Request, peer: control.Peer) -> dict[str, Any]:
        return {"op": request.op}

    def client() -> list[Any]:
        with pytest.raises(errors.UsageError, match="longer than 65536 bytes"):
            control.call(tmp_path, "tell", timeout=10, memo="x", text="y" * (control.MAX_LINE + 1))
        return [control.call(tmp_path, "tell", timeout=10, memo="x", text="y" * (control.MAX_LINE // 2))]

    (answer,), logged = serve(tmp_path, handle, client)
    assert answer == {"op": "tell"} and logged == []


# ------------------------------------------------------------------ the peer check: any doubt refuses


def _no_credentials(sock: socket.socket | None) -> int | None:
    return None


def _credentials_fail(sock: socket.socket | None) -> int | None:
    raise OSError(95, "Operation not supported")


def _another_user(sock: socket.socket | None) -> int | None:
    return 65534 if os.getuid() != 65534 else 65533


@pytest.mark.parametrize(
    ("peer_uid", "why"),
    [
        (_no_credentials, "could not check who is connecting (no peer credentials on this socket)"),
        (_credentials_fail, "could not check who is connecting (SO_PEERCRED failed: Operation not supported)"),
        (_another_user, "is not the socket's owner (uid"),
    ],
)
def test_a_peer_that_cannot_be_checked_is_refused_with_one_line_in_the_log(
    tmp_path: Path, peer_uid: Callable[[socket.socket | None], int | None], why: str
) -> None:
    """No credentials, an error reading them, another uid: each is a refusal, never "same user"."""
    seen: list[protocol.Request] = []

    async def handle(request: protocol.Request, peer: control.Peer) -> dict[str, Any]:
        seen.append(request)
        return {}

    def client() -> str:
        with pytest.raises(errors.ControlError) as caught:
            control.call(tmp_path, "stop", timeout=10, force=True)
        return str(caught.value)

    lines: list[str] = []
    refusal, logged = serve(tmp_path, handle, client, peer_uid=peer_uid, log=lines.append)
    assert refusal.startswith("permission denied: ") and why in refusal and "\n" not in refusal
    assert seen == [], "the request of a peer that was not checked reached the handler"
    assert len(lines) == 1 and lines[0].startswith("control: refused a connection: ") and why in lines[0]
    assert logged == [], "a refusal is not an internal error"


def test_a_platform_without_peer_credentials_refuses_rather_than_trusting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real reader on a socket module without SO_PEERCRED: no way to check is no entry."""
    monkeypatch.delattr(socket, "SO_PEERCRED")
    seen: list[protocol.Request] = []

    async def handle(request: protocol.Request, peer: control.Peer) -> dict[str, Any]:
        seen.append(request)
        return {}

    def client() -> str:
        with pytest.raises(errors.ControlError) as caught:
            control.call(tmp_path, "stop", timeout=10, force=True)
        return str(caught.value)

    refusal, logged = serve(tmp_path, handle, client)
    why = "could not check who is connecting (no peer credentials on this socket)"
    assert refusal == f"permission denied: {why}" and seen == []
    assert logged == [f"control: refused a connection: {why}"]


def test_the_real_reader_lets_the_owner_in(tmp_path: Path) -> None:
    async def handle(request: protocol.Request, peer: control.Peer) -> dict[str, Any]:
        return {"op": request.op}

    lines: list[str] = []
    answer, logged = serve(tmp_path, handle, lambda: control.call(tmp_path, "status", timeout=10), log=lines.append)
    assert answer == {"op": "status"} and lines == [] and logged == []


@pytest.mark.skipif(
    os.getuid() != 0 or not os.access("/usr/bin/python3", os.X_OK), reason="needs root to act as another user"
)
def test_a_real_connection_from_another_uid_is_refused_and_logged() -> None:
    """With the folder and socket opened up, another user's connection reaches the peer check, which names it."""
    base = Path(tempfile.mkdtemp(prefix="orch-peer-"))
    os.chmod(base, 0o711)
    probe = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(sys.argv[1])\n"
        "try:\n"
        '    s.sendall(b\'{"op": "status"}\\n\')\n'
        "except BrokenPipeError:\n"
        "    pass\n"
        "print(s.makefile().readline().strip())\n"
    )
    seen: list[protocol.Request] = []

    async def handle(request: protocol.Request, peer: control.Peer) -> dict[str, Any]:
        seen.append(request)
        return {}

    def client() -> str:
        os.chmod(base / ".orchestrator", 0o711)
        os.chmod(control.socket_path(base), 0o666)
        done = subprocess.run(
            ["/usr/bin/python3", "-c", probe, str(control.socket_path(base))],
            user=65534,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    lines: list[str] = []
    try:
        raw, logged = serve(base, handle, client, log=lines.append)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    answer = json.loads(raw)
    assert answer["ok"] is False and answer["error"] == "permission denied: uid 65534 is not the socket's owner (uid 0)"
    assert seen == []
    assert lines == ["control: refused a connection: uid 65534 is not the socket's owner (uid 0)"]


# ------------------------------------------------------------------ the client against answers that are not answers


@pytest.mark.parametrize(
    ("reply", "error", "text"),
    [
        (b"not json at all\n", errors.ControlError, "sent an answer that is not one"),
        (b"[1, 2]\n", errors.ControlError, "sent an answer that is not one"),
        (b'{"ok": true, "result": [1]}\n', errors.ControlError, "sent an answer that is not one"),
        (b'{"ok": false}\n', errors.ControlError, "refused"),
        (b'{"ok": false, "code": "no-such-code", "error": "odd"}\n', errors.ControlError, "odd"),
        (b'{"ok": false, "code": "usage", "error": "bad"}\n', errors.UsageError, "bad"),
        (b"[" * 100_000 + b"\n", errors.ControlError, "sent an answer that is not one"),
    ],
)
def test_the_client_turns_a_broken_answer_into_one_clear_error(
    tmp_path: Path, reply: bytes, error: type[errors.OrchestratorError], text: str
) -> None:
    folder = tmp_path / ".orchestrator"
    folder.mkdir(mode=0o700)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(folder / "control.sock"))
    server.listen(1)

    def behave() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(100)
            conn.sendall(reply)

    thread = threading.Thread(target=behave, daemon=True)
    thread.start()
    try:
        with pytest.raises(errors.OrchestratorError) as caught:
            control.call(tmp_path, "status", timeout=10)
        assert type(caught.value) is error and text in str(caught.value)
    finally:
        thread.join(10)
        server.close()


def test_a_pair_of_surrogates_is_one_character_and_passes() -> None:
    request = protocol.parse_request(b'{"op": "tell", "memo": "x", "text": "\\ud83d\\ude00 done"}')
    assert request.model_dump()["text"] == "\U0001f600 done"
