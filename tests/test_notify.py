"""Notifications: a real `up` tells a webhook on 127.0.0.1 (signed JSON) and a command (JSON on stdin) of a
failure; a webhook that is down or hangs delays no run; no secret reaches a line; `notify test` prints each
channel's answer; a channel whose Apprise or variable is missing is refused at start; dedupe and reminders."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Project, wait_for
from orchestrator.config import load_config
from orchestrator.core.errors import ConfigError
from orchestrator.notify.channels import DeliveryError
from orchestrator.notify.checks import check_channels, require_channels
from orchestrator.notify.delivery import Deliver, Deliveries

SECRET = "hmac-key-s3cr3t-0123456789"
TOKEN = "tok-9f8e7d6c5b4a"  # in the webhook's URL path, as a service's token would be


class Hook:
    """A webhook receiver on 127.0.0.1 that records every POST (headers and body) and answers 200."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append({"path": self.path, "headers": dict(self.headers), "body": body})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.refuse = 0  # how many POSTs to answer 500 first

        class Handler(Handler):  # type: ignore[no-redef]
            def send_response(self, code: int, message: str | None = None) -> None:
                if server.refuse > 0:
                    server.refuse -= 1
                    code = 500
                super().send_response(code, message)

        server = self
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/{TOKEN}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    yield server
    server.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_failure_is_posted_as_signed_json_and_no_secret_is_written(project: Project, hook: Hook) -> None:
    project.configure(
        notifications=[{"kind": "webhook", "url_env": "TEAM_HOOK", "secret_env": "TEAM_HOOK_SECRET"}],
    )
    project.drop("builder", "b1.md", {"subject": "the build", "agent": {"exit": 1}})
    env = {"TEAM_HOOK": hook.url, "TEAM_HOOK_SECRET": SECRET}
    orch = project.up("--until-idle", wait_ready=False, **env)
    assert orch.wait(30) == 0, orch.output
    (post,) = hook.received
    assert post["path"] == f"/hook/{TOKEN}"
    expected = "sha256=" + hmac.new(SECRET.encode(), post["body"], hashlib.sha256).hexdigest()
    assert post["headers"]["X-Orchestrator-Signature"] == expected
    body = json.loads(post["body"])
    assert body["event"] == "failed" and body["role"] == "builder" and body["memo"] == "b1.md"
    assert body["subject"] == "the build" and body["team"] == str(project.root) and "exit" in body["reason"]
    assert body["time"] and "dashboard" not in body
    assert "notify: notifications[0] (webhook, $TEAM_HOOK): told of failed b1.md (HTTP 200)" in orch.output
    checked = project.cli("config", "check", **env)
    assert checked.returncode == 0, checked.stderr
    written = [orch.output, checked.stdout, checked.stderr, project.cli("doctor", **env).stdout]
    written += [p.read_text(errors="replace") for p in (project.root / ".orchestrator").glob("*.log*")]
    written += [p.read_text(errors="replace") for p in (project.root / "memo").rglob("*") if p.is_file()]
    for text in written:
        assert SECRET not in text and TOKEN not in text


def test_each_event_has_an_id_its_retried_sends_keep(project: Project, hook: Hook) -> None:
    """Found by a review: a send retried after a timeout the receiver had in fact taken came twice, with nothing to
    tell it from a second event of the same kind."""
    project.configure(notifications=[{"kind": "webhook", "url_env": "TEAM_HOOK", "backoff": ["0.1s"]}])
    hook.refuse = 1
    for name in ("b1.md", "b2.md"):
        project.drop("builder", name, {"agent": {"exit": 1}})
    orch = project.up("--until-idle", wait_ready=False, TEAM_HOOK=hook.url)
    assert orch.wait(30) == 0, orch.output
    wait_for(lambda: len(hook.received) == 3, what="one event sent twice, the other once")
    bodies = [json.loads(post["body"]) for post in hook.received]
    ids = {body["memo"]: set() for body in bodies}
    for body in bodies:
        ids[body["memo"]].add(body["id"])
    assert [len(found) for found in ids.values()] == [1, 1], bodies
    assert ids["b1.md"] != ids["b2.md"] and all(len(i) == 32 for found in ids.values() for i in found)


