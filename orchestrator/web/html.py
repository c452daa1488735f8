"""The dashboard's HTML building blocks: escaping and figures, the page's frame, the login page, tables and charts.

The pages (``pages``) are made of these; the server shows ``login`` to a person who came without the token.
"""

from __future__ import annotations

from html import escape
from typing import Any

from starlette.responses import HTMLResponse

GREEN_UNTIL = 120.0  # seconds of silence a running agent stays green; yellow until YELLOW_UNTIL, then red
YELLOW_UNTIL = 300.0


def e(value: Any) -> str:
    return escape("" if value is None else str(value))


def money(value: Any, estimated: Any = False) -> str:
    """Dollars for a person; ``~`` before an estimate from `prices` (a Codex run's)."""
    return "-" if value in (None, "") else f"{'~' if estimated else ''}${float(value):.4f}"


def seconds(value: Any) -> str:
    if value is None:
        return "-"
    value = float(value)
    return f"{value:.0f}s" if value < 120 else f"{value / 60:.0f}m" if value < 7200 else f"{value / 3600:.1f}h"


def colour(quiet: float | None, state: str) -> str:
    """A running run's colour by its silence: green, yellow, red ("stuck")."""
    if state != "running" or quiet is None:
        return "state-" + state
    return "fresh" if quiet < GREEN_UNTIL else "quiet" if quiet < YELLOW_UNTIL else "stuck"


def run_cells(r: dict[str, Any]) -> dict[str, str]:
    """The cells every table of ended runs starts with: the run's link, its role, its memo and its state."""
    return {
        "run_id": f'<a href="/runs/{r["run_id"]}">{r["run_id"]}</a>',
        "role": e(r["role"]),
        "memo": e(r.get("memo_id") or r.get("memo")),
        "state": f'<span class="badge state-{e(r["state"])}">{e(r["state"])}</span>',
    }


def layout(title: str, body: str, *, page: str = "") -> HTMLResponse:
    nav = " ".join(
        f'<a href="{href}"{" class=here" if href == page else ""}>{name}</a>'
        for href, name in (
            ("/", "Overview"),
            ("/history", "History"),
            ("/schedule", "Schedule"),
            ("/journal", "Journal"),
            ("/memory", "Memory"),
            ("/workspaces", "Workspaces"),
        )
    )
    return HTMLResponse(
        f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)} · orchestrator</title><link rel="stylesheet" href="/static/style.css"></head>
<body data-page="{e(page)}"><header><strong>orchestrator</strong> <nav>{nav}</nav>
<span id="conn" class="conn" role="status"></span></header>
<main>{body}</main><script src="/static/app.js"></script></body></html>""",
        headers={"Cache-Control": "no-store", "Content-Security-Policy": CSP, "X-Frame-Options": "DENY"},
    )


CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'"


def login(message: str) -> HTMLResponse:
    """The page without a token: how to get in (the script takes a ``#token=`` from the URL and comes back)."""
    page = layout(
        "sign in",
        f"""<section id="login"><h1>This dashboard needs its token</h1>
<p>{e(message)}.</p><p>Run <code>orchestrator web</code> in the project folder: it prints the URL with the token
(<code>http://127.0.0.1:PORT/#token=...</code>); <code>orchestrator web --open</code> opens it. The token is
also in <code>.orchestrator/web.json</code> and changes at every start.</p></section>""",
        page="login",
    )
    page.status_code = 401
    return page


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str]], cls: str = "") -> str:
    if not rows:
        return '<p class="empty">none</p>'
    head = "".join(f"<th>{e(title)}</th>" for _, title in columns)
    body = "".join("<tr>" + "".join(f"<td>{row.get(key, '')}</td>" for key, _ in columns) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def bars(data: dict[str, dict[str, Any]], label: str) -> str:
    """A bar chart (inline SVG) of ``cost_usd`` per key."""
    if not data:
        return '<p class="empty">no runs</p>'
    top = max((v["cost_usd"] for v in data.values()), default=0) or 1
    width, row = 560, 18
    parts = []
    for i, (key, value) in enumerate(data.items()):
        w = max(1, int(360 * value["cost_usd"] / top))
        y = i * row
        parts.append(
            f'<text x="0" y="{y + 13}">{e(key)}</text><rect x="120" y="{y + 3}" width="{w}" height="12"></rect>'
            f'<text x="{126 + w}" y="{y + 13}">{money(value["cost_usd"])} · {value["runs"]} runs</text>'
        )
    return (
        f'<svg class="chart" role="img" aria-label="{e(label)}" width="{width}" height="{row * len(data) + 4}">'
        + "".join(parts)
        + "</svg>"
    )
