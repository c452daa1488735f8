"""The control channel of a running orchestrator: permissions, bad input, clients that misbehave, `stop`, `status`.

Raw requests go through a plain socket in the test; commands go through the
real CLI. The loop must answer every request, keep serving after a bad one, and
never let one client hold up another.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import Project, wait_for
from orchestrator.control import channel as control
from orchestrator.core.errors import UnknownMemoError

LONG = 300


def sock_path(project: Project) -> Path:
    return project.root / ".orchestrator" / "control.sock"


def connect(project: Project, timeout: float = 10.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(sock_path(project)))
    return sock


def ask(sock: socket.socket, raw: bytes) -> dict[str, Any]:
    """Send raw bytes (one request line) and read one answer line."""
    sock.sendall(raw)
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        assert chunk, f"the orchestrator closed the connection without answering {raw[:80]!r}"
        data += chunk
    return json.loads(data)


def status_answers(project: Project, timeout: float = 5.0) -> dict[str, Any]:
    """A status request from a fresh client, answered within ``timeout`` (not a speed check: a hang check)."""
    return control.call(project.root, "status", timeout=timeout)


def started(project: Project, name: str) -> dict[str, Any]:
    return wait_for(
        lambda: next((r for r in project.records() if Path(r["memo"] or "").name == name), None),
        what=f"{name}'s agent to start",
    )


def tree_of(record: dict[str, Any]) -> dict[int, float]:
    return {pid: psutil.Process(pid).create_time() for pid in [record["pid"], *record["children"]]}


def alive_of(tree: dict[int, float]) -> list[int]:
    out = []
    for pid, ctime in tree.items():
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - ctime) <= 0.05 and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture
def running(project: Project) -> Iterator[Project]:
    project.configure()
    project.orch = project.up()  # type: ignore[attr-defined]
    yield project


# ------------------------------------------------------------------ permissions


@pytest.mark.os_level
def test_socket_folder_is_0700_and_socket_0600(running: Project) -> None:
    folder = running.root / ".orchestrator"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    info = sock_path(running).stat()
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.getuid()
    assert running.orch.stop() == 0  # type: ignore[attr-defined]
    assert not sock_path(running).exists(), "the socket outlived its orchestrator"


@pytest.mark.skipif(
    os.getuid() != 0 or not os.access("/usr/bin/python3", os.X_OK), reason="needs root to act as another user"
)
def test_another_user_cannot_use_the_channel() -> None:
    """Three locks, each checked with the ones before it opened: folder 0700, socket 0600, the peer's uid."""
    base = Path(tempfile.mkdtemp(prefix="orch-owner-"))
    try:
        os.chmod(base, 0o711)  # only the folders the orchestrator makes stand in the way
        project = Project(base)
        project.configure()
        orch = project.up()
        probe = (
            "import json, socket, sys\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "try:\n"
            "    s.connect(sys.argv[1])\n"
            "except PermissionError:\n"
            "    print('EACCES'); sys.exit()\n"
            "try:\n"
            '    s.sendall(b\'{"op": "stop", "force": true}\\n\')\n'
            "except BrokenPipeError:\n"
            "    pass  # refused and closed before reading the request: the answer is still there\n"
            "print(s.makefile().readline().strip())\n"
        )

        def as_nobody() -> str:
            result = subprocess.run(
                ["/usr/bin/python3", "-c", probe, str(sock_path(project))],
                user=65534,
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert result.returncode == 0, result.stderr
            return result.stdout.strip()

        def status_as_nobody() -> subprocess.CompletedProcess[str]:
            """``orchestrator status`` as another user: this checkout's client, standard library only."""
            return subprocess.run(
                ["/usr/bin/python3", "-S", "-m", "orchestrator", "status", "--root", str(project.root)],
                user=65534,
                capture_output=True,
                text=True,
                timeout=30,
                cwd="/",
                env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent), "PATH": os.environ["PATH"]},
            )

        try:
            # found by a user-view hunt: it fell back to the records, and said state.db: Permission denied (exit 1)
            denied = status_as_nobody()
            assert denied.returncode == 4, (denied.stdout, denied.stderr)
            assert denied.stderr == (
                f"orchestrator: cannot reach the orchestrator of {project.root}: permission denied (it belongs to "
                "another user)\n"
            )
            assert as_nobody() == "EACCES"  # the folder
            os.chmod(base / ".orchestrator", 0o711)
            assert as_nobody() == "EACCES"  # the socket
            os.chmod(sock_path(project), 0o666)
            answer = json.loads(as_nobody())  # the peer check
            assert answer["ok"] is False and "permission denied" in answer["error"]
            assert status_answers(project)["ending"] is None, "another user's stop request was obeyed"
        finally:
            assert orch.stop() == 0
            project.cleanup()
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ bad input


