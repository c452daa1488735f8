"""A stand-in agent for ``orchestrator demo``: simulates a few seconds of work and writes reply memos.

project-manager: a kickoff memo becomes two builder tasks; a reviewer's verdict is accepted.
builder: asks the reviewer for a review. reviewer: approves, to the project manager.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

from orchestrator.intake.memo import new_memo_id, parse_front_matter, render_memo, slug, write_atomically

TASKS = ("Build the landing page", "Write the about page")


def _send(root: Path, to: str, subject: str, reply_to: str | None, tags: list[str], body: str) -> None:
    memo_id = new_memo_id()
    time.sleep(0.002)  # distinct ids
    header = {
        "id": memo_id,
        "subject": subject,
        "from": os.environ["ORCHESTRATOR_ROLE"],
        "to": to,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "tags": tags,
        "reply_to": reply_to,
    }
    write_atomically(root / "memo" / to / "inbox" / f"{memo_id}-{slug(subject)}.md", render_memo(header, body))
    print(f"sent {to}: {subject}", flush=True)


def main() -> int:
    sys.stdin.read()  # the prompt
    role = os.environ["ORCHESTRATOR_ROLE"]
    root = Path(os.environ["ORCHESTRATOR_ROOT"])
    paths = os.environ.get("ORCHESTRATOR_MEMOS") or os.environ.get("ORCHESTRATOR_MEMO", "")
    speed = float(os.environ.get("ORCHESTRATOR_DEMO_SPEED", "1"))
    for line in paths.splitlines():
        path = Path(line)
        header = parse_front_matter(path.read_text(encoding="utf-8"))
        subject = header.subject or path.name
        print(f"{role}: working on {subject!r}", flush=True)
        time.sleep(random.uniform(1.5, 3.0) * speed)
        if role == "project-manager" and "kickoff" in header.tags:
            for task in TASKS:
                _send(root, "builder", task, header.id, ["task"], f"Please: {task.lower()}.")
        elif role == "project-manager":
            print(f"accepted: {subject}", flush=True)
        elif role == "builder":
            _send(
                root,
                "reviewer",
                f"Review: {subject}",
                header.id,
                ["review-request"],
                f"Done: {subject}. Please review.",
            )
        elif role == "reviewer":
            _send(
                root,
                "project-manager",
                f"Approved: {subject.removeprefix('Review: ')}",
                header.id,
                ["review"],
                "Looks good to me.",
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
