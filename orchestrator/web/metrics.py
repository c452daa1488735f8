"""``/metrics`` in Prometheus' text format (prometheus-client), from the live snapshot and the run changes.

Gauges are read from the snapshot at each scrape (runs by state, queue depth per role, paused accounts); the
counters and histograms grow as runs change (attempts, retries, failures by reason class, cost, run duration,
cancel seconds). The registry is this server's own, so two orchestrators in one test process never mix.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response

from orchestrator.web.attach import Attachment

MAX_REASON_CLASSES = 20
_CLASS = re.compile(r"^[a-z][a-z _-]*")
DURATIONS = (1, 5, 15, 60, 300, 900, 1800, 3600, 7200, float("inf"))
CANCELS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, float("inf"))


def reason_class(reason: str | None) -> str:
    """A failure's reason as a small label: its first words before any detail (``exit code``, ``timeout``)."""
    found = _CLASS.match((reason or "unknown").strip().lower())
    words = (found.group(0) if found else "other").strip(" _-").split()
    return "_".join(words[:3]) or "other"


class _Live:
    """The gauges, read from the snapshot when scraped."""

    def __init__(self, attachment: Attachment) -> None:
        self.att = attachment

    def collect(self) -> Iterable[Metric]:
        snap = self.att.light()
        by_state = GaugeMetricFamily(
            "orchestrator_runs", "Runs the orchestrator holds, by role and state", labels=["role", "state"]
        )
        counts: dict[tuple[str, str], int] = {}
        for run in snap["runs"]:
            key = (run["role"], run["state"])
            counts[key] = counts.get(key, 0) + 1
        for (role, state), count in sorted(counts.items()):
            by_state.add_metric([role, state], count)
        yield by_state
        queued = GaugeMetricFamily("orchestrator_queue_depth", "Memos waiting in a role's queue", labels=["role"])
        for role, depth in sorted(snap["queued"].items()):
            queued.add_metric([role], depth)
        yield queued
        paused = GaugeMetricFamily(
            "orchestrator_paused_accounts", "Accounts paused by a usage limit", labels=["account"]
        )
        for account in sorted(snap["paused"]):
            paused.add_metric([account], 1)
        yield paused
        held = GaugeMetricFamily("orchestrator_held_roles", "Roles held (budget, preflight, breaker)", labels=["role"])
        for role in sorted(snap["holds"]):
            held.add_metric([role], 1)
        yield held


TOKEN_KINDS = ("input", "cached_input", "cache_write_input", "output", "reasoning_output")


class Metrics:
    """The registry of one dashboard and the counters its run changes feed."""

    def __init__(self, attachment: Attachment) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Live(attachment))
        r = self.registry
        self.attempts = Counter("orchestrator_attempts", "Attempts started", ["role"], registry=r)
        self.retries = Counter(
            "orchestrator_retries", "Attempts that failed and wait for a retry", ["role"], registry=r
        )
        self.ended = Counter("orchestrator_runs_ended", "Runs ended, by final state", ["role", "state"], registry=r)
        self.failures = Counter("orchestrator_failures", "Failed runs by reason class", ["role", "reason"], registry=r)
        self.cost = Counter("orchestrator_cost_usd", "Spend of ended runs in USD", ["role"], registry=r)
        self.estimated = Counter(
            "orchestrator_cost_estimated_usd",
            "The part of orchestrator_cost_usd estimated from token counts and `prices` (Codex's runs)",
            ["role"],
            registry=r,
        )
        self.tokens = Counter(
            "orchestrator_tokens",
            "Tokens of ended runs, by kind (cached among input, reasoning among output)",
            ["role", "kind"],
            registry=r,
        )
        self.duration = Histogram(
            "orchestrator_run_duration_seconds", "Run time of ended runs", ["role"], buckets=DURATIONS, registry=r
        )
        self.cancel = Histogram(
            "orchestrator_cancel_seconds", "From stopping to cancelled", ["role"], buckets=CANCELS, registry=r
        )
        self._stopping: dict[int, float] = {}
        self._classes: set[str] = set()

    def run_changed(self, event: dict[str, Any]) -> None:
        run = event["run"]
        role, state, run_id = run["role"], run["state"], run["run_id"]
        if state == "starting":
            self.attempts.labels(role).inc()
        elif state == "retry_wait":
            self.retries.labels(role).inc()
        elif state == "stopping":
            self._stopping.setdefault(run_id, time.monotonic())
        if event.get("previous") is not None:
            return  # a change within the run's life; what follows is for its end
        self.ended.labels(role, state).inc()
        if state in ("failed", "timed_out"):
            label = reason_class(run.get("reason"))
            if label not in self._classes and len(self._classes) >= MAX_REASON_CLASSES:
                label = "other"
            self._classes.add(label)
            self.failures.labels(role, label).inc()
        if run.get("cost_usd"):
            self.cost.labels(role).inc(float(run["cost_usd"]))
            if run.get("cost_estimated"):
                self.estimated.labels(role).inc(float(run["cost_usd"]))
        for kind in TOKEN_KINDS:
            if run.get(f"{kind}_tokens"):
                self.tokens.labels(role, kind).inc(int(run[f"{kind}_tokens"]))
        if run.get("elapsed") is not None:
            self.duration.labels(role).observe(float(run["elapsed"]))
        began = self._stopping.pop(run_id, None)
        if state == "cancelled" and began is not None:
            self.cancel.labels(role).observe(time.monotonic() - began)

    async def endpoint(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)