def test_a_webhook_that_is_down_delays_no_run_and_is_one_line(project: Project) -> None:
    url = f"http://127.0.0.1:{closed_port()}/hook/{TOKEN}"
    project.configure(notifications=[{"kind": "webhook", "url_env": "TEAM_HOOK", "backoff": ["0.2s", "0.2s"]}])
    project.drop("builder", "b1.md", {"agent": {"exit": 1}})
    orch = project.up(TEAM_HOOK=url)
    wait_for(lambda: project.folder("builder", "failed") == ["b1.md"], what="the memo in failed/")
    orch.wait_output("not delivered after 3 tries")
    lines = [line for line in orch.output.splitlines() if "notify:" in line]
    assert len(lines) == 1 and "cannot reach it" in lines[0], lines
    assert TOKEN not in orch.output
    assert orch.stop() == 0


def test_a_webhook_that_hangs_holds_up_no_run(project: Project) -> None:
    silent = socket.socket()  # accepts connections (its backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/hook"
    try:
        project.configure(notifications=[{"kind": "webhook", "url": url, "timeout": "60s", "backoff": []}])
        project.drop("builder", "b1.md", {"agent": {"exit": 1}})
        orch = project.up()
        wait_for(lambda: project.folder("builder", "failed") == ["b1.md"], what="the failed memo")
        silent.settimeout(10)
        held, _ = silent.accept()  # the notification is being sent, and hangs
        project.drop("builder", "b2.md")
        wait_for(lambda: project.folder("builder", "archive") == ["b2.md"], what="the next memo done meanwhile")
        assert "told of" not in orch.output and "not delivered" not in orch.output  # still hanging
        held.close()
        assert orch.stop() == 0
    finally:
        silent.close()


def stdin_recorder(tmp_path: Path) -> Path:
    script = tmp_path / "record-stdin.py"
    script.write_text(
        "import sys, pathlib\npathlib.Path(sys.argv[1]).write_bytes(sys.stdin.buffer.read())\nprint('recorded')\n",
        encoding="utf-8",
    )
    return script


def test_a_command_gets_the_event_as_json_on_stdin(project: Project, tmp_path: Path) -> None:
    got = tmp_path / "got.json"
    argv = [sys.executable, str(stdin_recorder(tmp_path)), str(got)]
    project.configure(notifications=[{"kind": "command", "argv": argv, "events": ["failed", "stopped"]}])
    project.drop("builder", "b1.md", {"agent": {"exit": 1}})
    orch = project.up("--until-idle", wait_ready=False)
    assert orch.wait(30) == 0, orch.output
    body = json.loads(got.read_text(encoding="utf-8"))
    assert body["event"] == "failed" and body["memo"] == "b1.md" and body["role"] == "builder"
    assert "(exit 0: recorded)" in orch.output


def test_notify_test_prints_what_each_channel_answered(project: Project, hook: Hook, tmp_path: Path) -> None:
    got = tmp_path / "got.json"
    argv = [sys.executable, str(stdin_recorder(tmp_path)), str(got)]
    down = f"http://127.0.0.1:{closed_port()}/x"
    project.configure(
        notifications=[
            {"kind": "webhook", "url_env": "TEAM_HOOK", "secret_env": "TEAM_HOOK_SECRET"},
            {"kind": "command", "argv": argv},
            {"kind": "webhook", "url": down},
        ]
    )
    result = project.cli("notify", "test", TEAM_HOOK=hook.url, TEAM_HOOK_SECRET=SECRET)
    lines = result.stdout.splitlines()
    assert result.returncode == 11, result
    assert lines[0] == "ok   notifications[0] (webhook, $TEAM_HOOK): HTTP 200"
    assert lines[1] == f"ok   notifications[1] (command, {sys.executable}): exit 0: recorded"
    assert lines[2].startswith("fail notifications[2] (webhook, http://127.0.0.1:") and "cannot reach it" in lines[2]
    assert json.loads(hook.received[0]["body"])["event"] == "test"
    assert json.loads(got.read_text(encoding="utf-8"))["event"] == "test"
    assert SECRET not in result.stdout + result.stderr and TOKEN not in result.stdout + result.stderr
    project.configure(notifications=[{"kind": "command", "argv": argv}])
    assert project.cli("notify", "test").returncode == 0


