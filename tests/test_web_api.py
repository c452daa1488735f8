"""The dashboard's JSON API against a real ``up`` with stand-in agents: the door, the reads, the actions.

Only the agent is a stand-in; the server, the loop, the gate and the files are the real ones, reached over real
HTTP with httpx.
"""

from __future__ import annotations

import json
import re
import socket
import stat
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import Project, claude_records, pid_alive, wait_for
from orchestrator.core.view import CANCEL_KEYS, STATUS_KEYS
from web_harness import Dashboard, start

LONG = 60


@pytest.fixture
def dash(project: Project):
    project.configure({"builder": {"grace": "5s"}, "planner": {}})
    board = start(project)
    yield board
    board.close()


def started(project: Project, memo: str) -> dict:
    return wait_for(lambda: next((r for r in project.records() if r.get("memo", "").endswith(memo)), None), what=memo)


# ---------------------------------------------------------------- the door


def test_every_request_needs_the_token_the_host_and_for_actions_the_origin(project: Project, dash: Dashboard) -> None:
    bare = httpx.get(dash.url + "api/v1/state")
    assert bare.status_code == 401 and bare.json()["error"]["code"] == "unauthorized"
    wrong = httpx.get(dash.url + "api/v1/state", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "wrong token" in wrong.json()["error"]["message"]
    # DNS rebinding: the right token, a foreign Host; refused before the token is even looked at
    rebound = dash.get("/api/v1/state", headers={"Host": f"evil.example:{dash.host.split(':')[1]}"})
    assert rebound.status_code == 403 and rebound.json()["error"]["code"] == "forbidden_host"
    assert dash.get("/api/v1/state", headers={"Host": "localhost:" + dash.host.split(":")[1]}).status_code == 200
    foreign = dash.post("/api/v1/cancel", {"role": "builder"}, headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "forbidden_origin"
    cross = dash.post("/api/v1/cancel", {"role": "builder"}, headers={"Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403
    own = dash.post("/api/v1/cancel", {"role": "builder"}, headers={"Origin": dash.url.rstrip("/")})
    assert own.status_code == 200, own.text
    # a page without the token says how to get in
    page = httpx.get(dash.url)
    assert page.status_code == 401 and "orchestrator web" in page.text and "<html" in page.text
    # the token is traded for an HttpOnly, SameSite=Strict cookie, which then opens the API
    traded = dash.post("/api/v1/session")
    cookie = traded.headers["set-cookie"]
    assert (
        traded.status_code == 200 and "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    )
    with httpx.Client(base_url=dash.url, cookies=traded.cookies) as browser:
        assert browser.get("/api/v1/state").status_code == 200
        assert browser.get("/").status_code == 200
    # web.json holds what `orchestrator web` prints, for this user only
    info = project.root / ".orchestrator" / "web.json"
    assert stat.S_IMODE(info.stat().st_mode) == 0o600
    printed = project.cli("web")
    assert printed.returncode == 0 and printed.stdout.strip() == f"{dash.url}#token={dash.token}"
    assert dash.token not in (project.root / ".orchestrator" / "orchestrator.log").read_text()
    assert dash.token not in json.dumps(project.status())
    assert dash.orch.stop() == 0
    assert not info.exists()
    gone = project.cli("web")
    assert gone.returncode == 4 and "no dashboard" in gone.stderr


def test_bad_requests_get_one_json_error(project: Project, dash: Dashboard) -> None:
    for answer, status, code in (
        (dash.get("/api/v1/runs/999"), 404, "unknown_run"),
        (dash.get("/api/v1/nowhere"), 404, "not_found"),
        (dash.get("/api/v1/history?limit=x"), 400, "usage"),
        (dash.post("/api/v1/runs/999/cancel"), 400, "usage"),
        (dash.post("/api/v1/send", {"to": "builder"}), 400, "usage"),
        (dash.post("/api/v1/send", {"to": "nobody", "text": "hi"}), 404, "unknown_role"),
        (
            dash.client.post("/api/v1/send", content=rb'{"to": "builder", "text": "ok", "subject": "\ud800"}'),
            400,
            "usage",
        ),
        (dash.post("/api/v1/cancel", {}), 400, "usage"),
        (dash.client.post("/api/v1/send", content=b"{not json"), 400, "usage"),
        (dash.get("/api/v1/trace/NOPE-1"), 404, "unknown_memo"),
        (dash.post("/api/v1/memos/NOPE-1/release"), 404, "unknown_memo"),
        (dash.get("/api/v1/memory/search"), 400, "usage"),
        (dash.client.delete("/api/v1/state"), 405, "method_not_allowed"),
    ):
        assert answer.status_code == status, (answer.request.url, answer.text)
        error = answer.json()["error"]
        assert error["code"] == code and error["message"] and "Traceback" not in answer.text
    assert 'field "text"' in dash.post("/api/v1/send", {"to": "builder"}).json()["error"]["message"]
    assert dash.orch.stop() == 0


def test_read_only_refuses_every_action(project: Project) -> None:
    project.configure({"builder": {}}, web={"port": 0, "read_only": True})
    board = start(project, "--plain")
    assert board.get("/api/v1/state").status_code == 200
    for path in ("/api/v1/cancel", "/api/v1/send", "/api/v1/roles/builder/wake", "/api/v1/runs/1/retry"):
        answer = board.post(path, {"role": "builder"})
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "read_only", path
    board.close()
    assert board.orch.stop() == 0


def test_a_host_beyond_loopback_needs_allow_remote(project: Project) -> None:
    project.configure({"builder": {}}, web={"port": 0, "host": "0.0.0.0"})
    refused = project.cli("config", "check")
    assert refused.returncode == 2 and "allow_remote" in refused.stderr and len(refused.stderr.splitlines()) == 1
    project.configure({"builder": {}})
    bad = project.up("--web", "not-a-port", wait_ready=False)
    assert bad.wait() == 2 and "--web" in bad.output and "Traceback" not in bad.output


def test_behind_a_tls_proxy_its_public_name_and_https_origin_are_admitted(project: Project) -> None:
    public = "https://team.example.org"
    project.configure({"builder": {}}, web={"port": 0, "allow_remote": True, "public_urls": [public]})
    board = start(project, "--plain")
    board.orch.wait_output(f"dashboard: {public}/#token={board.token}")
    assert "reachable from other machines" in board.orch.output and public in board.orch.output
    # the proxy passes the public name on as the Host; its Origin is https
    proxied = {"Host": "team.example.org", "Origin": public}
    assert board.get("/api/v1/state", headers=proxied).status_code == 200
    acted = board.post("/api/v1/cancel", {"role": "builder"}, headers=proxied)
    assert acted.status_code == 200, acted.text
    # the bound address still opens it (a proxy may pass that on instead)
    assert (
        board.post("/api/v1/cancel", {"role": "builder"}, headers={"Origin": board.url.rstrip("/")}).status_code == 200
    )
    # a name the dashboard was not given, or the public name over plain http, is still refused
    foreign = board.get("/api/v1/state", headers={"Host": "evil.example"})
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "forbidden_host"
    assert "public_urls" in foreign.json()["error"]["message"]
    for origin in ("https://evil.example", "http://team.example.org"):
        answer = board.post("/api/v1/cancel", {"role": "builder"}, headers={**proxied, "Origin": origin})
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden_origin", origin
    # the page behind https gets a Secure cookie, which the public name then takes instead of the token
    traded = board.post("/api/v1/session", headers=proxied)
    assert traded.status_code == 200 and "secure" in traded.headers["set-cookie"].lower()
    cookie = {"Cookie": traded.headers["set-cookie"].split(";", 1)[0]}
    assert httpx.get(board.url + "api/v1/state", headers={**proxied, **cookie}).status_code == 200
    board.close()
    assert board.orch.stop() == 0


def test_public_urls_need_allow_remote(project: Project) -> None:
    project.configure({"builder": {}}, web={"port": 0, "public_urls": ["https://team.example.org"]})
    refused = project.cli("config", "check")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "web: public_urls" in refused.stderr and "allow_remote: true" in refused.stderr


def test_a_session_cookie_lasts_its_max_age_and_ends_with_the_start(project: Project) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    project.configure({"builder": {}}, web={"port": port, "session_max_age": "2h"})
    first = start(project, "--plain")
    traded = first.post("/api/v1/session")
    assert traded.status_code == 200 and "max-age=7200" in traded.headers["set-cookie"].lower()
    assert "secure" not in traded.headers["set-cookie"].lower()  # plain http: a Secure cookie would not come back
    cookie = {"Cookie": traded.headers["set-cookie"].split(";", 1)[0]}
    assert httpx.get(first.url + "api/v1/state", headers=cookie).status_code == 200
    first.close()
    assert first.orch.stop() == 0
    again = start(project, "--plain")
    assert again.url == first.url and again.token != first.token
    # the same cookie, at the same address, after the restart: the new start's token did not make it
    stale = httpx.get(again.url + "api/v1/state", headers=cookie)
    assert stale.status_code == 401 and "session has ended" in stale.json()["error"]["message"]
    page = httpx.get(again.url, headers=cookie)
    assert page.status_code == 401 and "orchestrator web" in page.text
    fresh = again.post("/api/v1/session").headers["set-cookie"].split(";", 1)[0]
    assert httpx.get(again.url + "api/v1/state", headers={"Cookie": fresh}).status_code == 200
    assert not (project.root / ".orchestrator" / "web-session").exists(), "no cookie secret outlives a start"
    again.close()
    assert again.orch.stop() == 0


# ---------------------------------------------------------------- reads


def test_state_is_what_status_json_prints_and_a_new_run_is_seen_at_once(project: Project, dash: Dashboard) -> None:
    with httpx.Client(base_url=dash.url, headers={"Authorization": f"Bearer {dash.token}"}, timeout=30) as listener:
        with listener.stream("GET", "/api/v1/events") as stream:
            lines = stream.iter_lines()
            assert any(line == "event: hello" for line in _until(lines, "event: hello"))
            project.drop("builder", "B-1.md", {"id": "B-1", "subject": "live", "agent": {"sleep": LONG}})
            record = started(project, "B-1.md")
            seen = time.time()
            running = None
            for line in lines:
                if line.startswith("data:") and '"state":"running"' in line:
                    running = json.loads(line[5:])
                    break
            assert running is not None and running["run"]["memo_id"] == "B-1"
            assert time.time() - seen < 1.0, "the run's start reached the events stream late"
    state = dash.state()
    status = project.status()
    assert set(state) == set(status) and state["pid"] == status["pid"] == dash.orch.proc.pid
    assert [(r["run_id"], r["state"]) for r in state["runs"]] == [(r["run_id"], r["state"]) for r in status["runs"]]
    assert list(state["runs"][0]) == list(STATUS_KEYS)
    view = dash.get(f"/api/v1/runs/{state['runs'][0]['run_id']}").json()
    assert view["run"]["pid"] == record["pid"] and view["attempts"][0]["attempt"] == 1
    log = dash.get(f"/api/v1/runs/{view['run']['run_id']}/log").json()
    assert "text" in log
    for path in ("/api/v1/history", "/api/v1/history?role=builder&all=1", "/api/v1/schedule", "/api/v1/journal"):
        assert dash.get(path).status_code == 200, path
    assert dash.get("/api/v1/handoff/builder").json()["role"] == "builder"
    unknown = dash.get("/api/v1/handoff/nobody")  # a role not in roles.yaml is not found (it was a 400)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_role", unknown.text
    assert dash.get("/api/v1/memory/search?q=anything").json()["entries"] == []
    assert dash.get("/api/v1/trace/B-1").json()["roots"][0]["id"] == "B-1"
    metrics = dash.get("/metrics").text
    assert 'orchestrator_runs{role="builder",state="running"} 1.0' in metrics
    assert 'orchestrator_attempts_total{role="builder"} 1.0' in metrics
    for page in (
        "/",
        f"/runs/{view['run']['run_id']}",
        "/history",
        "/schedule",
        "/journal",
        "/memory?q=x",
        "/trace/B-1",
    ):
        answer = dash.get(page)
        assert answer.status_code == 200 and "<html" in answer.text, page
    assert dash.post("/api/v1/cancel", {"role": "builder"}).status_code == 200
    # the cancelled run's note is a new version of the handoff: the page says when each version was kept
    kept = re.compile(r"<td>1</td>\s*<td>\d+</td>\s*<td>\d{4}-\d\d-\d\d")
    wait_for(lambda: kept.search(dash.get("/handoff/builder").text), what="the kept version with its time")
    assert dash.orch.stop() == 0


def _until(lines, wanted: str):
    for line in lines:
        yield line
        if line == wanted:
            return


# ---------------------------------------------------------------- actions


def test_cancel_ends_the_whole_tree_and_answers_with_the_receipt(project: Project, dash: Dashboard) -> None:
    project.drop("builder", "B-2.md", {"id": "B-2", "agent": {"sleep": LONG, "grandchild": True}})
    record = started(project, "B-2.md")
    tree = [record["pid"], *record["children"]]
    run = wait_for(lambda: dash.run_of("B-2.md"), what="B-2's run")
    answer = dash.post(f"/api/v1/runs/{run['run_id']}/cancel", {"reason": "seen enough"})
    assert answer.status_code == 200, answer.text
    receipt = answer.json()
    assert [pid for pid in tree if pid_alive(pid)] == [], "the answer came while the run's processes lived"
    assert set(receipt) == set(CANCEL_KEYS) and receipt["state"] == "cancelled"
    assert set(tree) <= set(receipt["pids"]) and receipt["previous_state"] == "running"
    assert project.folder("builder", "cancelled") == ["B-2.md"]
    again = dash.get(f"/api/v1/runs/{run['run_id']}").json()
    assert again["run"]["state"] == "cancelled" and "a person at the dashboard" in again["run"]["reason"]
    assert again["receipt"] is not None and "seen enough" in (again["receipt"].get("reason") or "")
    finished = dash.post(f"/api/v1/runs/{run['run_id']}/cancel")
    assert finished.status_code in (404, 409) and finished.json()["error"]["code"] in ("finished", "unknown_memo")
    assert dash.orch.stop() == 0


def test_bulk_cancel_by_state_and_send_and_wake(project: Project, dash: Dashboard) -> None:
    for name in ("B-3", "B-4"):
        project.drop("builder", f"{name}.md", {"id": name, "agent": {"sleep": LONG}})
    wait_for(lambda: len([r for r in dash.state()["runs"] if r["state"] == "running"]) == 2, what="two running")
    some = dash.run_of("B-3.md")
    assert some is not None
    controls = dash.get(f"/api/v1/runs/{some['run_id']}").json()["controls"]
    assert controls == {"interrupt": False, "tell": False}  # as its backend says: so the page offers neither
    page = dash.get(f"/runs/{some['run_id']}").text
    assert 'data-action="cancel"' in page and 'data-action="interrupt"' not in page and 'id="tell"' not in page
    refused = dash.post(f"/api/v1/runs/{some['run_id']}/interrupt")  # a command role has no turn to end
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "unsupported", refused.text
    answer = dash.post("/api/v1/cancel", {"state": "running", "reason": "bulk"})
    assert answer.status_code == 200 and len(answer.json()["cancelled"]) == 2, answer.text
    assert project.folder("builder", "cancelled") == ["B-3.md", "B-4.md"]
    sent = dash.post("/api/v1/send", {"to": "planner", "text": "plan this", "subject": "from the page"})
    assert sent.status_code == 200, sent.text
    wait_for(lambda: project.folder("planner", "archive"), what="the sent memo to run")
    text = next((project.root / "memo" / "planner" / "archive").iterdir()).read_text()
    assert "from the page" in text and "owner" in text
    woke = dash.post("/api/v1/roles/planner/wake")
    assert woke.status_code == 200 and woke.json()["memo"].startswith("wake-planner"), woke.text
    wait_for(lambda: len(project.folder("planner", "archive")) == 2, what="the wake memo to run")
    unknown = dash.post("/api/v1/roles/nobody/wake")
    assert unknown.status_code >= 400 and "nobody" in unknown.json()["error"]["message"], unknown.text
    assert dash.orch.stop() == 0


def test_a_failed_run_shows_its_reason_and_retry_runs_it_again(project: Project, dash: Dashboard) -> None:
    project.drop("builder", "B-5.md", {"id": "B-5", "agent": {"exit": 3}})
    wait_for(lambda: project.folder("builder", "failed") == ["B-5.md"], what="B-5 to fail")
    recent = wait_for(lambda: [r for r in dash.state()["recent"] if r["memo"] == "B-5.md"], what="B-5 in recent")
    run_id = recent[0]["run_id"]
    view = dash.get(f"/api/v1/runs/{run_id}").json()
    assert view["run"]["state"] == "failed" and "3" in view["run"]["reason"] and view["retryable"] is True
    assert dash.get("/").text.count(view["run"]["reason"]) >= 1
    retried = dash.post(f"/api/v1/runs/{run_id}/retry")
    assert retried.status_code == 200 and retried.json()["memos"] == ["B-5.md"], retried.text
    wait_for(lambda: len([r for r in project.records() if r.get("memo", "").endswith("B-5.md")]) == 2, what="a rerun")
    wait_for(lambda: project.folder("builder", "failed") == ["B-5.md"], what="the rerun to fail again")
    rows = [r for r in project.status()["recent"] if r["memo"] == "B-5.md"]
    assert rows[0]["attempt"] == 1, "the retry did not reset the memo's attempts"
    dash.orch.wait_output("retry of run")
    dash.orch.wait_output("a person at the dashboard")
    again = dash.post(f"/api/v1/runs/{rows[0]['run_id']}/cancel")
    assert again.status_code in (404, 409)
    assert dash.orch.stop() == 0


def test_tell_reaches_an_sdk_run(project: Project, fake_cli: Path) -> None:
    fake = {"FAKE_CLAUDE_RECORD": str(project.root / "claude.jsonl")}
    project.configure({"writer": {"backend": "sdk", "cli_path": str(fake_cli), "env": fake}})
    board = start(project)
    gate = project.root / "gates" / "turn1"
    project.drop("writer", "W-1.md", {"id": "W-1"}, body=f"[wait:{gate}] first")
    run = wait_for(lambda: (r := board.run_of("W-1.md")) and r["state"] == "running" and r, what="W-1 running")
    told = board.post(f"/api/v1/runs/{run['run_id']}/tell", {"text": "a follow-up from the page"})
    assert told.status_code == 200, told.text
    gate.parent.mkdir(parents=True, exist_ok=True)
    gate.touch()
    wait_for(
        lambda: "a follow-up from the page" in [e.get("prompt") for e in claude_records(project)],
        what="the tell to reach the CLI",
    )
    board.close()
    assert board.orch.stop() == 0


AGENT_WITH_TOKEN = """
import json, os, sys, urllib.request
root = os.environ["ORCHESTRATOR_ROOT"]
info = json.load(open(os.path.join(root, ".orchestrator", "web.json")))
request = urllib.request.Request(info["url"] + "api/v1/cancel", data=json.dumps({"role": "builder"}).encode(),
                                 headers={"Authorization": "Bearer " + info["token"], "Content-Type": "application/json"})
try:
    code = urllib.request.urlopen(request).status
    body = ""
except urllib.error.HTTPError as exc:
    code, body = exc.code, exc.read().decode()
open(os.path.join(root, ".agent-web.json"), "w").write(json.dumps({"code": code, "body": body}))
os.replace(os.path.join(root, ".agent-web.json"), os.path.join(root, "agent-web.json"))  # whole when it shows
"""


def test_an_agent_holding_the_token_still_has_an_agents_authority(project: Project) -> None:
    script = project.root / "agent_web.py"
    script.write_text(AGENT_WITH_TOKEN, encoding="utf-8")
    project.configure({"builder": {"grace": "5s"}, "sneak": {"command": [sys.executable, str(script)]}})
    board = start(project)
    project.drop("builder", "B-6.md", {"id": "B-6", "agent": {"sleep": LONG}})
    started(project, "B-6.md")
    project.drop("sneak", "S-1.md", {"id": "S-1"})
    out = project.root / "agent-web.json"
    wait_for(out.exists, what="the agent's request")
    answer = json.loads(out.read_text())
    assert answer["code"] == 403 and "refused" in answer["body"], answer
    assert board.run_of("B-6.md")["state"] == "running", "an agent cancelled another role's work via the dashboard"
    board.orch.wait_output("refused cancel --role from an agent of run")
    assert board.post("/api/v1/cancel", {"role": "builder"}).status_code == 200  # this test's client is a person
    board.close()
    assert board.orch.stop() == 0


def test_port_in_use_takes_a_free_one_and_says_so(project: Project) -> None:
    import socket

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        project.configure({"builder": {}}, web={"port": port, "session_max_age": "2h"})
        board = start(project, "--plain")
        assert f":{port}/" not in board.url and "is in use" in board.orch.output
        assert board.get("/api/v1/state").status_code == 200
        board.close()
        assert board.orch.stop() == 0
    finally:
        holder.close()


def test_init_writes_the_dashboard_on_and_up_serves_it(project: Project) -> None:
    from conftest import STAND_IN

    made = project.cli("init", str(project.root))
    assert made.returncode == 0, made.stderr
    assert "web: {port: 8765, host: 127.0.0.1}" in (project.root / "roles.yaml").read_text()
    board = start(project, "--plain", ORCHESTRATOR_SPAWN_CMD=f"{sys.executable} {STAND_IN}")
    assert board.get("/api/v1/state").json()["running"] is True  # on 8765, or a free port when that one is taken
    board.close()
    assert board.orch.stop() == 0


def test_an_address_not_of_this_machine_is_one_line_at_start(project: Project) -> None:
    project.configure({"builder": {}}, web={"port": 0, "host": "192.0.2.1", "allow_remote": True})
    orch = project.up(wait_ready=False)
    assert orch.wait() == 2
    assert "web: cannot listen on 192.0.2.1:0" in orch.output and "Traceback" not in orch.output, orch.output