def test_bad_requests_get_an_error_answer_and_the_loop_keeps_serving(running: Project) -> None:
    bad = [
        b"this is not json\n",
        b"[1, 2, 3]\n",
        b'"status"\n',
        b"42\n",
        b"null\n",
        b'{"op": 5}\n',
        b'{"memo": "B-031"}\n',
        b'{"op": "explode"}\n',
        b"\xff\xfe\x00 not utf-8\n",
        b'{"op": "status"\n',
        b'{"op": "cancel"}\n',
        b'{"op": "cancel", "memo": ["a", "list"]}\n',
        b'{"op": "cancel", "role": 7}\n',
        b"\n",
    ]
    with connect(running) as sock:
        for raw in bad:
            answer = ask(sock, raw)
            assert answer["ok"] is False and answer["error"], (raw, answer)
            assert "internal error" not in answer["error"], (raw, answer)
        unknown = ask(sock, b'{"op": "explode"}\n')
        assert "unknown request 'explode'" in unknown["error"]
        # the same connection still works, and so does a new one
        assert ask(sock, b'{"op": "status"}\n')["ok"] is True
    assert status_answers(running)["running"] is True
    assert "Traceback" not in running.orch.output  # type: ignore[attr-defined]
    assert running.orch.stop() == 0  # type: ignore[attr-defined]


def test_a_request_longer_than_the_limit_is_refused_and_the_loop_keeps_serving(running: Project) -> None:
    sock = connect(running)
    answer = None
    try:
        sock.sendall(b'{"op": "status", "pad": "' + b"x" * (control.MAX_LINE + 1024) + b'"}\n')
        with sock.makefile("rb") as answers:
            answer = json.loads(answers.readline())
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may close before we finish sending; it must survive either way
    finally:
        sock.close()
    if answer is not None:
        assert answer["ok"] is False and "longer than" in answer["error"]
    assert status_answers(running)["running"] is True
    assert running.orch.stop() == 0  # type: ignore[attr-defined]


def test_an_orchestrator_ending_with_idle_clients_connected_prints_no_traceback(running: Project) -> None:
    idle = [connect(running) for _ in range(3)]
    half = connect(running)
    half.sendall(b'{"op": "sta')  # a request never finished
    try:
        assert status_answers(running)["running"] is True  # every connection is being served
        assert running.orch.stop() == 0  # type: ignore[attr-defined]
    finally:
        for sock in [*idle, half]:
            sock.close()
    output = running.orch.output  # type: ignore[attr-defined]
    assert "Traceback" not in output and "Exception" not in output, output


def test_a_usage_error_found_by_the_orchestrator_keeps_its_exit_status(running: Project) -> None:
    from orchestrator.core import errors

    with pytest.raises(errors.UsageError, match="name a memo"):
        control.call(running.root, "cancel", memo="")
    assert running.orch.stop() == 0  # type: ignore[attr-defined]


# ------------------------------------------------------------------ clients that misbehave


def test_silent_and_half_finished_clients_do_not_block_others(running: Project) -> None:
    silent = [connect(running) for _ in range(3)]
    half = connect(running)
    half.sendall(b'{"op": "sta')  # and then nothing: no end of line
    try:
        for _ in range(3):
            assert status_answers(running)["running"] is True
        result = running.cli("status")
        assert result.returncode == 0 and "orchestrator running" in result.stdout
    finally:
        for sock in [*silent, half]:
            sock.close()
    assert status_answers(running)["running"] is True
    assert running.orch.stop() == 0  # type: ignore[attr-defined]