def test_a_channel_that_cannot_work_is_refused_at_start_in_one_line(project: Project) -> None:
    project.configure(notifications=[{"kind": "apprise", "url_env": "TEAM_APPRISE"}])
    config = load_config(project.root)
    env = {"TEAM_APPRISE": f"ntfy://{TOKEN}@127.0.0.1/topic"}
    (check,) = check_channels(config, env, have_apprise=lambda: False)
    assert check.problem == "needs Apprise, which is not installed here"
    # the real `up`, in an interpreter where Apprise cannot be imported
    hidden = "import sys; sys.modules['apprise'] = None; from orchestrator.cli import main; sys.exit(main())"
    result = subprocess.run(
        [sys.executable, "-c", hidden, "up", "--root", str(project.root)],
        capture_output=True,
        text=True,
        env=project.env(**env),
        timeout=60,
    )
    assert result.returncode == 2, result
    assert result.stderr.strip().count("\n") == 0
    assert "notifications[0] (apprise, $TEAM_APPRISE): needs Apprise" in result.stderr
    assert "orchestrator[notify]" in result.stderr and TOKEN not in result.stderr
    unset = project.cli("config", "check")
    assert unset.returncode == 2 and "the variable TEAM_APPRISE is not set" in unset.stderr, unset.stderr
    with pytest.raises(ConfigError, match="the variable TEAM_APPRISE is not set"):
        require_channels(config)
    doctor = project.cli("doctor")
    assert "fail notify: notifications[0] (apprise, $TEAM_APPRISE): the variable TEAM_APPRISE is not set" in (
        doctor.stdout
    )


class Recorder:
    """A stand-in channel for the delivery logic: records what it is sent, fails while ``failures`` last."""

    def __init__(self, failures: int = 0) -> None:
        self.sent: list[dict[str, Any]] = []
        self.failures = failures

    def __call__(self, body: dict[str, Any]) -> str:
        if self.failures:
            self.failures -= 1
            raise DeliveryError("cannot reach it: refused")
        self.sent.append(body)
        return "HTTP 200"


def deliveries(send: Recorder, **kwargs: Any) -> tuple[Deliveries, list[str], list[float]]:
    lines: list[str] = []
    slept: list[float] = []
    made = Deliveries("ch", send, lines.append, sleep=slept.append, **kwargs)
    return made, lines, slept


def event(kind: str, memo: str | None = "m.md") -> Deliver:
    return Deliver({"event": kind, "memo": memo, "question" if kind == "needs_input" else "reason": "why"})


def test_the_same_event_for_the_same_memo_is_sent_once() -> None:
    send = Recorder()
    made, _lines, _slept = deliveries(send)
    for item in (event("failed"), event("failed"), event("stalled"), event("failed", "n.md")):
        made.take(item)
    made.take(event("paused", None))
    made.take(event("paused", None))  # not about a memo: each pause is news
    asked = event("needs_input")
    made.take(asked)
    made.take(asked)
    made.take(Deliver({**asked.body, "question": "and then?"}))  # the same memo asks again after an answer
    assert [(b["event"], b["memo"]) for b in send.sent] == [
        ("failed", "m.md"),
        ("stalled", "m.md"),
        ("failed", "n.md"),
        ("paused", None),
        ("paused", None),
        ("needs_input", "m.md"),
        ("needs_input", "m.md"),
    ]


def test_retries_back_off_then_give_up_in_one_line() -> None:
    send = Recorder(failures=10)
    made, lines, slept = deliveries(send, backoff=(1.0, 5.0))
    made.take(event("failed"))
    assert slept == [1.0, 5.0] and send.sent == []
    assert lines == ["ch: failed m.md not delivered after 3 tries: cannot reach it: refused"]
    send = Recorder(failures=1)
    made, lines, slept = deliveries(send, backoff=(1.0, 5.0))
    made.take(event("failed"))
    assert slept == [1.0] and len(send.sent) == 1 and lines == ["ch: told of failed m.md (HTTP 200)"]


