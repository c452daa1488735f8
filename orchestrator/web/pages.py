"""The dashboard's pages, rendered on the server from the same data as the API; no build step, no CDN.

Each page is plain HTML with ``static/app.js`` (the project's own, small) for the live parts: the overview's
``#live`` part is re-fetched from ``/fragments/overview`` when the ``events`` stream says something changed, the
run page follows its log and drives its buttons, and every page says when the orchestrator went away and when
it is back.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from orchestrator.core.states import FINISHED  # the states a run ends in (strings compare equal to them)
from orchestrator.web import records
from orchestrator.web.attach import Attachment
from orchestrator.web.html import bars, colour, e, layout, money, run_cells, seconds, table
from orchestrator.workspaces import overview

PAGES = (
    "/",
    "/runs",
    "/history",
    "/schedule",
    "/journal",
    "/handoff",
    "/memory",
    "/trace",
    "/fragments",
    "/workspaces",
)


def is_page(path: str) -> bool:
    """Whether ``path`` is a page for people (a missing token shows how to get in) rather than the API."""
    return path == "/" or any(path == p or path.startswith(p + "/") for p in PAGES[1:])


TOKEN_FACTS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
)


def tokens(run: dict[str, Any]) -> str:
    """A run's tokens in one cell: in/out, with the cached input and the reasoning output when it reported them."""
    said = f"{run.get('input_tokens') or 0}/{run.get('output_tokens') or 0}"
    extra = [
        f"{run[k]} {k.removesuffix('_tokens').replace('_', ' ')}"
        for k in TOKEN_FACTS[1:3] + TOKEN_FACTS[4:]
        if run.get(k)
    ]
    return said + (f" ({', '.join(extra)})" if extra else "")


