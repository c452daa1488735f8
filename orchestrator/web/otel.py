"""OpenTelemetry spans per run, with the optional extra ``orchestrator[otel]`` and ``OTEL_EXPORTER_OTLP_ENDPOINT``.

One span per run, ``invoke_agent <role>``, and one child span per attempt; the attempt's context goes to its
agent as ``TRACEPARENT`` so Claude Code's own spans nest under it. Attributes follow the OpenTelemetry semantic
conventions for generative AI as of ``SEMCONV`` (agent spans: ``gen_ai.operation.name``, ``gen_ai.agent.name``,
``gen_ai.conversation.id`` = the session id, ``gen_ai.usage.*`` tokens). Spans are exported by the SDK's batch
processor in its own thread, so the loop never waits on the collector.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

from orchestrator.core.states import FINISHED  # the states a run ends in (strings compare equal to them)
from orchestrator.web.attach import Attachment

SEMCONV = "1.37.0"  # the semantic-conventions release these attribute names follow (GenAI: development status)
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV}"
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"


def wanted() -> bool:
    """Whether spans are asked for (the standard variable names a collector)."""
    return bool(os.environ.get(ENDPOINT_ENV))


def available() -> bool:
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
    )


class Tracing:
    """The spans of the runs under way; fed by the attachment's run changes."""

    def __init__(self, attachment: Attachment, tracer: Any, provider: Any) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.att = attachment
        self.tracer = tracer
        self.provider = provider
        self.propagator = TraceContextTextMapPropagator()
        self.runs: dict[int, Any] = {}
        self.attempts: dict[int, Any] = {}
        attachment.watch(self.changed)
        attachment.add_agent_env(self.env_of)

    def changed(self, event: dict[str, Any]) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        run = event["run"]
        run_id, state = run["run_id"], run["state"]
        if state == "starting":
            span = self.runs.get(run_id)
            if span is None:
                span = self.runs[run_id] = self.tracer.start_span(
                    f"invoke_agent {run['role']}",
                    attributes={
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": run["role"],
                        "gen_ai.provider.name": "anthropic",
                        "orchestrator.run_id": run_id,
                        "orchestrator.memo": run.get("memo_id") or run.get("memo") or "",
                    },
                )
            self._end_attempt(run_id, None)
            self.attempts[run_id] = self.tracer.start_span(
                f"attempt {run.get('attempt')}",
                context=trace.set_span_in_context(span),
                attributes={"orchestrator.attempt": run.get("attempt") or 0},
            )
        elif state == "retry_wait":
            self._end_attempt(run_id, "the attempt failed; a retry follows")
        if event.get("previous") is None and state in FINISHED:
            failed = state in ("failed", "timed_out")
            self._end_attempt(run_id, run.get("reason") if failed else None)
            span = self.runs.pop(run_id, None)
            if span is None:
                return
            row = self.att.recorded(run_id) or {}
            for key, value in (
                ("gen_ai.conversation.id", row.get("session_id")),
                ("gen_ai.usage.input_tokens", row.get("input_tokens")),
                ("gen_ai.usage.output_tokens", row.get("output_tokens")),
                ("orchestrator.cost_usd", row.get("cost_usd")),
                ("orchestrator.state", state),
            ):
                if value is not None:
                    span.set_attribute(key, value)
            if failed:
                span.set_status(Status(StatusCode.ERROR, run.get("reason") or state))
            span.end()

    def _end_attempt(self, run_id: int, error: str | None) -> None:
        from opentelemetry.trace import Status, StatusCode

        span = self.attempts.pop(run_id, None)
        if span is not None:
            if error:
                span.set_status(Status(StatusCode.ERROR, error))
            span.end()

    def env_of(self, run_id: int) -> dict[str, str]:
        """``TRACEPARENT`` for the agent of the run's current attempt."""
        from opentelemetry import trace

        span = self.attempts.get(run_id)
        if span is None:
            return {}
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier, context=trace.set_span_in_context(span))
        return {"TRACEPARENT": carrier["traceparent"]} if "traceparent" in carrier else {}

    def shutdown(self) -> None:
        """End what is open and send what is left (the orchestrator ends)."""
        for run_id in list(self.attempts):
            self._end_attempt(run_id, None)
        for span in self.runs.values():
            span.end()
        self.runs.clear()
        self.provider.shutdown()


def start(attachment: Attachment, say: Callable[[str], None]) -> Tracing | None:
    """Spans for ``attachment``'s runs when a collector is named; a named one without the extra is said once."""
    if not wanted():
        return None
    if not available():
        say(
            f"warning: {ENDPOINT_ENV} is set, but the otel extra is not installed "
            "(`pip install 'orchestrator[otel]'`): no spans are sent"
        )
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "orchestrator"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=500))
    tracer = provider.get_tracer("orchestrator", schema_url=SCHEMA_URL)
    say(f"tracing: one span per run to {os.environ[ENDPOINT_ENV]} (OpenTelemetry GenAI conventions {SEMCONV})")
    return Tracing(attachment, tracer, provider)
