"""Ship what you test: the wheel carries the dashboard's script, style sheet and licence, and a plain install of
it (dependencies from the registry) serves the dashboard that ``init`` turns on."""

from __future__ import annotations

import zipfile

import httpx
import pytest

from conftest import Installed, Project
from web_harness import web_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
STATIC = ("app.js", "style.css", "LICENSE")


def test_the_wheel_carries_the_dashboards_assets(installed: Installed) -> None:
    (wheel,) = installed.dist.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"orchestrator/web/static/{name}" for name in STATIC} <= names


def test_a_plain_install_serves_the_dashboard_init_turns_on(installed_project: Project) -> None:
    project = installed_project
    project.configure(web={"port": 0})
    orch = project.up()
    info = web_json(project)
    with httpx.Client(base_url=info["url"], headers={"Authorization": f"Bearer {info['token']}"}) as client:
        assert client.get("/api/v1/state").json()["running"] is True
        script = client.get("/static/app.js")
        assert script.status_code == 200 and "EventSource" in script.text
        assert "orchestrator_queue_depth" in client.get("/metrics").text
    assert orch.stop() == 0