class Pages:
    """The routes of the pages, bound to one attachment."""

    def __init__(self, attachment: Attachment) -> None:
        self.att = attachment

    def routes(self) -> list[Route]:
        return [
            Route("/", self.overview),
            Route("/fragments/overview", self.overview_fragment),
            Route("/runs/{run_id:int}", self.run),
            Route("/history", self.history),
            Route("/schedule", self.schedule),
            Route("/journal", self.journal),
            Route("/handoff/{role}", self.handoff),
            Route("/memory", self.memory),
            Route("/trace/{memo}", self.trace),
            Route("/workspaces", self.workspaces),
        ]

    # ------------------------------------------------------------ overview
    async def overview(self, request: Request) -> Response:
        return layout("overview", f'<div id="live">{self.live()}</div>', page="/")

    async def overview_fragment(self, request: Request) -> Response:
        return HTMLResponse(self.live(), headers={"Cache-Control": "no-store"})

    def live(self) -> str:
        snap = self.att.state()
        quiet = self.att.quiet()
        runs = []
        for run in snap["runs"]:
            q = quiet.get(run["run_id"])
            runs.append(
                {
                    "run_id": f'<a href="/runs/{run["run_id"]}">{run["run_id"]}</a>',
                    "role": e(run["role"]),
                    "memo": f'<a href="/trace/{quote(str(run.get("memo_id") or run.get("memo") or ""), safe="")}">'
                    f"{e(run.get('memo_id') or run.get('memo'))}</a>",
                    "subject": e(run.get("subject")),
                    "state": f'<span class="badge {colour(q, run["state"])}" data-run="{run["run_id"]}">'
                    f"{e(run['state'])}</span>",
                    "attempt": e(run.get("attempt")),
                    "elapsed": seconds(run.get("elapsed")),
                    "quiet": seconds(q),
                    "activity": e(run.get("activity")),
                    "cost": money(run.get("cost_usd"), run.get("cost_estimated")),
                }
            )
        queues = [
            {"role": e(role), "queued": e(count), "memos": e(", ".join(snap["queued_memos"].get(role, [])))}
            for role, count in snap["queued"].items()
        ]
        holds = [
            {"role": e(role), "why": e("; ".join(f"{k}: {v}" for k, v in sources.items()))}
            for role, sources in snap["holds"].items()
        ] + [{"role": e(role), "why": e(f"budget: {why}")} for role, why in snap["budget_blocks"].items()]
        held = [
            {"role": e(role), "held": f"{count} memo(s) in memo/{e(role)}/held/ (<code>orchestrator release</code>)"}
            for role, count in snap.get("held", {}).items()
        ]
        paused = [
            {
                "account": e(acct),
                "until": e(p.get("until")),
                "why": e(p.get("reason")),
                "roles": e(", ".join(p.get("roles", []))),
            }
            for acct, p in snap["paused"].items()
        ]
        spend = self.att.spent_today()
        budget_rows = [
            {
                "who": "team",
                "spent": money(spend["team"]["spent_usd"], spend["team"].get("estimated")),
                "budget": money(spend["team"]["per_day_usd"]),
            }
        ] + [
            {"who": e(role), "spent": money(v["spent_usd"], v.get("estimated")), "budget": money(v["per_day_usd"])}
            for role, v in spend["roles"].items()
            if v["spent_usd"] or v["per_day_usd"]
        ]
        ends = [
            {
                **run_cells(r),
                "ended": e(r.get("ended_at")),
                "reason": e(r.get("reason")) if r["state"] != "succeeded" else "",
                "cost": money(r.get("cost_usd"), r.get("cost_estimated")),
            }
            for r in snap["recent"][:10]
        ]
        asks = [
            {
                "memo": e(a.get("memo")),
                "role": e(a.get("role")),
                "question": e(a.get("question")),
                "since": e(a.get("asked_at")),
                "answer": answer_form(a),
            }
            for a in snap.get("needs_input") or []
        ]
        ending = f'<p class="warn">ending: {e(snap["ending"])}</p>' if snap.get("ending") else ""
        return f"""{ending}<section><h2>Running <small>{len(runs)} of max {snap["limits"]["max_concurrent"]}</small></h2>
{table(runs, [("run_id", "run"), ("role", "role"), ("memo", "memo"), ("subject", "subject"), ("state", "state"), ("attempt", "attempt"), ("elapsed", "elapsed"), ("quiet", "silent"), ("activity", "activity"), ("cost", "cost")], "runs")}</section>
<section><h2>Needs input <small>{len(asks)}</small></h2>
{table(asks, [("memo", "memo"), ("role", "role"), ("question", "question or call"), ("since", "since"), ("answer", "answer")], "asks")}</section>
<section class="cols"><div><h2>Queues</h2>{table(queues, [("role", "role"), ("queued", "queued"), ("memos", "next memos")])}</div>
<div><h2>Spend today</h2>{table(budget_rows, [("who", ""), ("spent", "spent"), ("budget", "budget per day")])}</div></section>
<section class="cols"><div><h2>Holds</h2>{table(holds + held, [("role", "role"), ("why", "why"), ("held", "held")])}</div>
<div><h2>Paused accounts</h2>{table(paused, [("account", "account"), ("until", "until"), ("why", "why"), ("roles", "roles")])}</div></section>
<section><h2>Last ends</h2>{table(ends, [("run_id", "run"), ("role", "role"), ("memo", "memo"), ("state", "state"), ("ended", "ended"), ("reason", "reason"), ("cost", "cost")], "ends")}</section>"""

    # ------------------------------------------------------------ one run
    async def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        found = self.att.run(run_id)
        if found is None:
            page = layout(f"run {run_id}", f"<h1>No run {run_id} on record</h1>")
            page.status_code = 404
            return page
        view = found["run"]
        live = view["state"] not in FINISHED
        controls = found["controls"]
        label = view.get("memo_id") or view.get("memo") or ""
        buttons = ""
        if live:
            buttons += '<button data-action="cancel" class="danger">Cancel</button>'
            if controls["interrupt"]:
                buttons += '<button data-action="interrupt">Interrupt</button>'
            if controls["tell"]:
                buttons += '<form id="tell"><input name="text" placeholder="tell the agent…" required><button>Tell</button></form>'
        if found["retryable"]:
            buttons += '<button data-action="retry">Retry</button>'
        role = self.att.config.roles.get(str(view.get("role")))
        if not live and role is not None and role.workspace.isolated:
            # its workspace's branch, through the queue (POST /api/v1/requests/land, as `orchestrator land`)
            buttons += f'<button data-action="land" data-target="{e(label)}">Land</button>'
        attempts = [
            {k: e(a.get(k)) for k in ("attempt", "started_at", "ended_at", "exit_code", "outcome", "reason")}
            for a in found["attempts"]
        ]
        facts = "".join(
            f"<dt>{e(k)}</dt><dd>{e(view.get(k))}</dd>"
            for k in (
                "role",
                "memo",
                "subject",
                "state",
                "attempt",
                "started_at",
                "ended_at",
                "exit_code",
                "backend",
                "activity",
                *TOKEN_FACTS,
            )
            if k not in TOKEN_FACTS or view.get(k) is not None
        )
        reason = f'<p class="reason">{e(view.get("reason"))}</p>' if view.get("reason") else ""
        receipt = found.get("receipt")
        changes = await asyncio.to_thread(
            overview.run_changes, self.att.config.root, self.att.config.state_dir / "state.db", run_id
        )
        body = f"""<h1>Run {run_id} <span class="badge state-{e(view["state"])}" id="run-state">{e(view["state"])}</span></h1>
{reason}<p><a href="/trace/{quote(str(label), safe="")}">conversation of {e(label)}</a> · cost {money(view.get("cost_usd"), view.get("cost_estimated"))}</p>
<div id="actions" data-run="{run_id}" data-live="{int(live)}">{buttons}</div><p id="action-status" role="status"></p>
<pre id="receipt"{"" if receipt else " hidden"}>{e(json.dumps(receipt, indent=2, default=str)) if receipt else ""}</pre>
<dl class="facts">{facts}</dl><h2>Attempts</h2>{table(attempts, [(k, k) for k in ("attempt", "started_at", "ended_at", "exit_code", "outcome", "reason")])}
{workspace_part(changes)}
<h2>Log <small id="log-state"></small></h2><pre id="log" data-run="{run_id}" data-follow="{int(live)}"></pre>"""
        return layout(f"run {run_id}", body, page="/runs")

    # ------------------------------------------------------------ workspaces
    async def workspaces(self, request: Request) -> Response:
        config = self.att.config
        found = await asyncio.to_thread(overview.inventory, config.root, config.state_dir / "state.db")
        rows = [
            {
                "name": e(w["name"]),
                "branch": f"<code>{e(w['branch'])}</code>",
                "base": e(w["base"]),
                "ahead": e(w["ahead"]),
                "behind": e(w["behind"]),
                "last_run": f'<a href="/runs/{w["last_run"]}">{w["last_run"]}</a>'
                + (" (working)" if w["working"] else f" ended {e((w['last_end'] or '')[:19])}"),
                "disk": e(f"{w['bytes'] / 1e6:.1f} MB") if w["present"] else "removed",
                "landed": "yes" if w["landed"] else "no",
            }
            for w in found
        ]
        columns = [(k, k.replace("_", " ")) for k in ("name", "branch", "base", "ahead", "behind", "last_run")]
        body = f"<h1>Workspaces</h1>{table(rows, [*columns, ('disk', 'disk use'), ('landed', 'landed')], 'workspaces')}"
        return layout("workspaces", body, page="/workspaces")

    # ------------------------------------------------------------ history
    async def history(self, request: Request) -> Response:
        q = request.query_params
        role = q.get("role") or None
        before = int(q["before"]) if q.get("before", "").isdigit() else None
        db = self.att.config.state_dir / "state.db"
        got, spend = await asyncio.gather(
            asyncio.to_thread(records.page, db, role, before), asyncio.to_thread(records.spend, db)
        )
        rows = [
            {
                **run_cells(r),
                "started": e(r.get("started_at")),
                "cost": money(r.get("cost_usd"), r.get("cost_estimated")),
                "tokens": e(tokens(r)),
                "reason": e(r.get("reason")) if r["state"] != "succeeded" else "",
            }
            for r in got["runs"]
        ]
        nxt = got["next_before"]
        more = (
            f'<a href="/history?before={nxt}{"&role=" + quote(role) if role else ""}" rel="next">older runs →</a>'
            if nxt
            else ""
        )
        body = f"""<h1>History{f" of {e(role)}" if role else ""}</h1>
<section class="cols"><div><h2>Cost per day</h2>{bars(spend["by_day"], "cost per day")}</div>
<div><h2>Cost per role</h2>{bars(spend["by_role"], "cost per role")}</div></section>
<section><h2>Runs</h2>{table(rows, [("run_id", "run"), ("role", "role"), ("memo", "memo"), ("state", "state"), ("started", "started"), ("cost", "cost"), ("tokens", "tokens in/out"), ("reason", "reason")], "history")}<p>{more}</p></section>"""
        return layout("history", body, page="/history")

    # ------------------------------------------------------------ schedule, journal, handoff
    async def schedule(self, request: Request) -> Response:
        from orchestrator.schedule import view

        report = await asyncio.to_thread(view.schedule, self.att.config)
        parts = []
        for role, info in report["roles"].items():
            tasks = [
                {k: e(t.get(k)) for k in ("name", "rule", "next_due", "due_now", "last_done", "last_seq")}
                for t in info["tasks"]
            ]
            parts.append(
                f"<section><h2>{e(role)}</h2><p>every {e(info['every'])} · next tick {e(info['next_tick'])} · "
                f"last {e(info['last'])} {e(info['last_reason'])} at {e(info['last_at'])} · skips "
                f"{e(json.dumps(info.get('skips', {}), default=str))}</p>"
                f"{table(tasks, [(k, k.replace('_', ' ')) for k in ('name', 'rule', 'next_due', 'due_now', 'last_done', 'last_seq')])}"
                f'<button data-wake="{e(role)}">Wake now</button></section>'
            )
        body = f"<h1>Schedule <small>{e(report['timezone'])}, now {e(report['now'])}</small></h1>" + (
            "".join(parts) or '<p class="empty">no role has a schedule</p>'
        )
        return layout("schedule", body + '<p id="action-status" role="status"></p>', page="/schedule")

    async def journal(self, request: Request) -> Response:
        from orchestrator.continuity import commands

        role = request.query_params.get("role") or None
        entries = await asyncio.to_thread(commands.journal_entries, self.att.root, role=role, last=100)
        links = " ".join(
            f'<a href="/journal?role={quote(r)}">{e(r)}</a> (<a href="/handoff/{quote(r)}">handoff</a>)'
            for r in self.att.config.roles
        )
        items = "".join(
            f"<article><h3>{e(x.get('role'))} · run {e(x.get('seq'))} · {e(x.get('date'))}</h3>"
            f"<pre>{e(x.get('text') or json.dumps(x, indent=2, default=str))}</pre></article>"
            for x in reversed(entries)
        )
        body = f"<h1>Journal{f' of {e(role)}' if role else ''}</h1><p>{links}</p>" + (
            items or '<p class="empty">no entries</p>'
        )
        return layout("journal", body, page="/journal")

    async def handoff(self, request: Request) -> Response:
        from orchestrator.continuity import commands

        role = request.path_params["role"]
        current = await asyncio.to_thread(commands.handoff_current, self.att.root, role)
        versions = await asyncio.to_thread(commands.handoff_history, self.att.root, role)
        rows = [{k: e(v.get(k)) for k in ("seq", "bytes", "saved_at")} for v in versions]
        body = (
            f"<h1>Handoff of {e(role)}</h1><pre>{e(current.get('text'))}</pre>"
            f"<h2>Versions</h2>{table(rows, [('seq', 'run'), ('bytes', 'bytes'), ('saved_at', 'kept')])}"
        )
        return layout(f"handoff {role}", body, page="/journal")

    # ------------------------------------------------------------ memory, trace
    async def memory(self, request: Request) -> Response:
        from orchestrator.web.api import _memory_search

        query = request.query_params.get("q", "").strip()
        found = await asyncio.to_thread(_memory_search, self.att, query, None, 50) if query else []
        rows = [{k: e(x.get(k)) for k in ("id", "role", "layer", "category", "importance", "text")} for x in found]
        body = (
            f'<h1>Memory</h1><form method="get"><input name="q" value="{e(query)}" placeholder="words to find">'
            f"<button>Search</button></form>"
            + (
                table(rows, [(k, k) for k in ("id", "role", "layer", "category", "importance", "text")])
                if query
                else ""
            )
        )
        return layout("memory", body, page="/memory")

    async def trace(self, request: Request) -> Response:
        from orchestrator.tools import trace

        memo = request.path_params["memo"]
        report = await asyncio.to_thread(trace.trace, self.att.root, memo)
        body = f"<h1>Conversation of {e(memo)}</h1>{_tree(report.get('roots', []))}"
        return layout(f"trace {memo}", body, page="/trace")