def test_a_reminder_is_sent_though_its_question_was_sent_already() -> None:
    """When a question is told again is the loop's to say (``notify/reminders.py``, tested through the replay
    harness in ``test_asks_windows.py``); the channel sends each numbered reminder it is handed."""
    send = Recorder()
    made, _lines, _slept = deliveries(send)
    made.take(event("needs_input"))
    made.take(Deliver({**event("needs_input").body, "reminder": 1}))
    made.take(Deliver({**event("needs_input").body, "reminder": 2}))
    assert [b.get("reminder") for b in send.sent] == [None, 1, 2]


def test_apprise_sends_through_the_service_its_url_names(project: Project, hook: Hook) -> None:
    """The real Apprise, its `json://` service posting to the receiver on 127.0.0.1: no client of ours."""
    pytest.importorskip("apprise")
    project.configure(notifications=[{"kind": "apprise", "url_env": "TEAM_APPRISE"}])
    url = hook.url.replace("http://", "json://")
    result = project.cli("notify", "test", TEAM_APPRISE=url)
    assert result.returncode == 0, result
    assert result.stdout.strip() == "ok   notifications[0] (apprise, $TEAM_APPRISE): sent"
    (post,) = hook.received
    sent = json.loads(post["body"])
    assert "orchestrator: test" in sent["title"] and "this channel works" in sent["message"]
    assert TOKEN not in result.stdout + result.stderr


def test_a_crash_loop_and_the_stop_it_causes_are_told(project: Project, tmp_path: Path) -> None:
    """Events the core announces (``TeamEvent``): a critical role's crash loop, then the stop with exit 3; the
    stop is delivered before the orchestrator exits."""
    told = tmp_path / "told"
    told.mkdir()
    script = tmp_path / "record-each.py"
    script.write_text(
        "import json, sys, pathlib\n"
        "body = json.loads(sys.stdin.read())\n"
        "pathlib.Path(sys.argv[1], body['event']).write_text(json.dumps(body))\n",
        encoding="utf-8",
    )
    argv = [sys.executable, str(script), str(told)]
    project.configure(
        {"builder": {"critical": True, "crash": {"max": 1, "window": "30s"}}},
        notifications=[{"kind": "command", "argv": argv, "events": ["crash_loop", "stopped", "paused"]}],
    )
    project.drop("builder", "b1.md", {"agent": {"exit": 1}})
    orch = project.up(wait_ready=False)
    assert orch.wait(30) == 3, orch.output
    assert sorted(p.name for p in told.iterdir()) == ["crash_loop", "stopped"]
    crash = json.loads((told / "crash_loop").read_text(encoding="utf-8"))
    assert crash["role"] == "builder" and crash["memo"] == "b1.md"
    stopped = json.loads((told / "stopped").read_text(encoding="utf-8"))
    assert "critical role builder crashed" in stopped["reason"] and stopped["memo"] is None


def test_a_url_written_in_the_file_is_shown_as_its_host_only(project: Project) -> None:
    project.configure(notifications=[{"kind": "webhook", "url": f"https://hooks.example.org/services/{TOKEN}"}])
    checked = project.cli("config", "check", "--json")
    assert checked.returncode == 0, checked.stderr
    (channel,) = json.loads(checked.stdout)["notifications"]
    assert channel["url"] == "https://hooks.example.org/..." and TOKEN not in checked.stdout
    assert TOKEN not in project.cli("doctor").stdout


def test_an_agent_does_not_inherit_the_channels_secrets(project: Project, tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    dump = f"import json, os; open({str(seen)!r}, 'w').write(json.dumps([os.environ.get('TEAM_HOOK'), os.environ.get('TEAM_HOOK_SECRET'), os.environ.get('OWN')]))"
    project.configure(
        {"builder": {"command": [sys.executable, "-c", dump], "env": {"OWN": "kept"}}},
        notifications=[{"kind": "webhook", "url_env": "TEAM_HOOK", "secret_env": "TEAM_HOOK_SECRET", "backoff": []}],
    )
    project.drop("builder", "b1.md")
    hook_url = f"http://127.0.0.1:{closed_port()}/hook/{TOKEN}"
    orch = project.up("--until-idle", wait_ready=False, TEAM_HOOK=hook_url, TEAM_HOOK_SECRET=SECRET)
    assert orch.wait(30) == 0, orch.output
    assert json.loads(seen.read_text(encoding="utf-8")) == ["", "", "kept"]
