"""The JSON object every channel is sent for one ``TeamEvent``, and the short text Apprise shows."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from orchestrator.config import Config
from orchestrator.core.clock import iso
from orchestrator.core.team_events import TeamEvent


def dashboard_url(config: Config) -> str | None:
    """The dashboard's address when it is on (its first public URL, else the one it serves at), never its token."""
    if config.web is None:
        return None
    if config.web.public_urls:
        return config.web.public_urls[0] + "/"
    try:
        data = json.loads((config.state_dir / "web.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    url = data.get("url") if isinstance(data, dict) else None
    if isinstance(url, str):
        return url
    return None if config.web.port == 0 else f"http://{config.web.host}:{config.web.port}/"


def payload(event: TeamEvent, config: Config, now: datetime) -> dict[str, Any]:
    """``{id, event, team, role, memo, subject, reason | question, time, dashboard}``: one object per event; its
    ``id`` is the event's own, kept by every retry of its send, so a receiver can drop one it took already."""
    body: dict[str, Any] = {
        "id": uuid.uuid4().hex,
        "event": event.kind,
        "team": str(config.root),
        "role": event.role,
        "memo": event.memo,
        "subject": event.subject,
        "question" if event.kind == "needs_input" else "reason": event.reason,
        "time": iso(now),
    }
    link = dashboard_url(config)
    if link is not None:
        body["dashboard"] = link
    return body


def title_and_text(body: dict[str, Any]) -> tuple[str, str]:
    """A title and a few lines for a person's phone or chat (Apprise): what happened, where, and why."""
    about = " ".join(str(body[key]) for key in ("role", "memo") if body.get(key))
    title = f"orchestrator: {body['event']}" + (f" ({about})" if about else "")
    lines = [str(body.get("question") or body.get("reason") or "")]
    if body.get("subject"):
        lines.append(f"subject: {body['subject']}")
    lines.append(f"team: {body['team']}")
    if body.get("dashboard"):
        lines.append(str(body["dashboard"]))
    return title, "\n".join(line for line in lines if line)
