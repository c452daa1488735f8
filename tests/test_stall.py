"""A real agent that goes silent is stopped at its ``stall_timeout`` by the kill ladder, and retried."""

from __future__ import annotations

from conftest import Project, wait_for


def test_a_silent_agent_is_stopped_at_its_stall_timeout_and_retried(project: Project) -> None:
    project.configure(
        {"builder": {"stall_timeout": "0.5s", "grace": "0.3s", "retry": {"max": 1, "backoff": ["0.05s"]}}}
    )
    orch = project.up()
    project.drop("builder", "S-1.md", {"id": "S-1", "agent": {"say": "thinking", "sleep": 60, "grandchild": True}})
    wait_for(lambda: "S-1.md" in project.folder("builder", "failed"), what="S-1 in failed/")
    records = project.records()
    assert [r["attempt"] for r in records] == [1, 2]
    reason = "stalled: no output for 0.5s (the CLI may be waiting for a prompt it cannot show)"
    assert orch.output.count(f"S-1 {reason}; stopping it") == 2, orch.output
    run = next(r for r in project.status()["recent"] if r["memo"] == "S-1.md")
    assert run["reason"] == reason, run
    assert orch.stop() == 0
