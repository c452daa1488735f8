"""``orchestrator demo``: a self-contained team in a temporary folder, wired to the stand-in agent."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from orchestrator import console
from orchestrator.app import run_up
from orchestrator.intake.memo import new_memo_id, render_memo, write_atomically

ROLES_YAML = """\
max_concurrent: 4
notify: project-manager
rescan_interval: 1s
defaults:
  command: [{python}, -m, orchestrator.demo_agent]
  timeout: 2m
  grace: 2s
roles:
  project-manager: {{prompt: prompts/project-manager.md, batch: true, critical: true}}
  builder: {{prompt: prompts/builder.md, max_concurrent: 2}}
  reviewer: {{prompt: prompts/reviewer.md}}
"""
PROMPT = "You are the $role. Run $run_id, attempt $attempt, $now.\nMemos:\n$memo_paths\n"


def make_demo_project(folder: Path) -> Path:
    """Write the demo team and its kickoff memo into ``folder``."""
    (folder / "roles.yaml").write_text(ROLES_YAML.format(python=sys.executable), encoding="utf-8")
    for role in ("project-manager", "builder", "reviewer"):
        (folder / "prompts").mkdir(exist_ok=True)
        (folder / "prompts" / f"{role}.md").write_text(PROMPT, encoding="utf-8")
        (folder / "memo" / role / "inbox").mkdir(parents=True, exist_ok=True)
    memo_id = new_memo_id()
    header = {
        "id": memo_id,
        "subject": "Kick off the website",
        "from": "owner",
        "to": "project-manager",
        "tags": ["kickoff"],
        "reply_to": None,
    }
    write_atomically(
        folder / "memo" / "project-manager" / "inbox" / f"{memo_id}-kickoff.md",
        render_memo(header, "Build a small website: a landing page and an about page."),
    )
    return folder


def run_demo() -> int:
    folder = Path(tempfile.mkdtemp(prefix="orchestrator-demo-"))
    make_demo_project(folder)
    console.say(f"demo team in {folder}: project-manager -> builder -> reviewer -> project-manager; ends by itself")
    code = run_up(folder, until_idle=True)
    archived = sorted(p.relative_to(folder) for p in folder.glob("memo/*/archive/*.md"))
    console.say(f"\n{len(archived)} memos handled, now in archive/:")
    for path in archived:
        console.say(f"  {path}")
    console.say(f"look around: ls -R {folder}/memo; cat {folder}/.orchestrator/orchestrator.log")
    return code