def test_clients_that_disconnect_mid_request(running: Project) -> None:
    # gone in the middle of a line
    sock = connect(running)
    sock.sendall(b'{"op": "status", "wh')
    sock.close()
    # gone after asking for a cancel, before its answer: the cancel still happens in full
    running.drop("builder", "B-031.md", {"id": "B-031", "agent": {"sleep": LONG, "grandchild": True}})
    tree = tree_of(started(running, "B-031.md"))
    sock = connect(running)
    sock.sendall(b'{"op": "cancel", "memo": "B-031", "who": "a client that left"}\n')
    sock.close()
    wait_for(lambda: running.folder("builder", "cancelled") == ["B-031.md"], what="the cancel done")
    wait_for(lambda: alive_of(tree) == [], what="the agent's tree dead")
    snap = status_answers(running)
    assert snap["runs"] == [] and snap["recent"][0]["state"] == "cancelled"
    assert running.orch.stop() == 0  # type: ignore[attr-defined]


# ------------------------------------------------------------------ stop


def test_stop_lets_the_running_agent_finish(project: Project) -> None:
    project.configure()
    orch = project.up()
    project.drop("builder", "slow.md", {"id": "slow", "agent": {"sleep": 4}})
    started(project, "slow.md")

    result = project.cli("stop")

    assert result.returncode == 0, result.stderr
    assert "is ending" in result.stdout and "1 running agent(s) finish" in result.stdout
    orch.wait_output("waiting for 1 running agent(s)")
    assert project.status()["ending"] == "graceful"
    project.drop("builder", "late.md", {"id": "late"})  # nothing new starts while ending
    assert orch.wait(30) == 0, orch.output
    assert project.folder("builder", "archive") == ["slow.md"]
    assert project.folder("builder", "inbox") == ["late.md"]
    assert [Path(r["memo"]).name for r in project.records()] == ["slow.md"]


@pytest.mark.os_level
def test_stop_force_kills_agents_and_returns_their_memos(project: Project) -> None:
    project.configure({"builder": {"grace": "10s"}})
    orch = project.up()
    project.drop("builder", "B-031.md", {"id": "B-031", "agent": {"sleep": LONG, "grandchild": True}})
    tree = tree_of(started(project, "B-031.md"))

    result = project.cli("stop", "--force")

    assert result.returncode == 0, result.stderr
    assert "killing 1 agent(s)" in result.stdout
    assert orch.wait() == 1, orch.output
    assert alive_of(tree) == []
    assert project.folder("builder", "inbox") == ["B-031.md"] and project.folder("builder", "active") == []
    snap = project.status()
    assert snap["running"] is False and snap["runs"] == []
    assert snap["recent"][0]["state"] == "returned"


def test_stop_wait_gives_up_at_its_timeout_naming_what_still_runs(project: Project) -> None:
    """An agent that outlives the wait: `stop --wait --timeout` exits 11 (a wait that ran out) with one line, and
    the ending goes on."""
    project.configure({"builder": {"timeout": "5m", "grace": "3s"}, "reviewer": {"timeout": "1m", "grace": "1m"}})
    orch = project.up()
    project.drop("builder", "long.md", {"id": "L-1", "agent": {"sleep": LONG}})
    started(project, "long.md")
    assert project.status()["longest_stop"] == 303.0  # what the default wait is made of: 5m + 3s

    began = time.monotonic()
    result = project.cli("stop", "--wait", "--timeout", "1s")

    assert time.monotonic() - began < 30, "the wait outlasted its timeout"
    assert result.returncode == 11, (result.stdout, result.stderr)
    assert "is ending" in result.stdout
    (line,) = result.stderr.splitlines()
    (run,) = project.status()["runs"]
    assert line == (
        f"orchestrator (pid {orch.proc.pid}) still runs after 1s: run {run['run_id']} (builder, L-1, "
        "running); it goes on ending (`orchestrator stop --force` stops its agents now)"
    )
    assert project.status()["ending"] == "graceful", "giving up the wait must not change the ending"

    forced = project.cli("stop", "--force", "--timeout", "60s")
    assert forced.returncode == 0, forced.stderr
    assert orch.wait() == 1, orch.output
    assert project.folder("builder", "inbox") == ["long.md"]


