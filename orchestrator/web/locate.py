"""``orchestrator web``: the running dashboard's URL from ``.orchestrator/web.json``, without the server's
packages (a plain command, as fast as ``status``)."""

from __future__ import annotations

import json
import os
import webbrowser
from pathlib import Path

from orchestrator.core.errors import NotRunningError, OrchestratorError


def url(root: Path) -> str:
    """The URL with the token in its fragment; ``NotRunningError`` when no dashboard serves ``root``."""
    path = root / ".orchestrator" / "web.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotRunningError(
            f"no dashboard serves {root}: start it with `orchestrator up --web 8765` or `web: {{port: 8765}}` "
            "in roles.yaml"
        ) from None
    except (OSError, ValueError) as exc:
        raise OrchestratorError(f"{path}: cannot read it: {exc}") from None
    pid = data.get("pid")
    if isinstance(pid, int) and not _alive(pid):
        raise NotRunningError(f"no dashboard serves {root}: {path} is left from pid {pid}, which has ended")
    return f"{data['url']}#token={data['token']}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def open_in_browser(link: str) -> None:
    """Open ``link`` in the person's browser; one line when there is none."""
    if not webbrowser.open(link):
        raise OrchestratorError("no browser could be started here; open the URL printed below yourself")
