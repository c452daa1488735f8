"""Spans per run with the ``otel`` extra: a real ``up`` exporting to a stand-in OTLP/HTTP collector.

The collector (a small HTTP server in this test) is the one boundary faked; it decodes what the SDK's exporter
sends with the OTLP protobuf definitions that come with the extra.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from conftest import Project, wait_for

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed (pip install '.[otel]')")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

AGENT = """
import json, os, sys
root = os.environ["ORCHESTRATOR_ROOT"]
with open(os.path.join(root, "traceparents.jsonl"), "a") as out:
    out.write(json.dumps({"attempt": os.environ["ORCHESTRATOR_ATTEMPT"], "tp": os.environ.get("TRACEPARENT")}) + "\\n")
sys.exit(1 if os.environ["ORCHESTRATOR_ATTEMPT"] == "1" else 0)
"""


class Collector:
    """Spans received, by name, with their attributes, ids and parents."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        spans = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            attrs = {}
                            for kv in span.attributes:
                                value = kv.value
                                attrs[kv.key] = value.string_value or value.int_value or value.double_value
                            spans.append(
                                {
                                    "name": span.name,
                                    "trace": span.trace_id.hex(),
                                    "id": span.span_id.hex(),
                                    "parent": span.parent_span_id.hex(),
                                    "attrs": attrs,
                                    "schema": scope.schema_url,
                                }
                            )
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_one_span_per_run_attempts_as_children_and_traceparent_to_the_agent(project: Project) -> None:
    script = project.root / "agent_tp.py"
    script.write_text(AGENT, encoding="utf-8")
    project.configure({"builder": {"command": [sys.executable, str(script)], "retry": {"max": 1, "backoff": ["0.1s"]}}})
    collector = Collector()
    try:
        orch = project.up(OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint, OTEL_BSP_SCHEDULE_DELAY="100")
        project.drop("builder", "B-1.md", {"id": "B-1"})
        wait_for(lambda: project.folder("builder", "archive") == ["B-1.md"], what="B-1 to succeed on its retry")
        assert orch.stop() == 0
        runs = wait_for(lambda: [s for s in collector.spans if s["name"] == "invoke_agent builder"], what="the span")
        run = runs[0]
        attempts = [s for s in collector.spans if s["name"].startswith("attempt ")]
        assert sorted(s["name"] for s in attempts) == ["attempt 1", "attempt 2"]
        assert all(s["parent"] == run["id"] and s["trace"] == run["trace"] for s in attempts)
        assert run["attrs"]["gen_ai.operation.name"] == "invoke_agent"
        assert run["attrs"]["gen_ai.agent.name"] == "builder" and run["schema"].endswith("1.37.0")
        seen = [json.loads(line) for line in (project.root / "traceparents.jsonl").read_text().splitlines()]
        by_attempt = {s["name"].split()[1]: s for s in attempts}
        for entry in seen:
            version, trace_id, parent, _flags = entry["tp"].split("-")
            assert version == "00" and trace_id == run["trace"] and parent == by_attempt[entry["attempt"]]["id"]
        assert "tracing: one span per run" in orch.output
    finally:
        collector.close()
