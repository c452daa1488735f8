"""docs/web.md is part of the interface: its YAML loads as `up` would, its shell example runs against a real
dashboard, and its metrics table names what /metrics serves."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme_yaml import as_team, stub_files, yaml_blocks

from conftest import Project, wait_for
from orchestrator.app import preflight
from orchestrator.config import load_config
from web_harness import start

DOC = Path(__file__).resolve().parent.parent / "docs" / "web.md"
TEXT = DOC.read_text(encoding="utf-8")
BLOCKS = yaml_blocks(TEXT)


def test_the_doc_has_its_examples() -> None:
    assert len(BLOCKS) >= 2 and "```sh" in TEXT


@pytest.mark.parametrize("block", [pytest.param(body, id=f"docs/web.md line {line}") for line, body in BLOCKS])
def test_a_yaml_block_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: str) -> None:
    text, team = as_team(block)
    (tmp_path / "roles.yaml").write_text(text, encoding="utf-8")
    stub_files(tmp_path, team)
    monkeypatch.setenv("ORCHESTRATOR_SPAWN_CMD", sys.executable)
    config = load_config(tmp_path)
    preflight(config)
    assert config.web is not None


def test_the_shell_example_runs_and_the_metrics_table_is_what_is_served(project: Project) -> None:
    if shutil.which("curl") is None:
        pytest.skip("no curl here to run the doc's example with")
    project.configure({"builder": {"grace": "5s"}})
    board = start(project)
    project.drop("builder", "B-1.md", {"id": "B-1", "agent": {"sleep": 60}})
    run = wait_for(lambda: board.run_of("B-1.md"), what="B-1 running")
    script = re.search(r"```sh\n(.*?)```", TEXT, re.DOTALL)
    assert script is not None
    commands = script.group(1).replace("http://127.0.0.1:8765", board.url.rstrip("/"))
    commands = commands.replace("runs/12/", f"runs/{run['run_id']}/")
    done = subprocess.run(["bash", "-c", "set -e\n" + commands], cwd=project.root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert '"running":true' in done.stdout and '"state":"cancelled"' in done.stdout, done.stdout
    served = board.get("/metrics").text
    documented = re.findall(r"^\| `(orchestrator_[a-z_]+)` \|", TEXT, re.MULTILINE)
    assert len(documented) >= 10
    for name in documented:
        assert f"# TYPE {name.removesuffix('_total')} " in served or f"# TYPE {name} " in served, name
    board.close()
    assert board.orch.stop() == 0
