"""What the dashboard's tests share: a real ``up`` with the dashboard on a free port, and a client for it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from conftest import Orchestrator, Project, wait_for


@dataclass
class Dashboard:
    """A running orchestrator's dashboard: its URL, its token and an HTTP client that sends the token."""

    orch: Orchestrator
    url: str
    token: str
    client: httpx.Client

    @property
    def host(self) -> str:
        return self.url.split("//", 1)[1].rstrip("/")

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.get(path, **kwargs)

    def post(self, path: str, body: dict[str, Any] | None = None, **kwargs: Any) -> httpx.Response:
        return self.client.post(path, json=body if body is not None else {}, **kwargs)

    def state(self) -> dict[str, Any]:
        answer = self.get("/api/v1/state")
        assert answer.status_code == 200, answer.text
        data: dict[str, Any] = answer.json()
        return data

    def run_of(self, memo: str) -> dict[str, Any] | None:
        return next((r for r in self.state()["runs"] if r["memo"] == memo), None)

    def close(self) -> None:
        self.client.close()


def web_json(project: Project) -> dict[str, Any]:
    path = project.root / ".orchestrator" / "web.json"
    wait_for(path.exists, what="web.json")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def start(project: Project, *args: str, **env: str) -> Dashboard:
    """``up --web 127.0.0.1:0`` (or as ``args`` say) and a client with the token."""
    orch = project.up(*(args or ("--web", "127.0.0.1:0")), **env)
    info = web_json(project)
    client = httpx.Client(base_url=info["url"], headers={"Authorization": f"Bearer {info['token']}"}, timeout=30)
    return Dashboard(orch, info["url"], info["token"], client)
