"""The shortest path through the whole tool: one memo runs once and is archived."""

import pytest

from conftest import wait_for


@pytest.mark.os_level
def test_one_memo_runs_once_and_is_archived(project):
    project.configure()
    orch = project.up()
    project.drop("builder", "B-031.md", {"id": "B-031", "subject": "three articles"})
    wait_for(lambda: project.folder("builder", "archive") == ["B-031.md"], what="the memo archived")
    assert len(project.records()) == 1
    assert orch.stop() == 0
    assert len(project.records()) == 1
    assert '[builder] start B-031 "three articles"' in orch.output