def test_stop_with_a_bad_timeout_is_a_usage_error(running: Project) -> None:
    result = running.cli("stop", "--wait", "--timeout", "soon")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "orchestrator stop: --timeout: expected a duration such as 5s, 500ms, 30m or a number of seconds, got 'soon'"
    )
    assert running.status()["ending"] is None, "a refused stop stopped nothing"
    assert running.orch.stop() == 0  # type: ignore[attr-defined]


def test_the_default_wait_is_the_longest_timeout_and_grace_plus_a_margin() -> None:
    from orchestrator.commands.running import default_stop_timeout, still_running

    assert default_stop_timeout({"longest_stop": 1810.0}) == 1840.0
    runs = [
        {"run_id": i, "role": "pm", "memo": f"m{i}.md", "memos": [f"m{i}.md"], "state": "running"} for i in range(12)
    ]
    runs[0]["memos"] = ["m0.md", "x.md", "y.md"]
    line = still_running({"pid": 7, "runs": runs}, 2.5, force=True)
    assert line.startswith("orchestrator (pid 7) still runs after 2.5s: run 0 (pm, m0.md +2 memo(s), running), run 1 ")
    assert "run 9 (pm, m9.md, running), and 2 more; it goes on killing them" in line and "\n" not in line


# ------------------------------------------------------------------ status


def test_status_through_the_channel_shows_pids_elapsed_and_cancelling(project: Project) -> None:
    project.configure({"builder": {"grace": "3s"}})
    orch = project.up()
    project.drop(
        "builder",
        "stubborn.md",
        {"id": "S-1", "subject": "ignores TERM", "agent": {"sleep": LONG, "ignore_term": True}},
    )
    record = started(project, "stubborn.md")
    snap = project.status()
    assert snap["running"] is True and snap["pid"] == orch.proc.pid
    [run] = snap["runs"]
    assert run["state"] == "running" and run["pid"] == record["pid"] and run["elapsed"] >= 0
    wait_for(lambda: project.status()["runs"][0]["elapsed"] > run["elapsed"], what="elapsed time to grow")

    canceller = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "cancel", "S-1", "--json", "--root", str(project.root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=project.env(),
    )
    try:
        cancelling = wait_for(
            lambda: next((r for r in project.status()["runs"] if r["state"] == "cancelling"), None),
            what="the run shown as cancelling",
        )
        assert cancelling["pid"] == record["pid"] and cancelling["elapsed"] > 0
        human = project.cli("status")
        assert human.returncode == 0 and "cancelling" in human.stdout, human.stdout
        out, err = canceller.communicate(timeout=60)
    finally:
        if canceller.poll() is None:
            canceller.kill()
            canceller.communicate()
    assert canceller.returncode == 0, err
    answer = json.loads(out)
    assert answer["escalated"] is True and answer["previous_state"] == "running"
    snap = project.status()
    assert snap["runs"] == [] and snap["recent"][0]["state"] == "cancelled"
    assert orch.stop() == 0


def test_status_falls_back_to_the_database_without_an_orchestrator(project: Project) -> None:
    project.configure()
    snap = project.status()
    assert snap["running"] is False and snap["runs"] == [] and snap["recent"] == []
    orch = project.up()
    project.drop("builder", "done.md", {"id": "D-1"})
    wait_for(lambda: project.folder("builder", "archive") == ["done.md"], what="done.md archived")
    assert orch.stop() == 0
    snap = project.status()
    assert snap["running"] is False and snap["recent"][0]["memo_id"] == "D-1"
    result = project.cli("status")
    assert result.returncode == 0 and "no orchestrator running" in result.stdout


