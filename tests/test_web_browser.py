"""The dashboard in a real browser: Playwright driving Debian's chromium against a real ``up``.

Playwright's own browser download cannot be had here, so it is pointed at the system's ``chromium``
(``.ci/needs chromium`` installs it in CI, where these tests must run; elsewhere they are skipped, saying why).
A screenshot of the overview is kept in ``build/artifacts/`` (``ARTIFACTS_DIR``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, Project, claude_records, pid_alive, wait_for
from web_harness import Dashboard, start

pytestmark = pytest.mark.browser
LONG = 60
ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR") or REPO / "build" / "artifacts")


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: `.ci/needs chromium` installs it (Debian's package)")
        pytest.skip("no chromium here (Debian: apt-get install chromium, or `.ci/needs chromium` as root)")
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    executable = chromium()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    yield opened
    context.close()


def open_dashboard(page: Any, board: Dashboard, path: str = "/") -> None:
    """Open ``path`` with the token in the fragment, as ``orchestrator web`` prints it: the page trades the token
    for its cookie, drops it from the address and loads again, live."""
    page.goto(board.url.rstrip("/") + path + f"#token={board.token}")
    # the URL is watched from here, not by a predicate in the page: Playwright compiles a string predicate there,
    # which the dashboard's Content-Security-Policy (no 'unsafe-eval') refuses once the page has loaded again
    page.wait_for_url(lambda url: "token" not in url)
    page.wait_for_load_state()
    page.wait_for_selector("#conn.up")


def started(project: Project, memo: str) -> dict[str, Any]:
    return wait_for(lambda: next((r for r in project.records() if r.get("memo", "").endswith(memo)), None), what=memo)


def test_without_the_token_the_page_says_how_to_get_in(project: Project, browser: Any, page: Any) -> None:
    project.configure({"builder": {}})
    board = start(project)
    page.goto(board.url)
    assert "needs its token" in page.inner_text("h1") and "orchestrator web" in page.inner_text("#login")
    open_dashboard(page, board)
    assert "#token" not in page.url, "the token stayed in the address bar"
    assert page.inner_text("h2").startswith("Running")
    # an API call without the token is 401 (a fresh context has no cookie); a foreign Host is 403
    bare = browser.new_context()
    assert bare.request.get(board.url + "api/v1/state").status == 401
    assert bare.request.get(board.url + "api/v1/state", headers={"Host": "evil.example"}).status == 403
    bare.close()
    # a page of another origin cannot act, even in the browser that holds the session cookie
    project.drop("builder", "B-0.md", {"id": "B-0", "agent": {"sleep": LONG}})
    wait_for(lambda: (r := board.run_of("B-0.md")) and r["state"] == "running", what="B-0 running")
    other = page.context.new_page()
    other.goto("about:blank")
    other.evaluate(
        """url => fetch(url, {method: "POST", credentials: "include", headers: {"Content-Type": "text/plain"},
                               body: JSON.stringify({role: "builder"})}).catch(() => null)""",
        board.url + "api/v1/cancel",
    )
    time.sleep(0.5)
    assert board.run_of("B-0.md")["state"] == "running", "a cross-origin POST cancelled work"
    assert board.post("/api/v1/cancel", {"role": "builder"}).status_code == 200
    board.close()
    assert board.orch.stop() == 0


def test_a_new_memo_appears_within_a_second_and_cancel_shows_stopping_then_the_receipt(
    project: Project, page: Any
) -> None:
    project.configure({"builder": {"grace": "5s"}})
    board = start(project)
    open_dashboard(page, board)
    project.drop(
        "builder", "B-1.md", {"id": "B-1", "subject": "watch me", "agent": {"sleep": LONG, "grandchild": True}}
    )
    record = started(project, "B-1.md")
    seen_start = time.time()
    page.locator("#live table.runs").get_by_text("B-1", exact=True).wait_for(timeout=5_000)
    assert time.time() - seen_start < 1.0, "the run reached the overview more than a second after its start"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-overview.png"), full_page=True)

    page.locator("#live table.runs a", has_text="1").first.click()
    page.wait_for_selector("#actions button[data-action=cancel]")
    page.click("#actions button[data-action=cancel]")
    status = page.locator("#action-status")
    assert status.inner_text() in ("stopping…", "cancel done")
    page.wait_for_selector("#receipt:not([hidden])")
    receipt = json.loads(page.inner_text("#receipt"))
    assert receipt["state"] == "cancelled" and record["pid"] in receipt["pids"]
    assert [pid for pid in [record["pid"], *record["children"]] if pid_alive(pid)] == []
    assert page.inner_text("#run-state") == "cancelled"
    board.close()
    assert board.orch.stop() == 0


def test_a_failed_run_shows_its_reason_and_the_retry_button_runs_it_again(project: Project, page: Any) -> None:
    project.configure({"builder": {}})
    board = start(project)
    project.drop("builder", "B-2.md", {"id": "B-2", "agent": {"exit": 3}})
    wait_for(lambda: project.folder("builder", "failed") == ["B-2.md"], what="B-2 to fail")
    run_id = wait_for(lambda: [r["run_id"] for r in board.state()["recent"] if r["memo"] == "B-2.md"], what="B-2")[0]
    open_dashboard(page, board)
    assert "exit" in page.locator("#live table.ends").inner_text()
    open_dashboard(page, board, f"/runs/{run_id}")
    assert "exit" in page.inner_text(".reason")
    page.click("#actions button[data-action=retry]")
    page.locator("#action-status", has_text="runs again").wait_for()
    wait_for(lambda: len([r for r in project.records() if r.get("memo", "").endswith("B-2.md")]) == 2, what="rerun")
    board.close()
    assert board.orch.stop() == 0


def test_tell_from_the_run_page_reaches_an_sdk_run(project: Project, page: Any, fake_cli: Path) -> None:
    record = project.root / "claude.jsonl"
    project.configure(
        {"writer": {"backend": "sdk", "cli_path": str(fake_cli), "env": {"FAKE_CLAUDE_RECORD": str(record)}}}
    )
    board = start(project)
    gate = project.root / "gates" / "turn1"
    project.drop("writer", "W-1.md", {"id": "W-1"}, body=f"[wait:{gate}] first")
    run = wait_for(lambda: (r := board.run_of("W-1.md")) and r["state"] == "running" and r, what="W-1 running")
    open_dashboard(page, board, f"/runs/{run['run_id']}")
    page.fill("#tell input[name=text]", "hello from the browser")
    page.click("#tell button")
    page.locator("#action-status", has_text="told").wait_for()
    gate.parent.mkdir(parents=True, exist_ok=True)
    gate.touch()
    wait_for(
        lambda: "hello from the browser" in [e.get("prompt") for e in claude_records(project)],
        what="the tell to reach the CLI",
    )
    board.close()
    assert board.orch.stop() == 0


def test_interrupt_from_the_run_page_ends_the_turn_and_the_page_shows_the_run_cancelled(
    project: Project, page: Any, fake_cli: Path
) -> None:
    record = project.root / "claude.jsonl"
    project.configure(
        {"writer": {"backend": "sdk", "cli_path": str(fake_cli), "env": {"FAKE_CLAUDE_RECORD": str(record)}}}
    )
    board = start(project)
    project.drop("writer", "W-2.md", {"id": "W-2"}, body="[slow] a long turn")
    run = wait_for(lambda: (r := board.run_of("W-2.md")) and r["state"] == "running" and r, what="W-2 running")
    open_dashboard(page, board, f"/runs/{run['run_id']}")
    page.click("button[data-action=interrupt]")
    page.locator("#action-status", has_text="interrupt done").wait_for()
    page.locator("#run-state", has_text="cancelled").wait_for()
    interrupts = [e for e in claude_records(project) if e.get("control") == "interrupt"]
    assert any(c.get("in_turn") for c in interrupts), "the interrupt did not reach the CLI in its turn"
    wait_for(lambda: project.folder("writer", "cancelled") == ["W-2.md"], what="W-2 in cancelled/")
    board.close()
    assert board.orch.stop() == 0


def test_after_a_restart_a_page_says_its_session_ended_and_the_new_url_opens_it(project: Project, page: Any) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    project.configure({"builder": {}}, web={"port": port})
    board = start(project, "--plain")
    open_dashboard(page, board)
    assert board.orch.stop() == 0
    page.wait_for_selector("#conn.down")
    assert "not answering" in page.inner_text("#conn")
    again = start(project, "--plain")
    assert again.token != board.token, "the token is per start"
    # the cookie was made from the old start's token: the page says so instead of reconnecting for ever
    page.locator("#conn.down", has_text="session has ended").wait_for()
    open_dashboard(page, again)
    project.drop("builder", "B-3.md", {"id": "B-3", "agent": {"sleep": 3}})
    page.locator("#live table.runs").get_by_text("B-3", exact=True).wait_for()
    board.close()
    again.close()
    assert again.orch.stop() == 0