def _tree(node: Any) -> str:
    """A trace report's tree as nested lists; each memo linked to its own conversation and its runs' pages."""
    if isinstance(node, list):
        return "<ul>" + "".join(f"<li>{_tree(n)}</li>" for n in node) + "</ul>"
    if not isinstance(node, dict):
        return e(node)
    label = node.get("id") or node.get("name") or ""
    runs = " ".join(
        f'<a href="/runs/{r["run_id"]}">run {r["run_id"]} {e(r.get("state"))}</a>'
        for r in node.get("runs", [])
        if isinstance(r, dict) and "run_id" in r
    )
    head = (
        f'<a href="/trace/{quote(str(label), safe="")}">{e(label)}</a> {e(node.get("role"))} '
        f"{e(node.get('subject'))} <small>{e(node.get('folder') or node.get('state'))}</small> {runs}"
        if label
        else ""
    )
    kids = node.get("replies") or node.get("children") or []
    return head + (_tree(kids) if kids else "")


def workspace_part(changes: dict[str, Any] | None) -> str:
    """The run page's part on its workspace: the branch, the latest attempt's outcome, its diff stat and files."""
    if changes is None:
        return ""
    files = [{"status": e(f["status"]), "path": f"<code>{e(f['path'])}</code>"} for f in changes["files"]]
    kept = f" under <code>{e(changes['ref'])}</code>" if changes.get("ref") else ""
    return f"""<h2>Workspace</h2><p id="workspace">branch <code>{e(changes["branch"])}</code> (workspace
{e(changes["workspace"])}), attempt {e(changes["attempt"])}: {e(changes["outcome"])}{kept}</p>
<pre id="diffstat">{e(changes["stat"]) or "no changes"}</pre>{table(files, [("status", "status"), ("path", "file")], "files")}"""


def answer_form(ask: dict[str, Any]) -> str:
    """The answer box of one waiting run: a text for a question, Allow and Deny (with a note) for an approval; it
    posts what ``orchestrator answer`` sends."""
    memo = e(f"memo/{ask.get('role')}/waiting/{ask.get('memo')}")  # its path: a file name may wait in two roles
    if ask.get("kind") == "approval":
        fields = (
            '<input name="note" placeholder="note, told with Deny">'
            '<button name="do" value="allow">Allow</button><button name="do" value="deny" class="danger">Deny</button>'
        )
    else:
        fields = (
            '<input name="text" placeholder="your answer" required><button name="do" value="answer">Answer</button>'
        )
    return f'<form class="answer" data-memo="{memo}">{fields}<span class="answer-status"></span></form>'