def test_cancel_of_the_last_agent_while_ending_gets_its_answer(project: Project) -> None:
    """`stop` waits for a long agent; cancelling that agent ends the orchestrator, after it answered the cancel."""
    project.configure()
    orch = project.up()
    project.drop("builder", "long.md", {"id": "L-1", "agent": {"sleep": LONG, "grandchild": True}})
    tree = tree_of(started(project, "long.md"))
    assert project.cli("stop").returncode == 0
    orch.wait_output("waiting for 1 running agent(s)")

    result = project.cli("cancel", "L-1", "--json")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["state"] == "cancelled"
    assert alive_of(tree) == []
    assert orch.wait() == 0, orch.output
    assert project.folder("builder", "cancelled") == ["long.md"]


# ------------------------------------------------------------------ the client against servers that misbehave


def _one_shot_server(root: Path, behave: Any) -> Any:
    """A stand-in server on the project's socket path that treats its one client with ``behave(conn)``."""
    import threading

    folder = root / ".orchestrator"
    folder.mkdir(mode=0o700, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(folder / "control.sock"))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            behave(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


@pytest.mark.parametrize(
    ("behave", "error", "text"),
    [
        # refuses at once, before the request is read (what the real server does for another uid)
        (
            lambda c: c.sendall(
                b'{"ok": false, "code": "error", "error": "permission denied: not the socket\'s owner"}\n'
            ),
            "ControlError",
            "permission denied",
        ),
        # read, never answered (it crashed): the request may have taken effect, as for a wait that ran out
        (lambda c: c.recv(100), "DeadlineError", "closed the connection without answering `status`: the request may"),
        (
            lambda c: (c.recv(100), c.sendall(b'{"ok": false, "code": "ambiguous", "error": "two match"}\n')),
            "AmbiguousMemoError",
            "two match",
        ),
        (
            lambda c: (c.recv(100), c.sendall(b'{"ok": true, "result": {"x": 1}')),
            "DeadlineError",
            "closed the connection",
        ),
    ],
)
def test_the_client_turns_every_server_failure_into_one_clear_error(
    tmp_path: Path, behave: Any, error: str, text: str
) -> None:
    from orchestrator.core import errors

    server, thread = _one_shot_server(tmp_path, behave)
    try:
        with pytest.raises(errors.OrchestratorError) as caught:
            control.call(tmp_path, "status", timeout=10)
        assert type(caught.value).__name__ == error and text in str(caught.value)
    finally:
        thread.join(10)
        server.close()


def test_the_client_gives_up_on_a_server_that_never_answers(tmp_path: Path) -> None:
    import threading

    from orchestrator.core import errors

    release = threading.Event()
    server, thread = _one_shot_server(tmp_path, lambda c: (c.recv(100), release.wait(10)))
    try:
        with pytest.raises(errors.DeadlineError, match="did not answer `status` within 0.5s"):
            control.call(tmp_path, "status", timeout=0.5)
    finally:
        release.set()
        thread.join(10)
        server.close()


def test_a_refusal_sent_before_the_request_is_read_still_reaches_the_client(tmp_path: Path) -> None:
    """The server refuses another user's connection without reading; a request too big to be buffered meets a
    closed socket while it is being sent, and the client must still read and report the refusal."""
    from orchestrator.core import errors

    refusal = b'{"ok": false, "code": "error", "error": "permission denied: not the socket\'s owner"}\n'
    server, thread = _one_shot_server(tmp_path, lambda c: c.sendall(refusal))
    try:
        with pytest.raises(errors.ControlError, match="permission denied"):
            control.call(tmp_path, "status", timeout=10, pad="x" * (8 * 1024 * 1024))
    finally:
        thread.join(10)
        server.close()


def test_interrupt_and_tell_on_a_command_agent_are_refused_and_it_keeps_running(project: Project) -> None:
    project.configure()
    orch = project.up()
    project.drop("builder", "B-031.md", {"id": "B-031", "agent": {"sleep": LONG}})
    tree = tree_of(started(project, "B-031.md"))
    for args in (("interrupt", "B-031"), ("tell", "B-031", "please stop")):
        result = project.cli(*args)
        assert result.returncode == 9, result.stderr
        assert result.stderr.count("\n") == 1 and "command backend" in result.stderr
    assert project.cli("interrupt", "nope").returncode == 6
    # by a path relative to here, as cancel takes one (found by a user-view hunt: it was "already finished")
    path = "memo/builder/active/B-031.md"
    for args in (("interrupt", path), ("tell", path, "please stop")):
        result = subprocess.run(
            [*project.command, *args, "--root", str(project.root)],
            capture_output=True,
            text=True,
            cwd=project.root,
            env=project.env(),
            timeout=60,
        )
        assert result.returncode == 9 and "command backend" in result.stderr, (args, result.stderr)
    with pytest.raises(UnknownMemoError, match="no running memo matches"):  # not "already finished: running"
        control.call(project.root, "interrupt", memo=path, who="a raw request")
    # a path into a folder whose name is not UTF-8 cannot be sent: one line, nothing done
    odd = os.path.join(os.fsencode(project.root.parent), b"caf\xe9")
    os.mkdir(odd)
    result = subprocess.run(
        [*project.command, "cancel", "./B-031.md", "--root", str(project.root)],
        capture_output=True,
        text=True,
        cwd=odd,
        env=project.env(),
        timeout=60,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "caf\\xe9/B-031.md' is not UTF-8 text" in result.stderr, result.stderr
    assert alive_of(tree) == list(tree)
    assert [r["state"] for r in project.status()["runs"]] == ["running"]
    assert project.cli("cancel", "B-031").returncode == 0
    assert orch.stop() == 0


# ------------------------------------------------------------------ hostile input (defects 6 and 7)


def test_a_deeply_nested_request_gets_an_error_answer_and_the_loop_keeps_serving(running: Project) -> None:
    """100,000 nested lists once raised RecursionError in the answer path: no answer, a traceback from `up`."""
    with connect(running) as sock:
        for raw in (b"[" * 100_000 + b"\n", b'{"op": "status", "x": ' * 100_000 + b"\n"):
            answer = ask(sock, raw)
            assert answer["ok"] is False and answer["code"] == "usage", answer
            assert "nested deeper than" in answer["error"], answer
        # brackets inside a string are text, not nesting: this one is a real request, for a memo that is not there
        answer = ask(sock, json.dumps({"op": "cancel", "memo": "[" * 100_000, "who": "test"}).encode() + b"\n")
        assert answer["ok"] is False and answer["code"] == "unknown_memo", answer["error"][:200]
        assert ask(sock, b'{"op": "status"}\n')["ok"] is True
    assert status_answers(running)["running"] is True
    assert running.orch.stop() == 0  # type: ignore[attr-defined]
    output = running.orch.output  # type: ignore[attr-defined]
    assert "Traceback" not in output and "RecursionError" not in output, output[-2000:]


def test_a_stopped_orchestrator_with_a_full_backlog_gets_one_line_not_a_traceback(running: Project) -> None:
    """With the orchestrator stopped (SIGSTOP) and its socket's backlog full, `status` once printed a
    BlockingIOError traceback; it must retry briefly, then say in one line that the orchestrator does not answer."""
    import signal

    pid = running.orch.proc.pid  # type: ignore[attr-defined]
    pending: list[socket.socket] = []
    try:
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED, what="the orchestrator stopped")
        for _ in range(10_000):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                sock.connect(str(sock_path(running)))
            except BlockingIOError:
                sock.close()
                break
            pending.append(sock)
        else:
            pytest.fail("the socket's backlog never filled")
        assert pending, "not one connection was queued before the backlog was full"
        result = running.cli("status")
    finally:
        os.kill(pid, signal.SIGCONT)
        for sock in pending:
            sock.close()
    assert result.returncode == 11, (result.returncode, result.stderr)  # a wait that ran out
    assert result.stderr.count("\n") == 1 and "does not answer" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "BlockingIOError" not in result.stderr, result.stderr
    # once resumed it serves again, and the queued connections that left did it no harm
    assert status_answers(running, timeout=10)["running"] is True
    assert running.orch.stop() == 0  # type: ignore[attr-defined]
    assert "Traceback" not in running.orch.output  # type: ignore[attr-defined]
