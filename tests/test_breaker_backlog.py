"""The loop breaker against real `orchestrator up` processes: backlogs and people's memos are not loops.

A backlog waiting at start-up is claimed within seconds; ``pair_rate`` must count its memos at the
times they were written, and count only memos from one role to another. The stand-in agent exits at
once, so these tests take as long as starting a few hundred small processes.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from conftest import Project, wait_for

CORPUS = Path(__file__).parent / "fixtures" / "yolo-web-memos"
DRAIN = 240.0  # deadline for draining hundreds of memos on a loaded 2-core machine


def starts(project: Project) -> Counter[tuple[str, str]]:
    """How many agents each memo (role, file name) was handed to."""
    return Counter((r["role"], os.path.basename(r["memo"])) for r in project.records())


def folders(project: Project, roles: list[str], folder: str) -> int:
    return sum(len(project.folder(role, folder)) for role in roles)


def stamp(moment: datetime) -> str:
    return moment.astimezone().isoformat(timespec="milliseconds")


@pytest.mark.timeout(DRAIN + 60)
def test_300_memos_a_script_writes_while_up_starts_all_run_once(project: Project) -> None:
    project.configure({"builder": {}, "reviewer": {}}, max_concurrent=16)
    names: list[str] = []

    def write(count: int) -> None:  # a script: `from` names no role; half carry a created_at, half do not
        for _ in range(count):
            n = len(names)
            front = {"id": f"ci{n:03d}", "from": "ci-bot", "subject": f"build {n}"}
            if n % 2:
                front["created_at"] = stamp(datetime.now())
            names.append(project.drop("builder", f"{n:03d}-build.md", front=front).name)

    write(100)  # waiting before the start
    orch = project.up(wait_ready=False)
    write(100)  # written while it starts
    orch.wait_ready()
    write(100)  # and once it runs
    wait_for(
        lambda: len(project.folder("builder", "archive")) + len(project.folder("builder", "held")) == 300,
        DRAIN,
        "all 300 memos archived or held",
    )
    assert orch.stop() == 0
    assert project.folder("builder", "held") == []
    assert starts(project) == Counter({("builder", name): 1 for name in names})


@pytest.mark.timeout(DRAIN + 60)
def test_the_real_corpus_replayed_at_once_runs_every_memo_once_with_none_held(project: Project) -> None:
    roles = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
    memos = {(role, p.name): p for role in roles for p in sorted((CORPUS / role).glob("*.md"))}
    assert len(memos) == 419
    # the check can fail: by sender and addressee, the corpus holds pairs far past 20 memos in all
    senders = Counter(
        (str(yaml.safe_load(p.read_text(encoding="utf-8").split("---", 2)[1]).get("from")), role)
        for (role, _), p in memos.items()
    )
    assert max(senders.values()) > 40
    project.configure({role: {} for role in roles}, max_concurrent=16)  # the default limits: 20/h, depth 40
    for (role, name), source in memos.items():  # as after a day's downtime: every memo waits at the start
        inbox = project.root / "memo" / role / "inbox"
        inbox.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, inbox / name)
    orch = project.up()
    wait_for(
        lambda: folders(project, roles, "archive") + folders(project, roles, "held") == len(memos),
        DRAIN,
        "every memo of the corpus archived or held",
    )
    assert orch.stop() == 0
    assert {role: project.folder(role, "held") for role in roles} == {role: [] for role in roles}
    assert starts(project) == Counter({key: 1 for key in memos})


def test_a_backlog_of_one_pair_holds_only_the_21st_memo_written_within_an_hour(project: Project) -> None:
    project.configure({"builder": {}, "reviewer": {}}, max_concurrent=16)
    now = datetime.now()
    written = [now - timedelta(minutes=300 - 10 * n) for n in range(24)]  # every 10 minutes: 6 an hour
    written += [now - timedelta(minutes=45 - 2 * n) for n in range(21)]  # then 21 within the last 45 minutes
    for n, moment in enumerate(written):  # file names in written order: the order they are claimed in
        front = {"id": f"b{n:02d}", "from": "builder", "to": "reviewer", "created_at": stamp(moment)}
        project.drop("reviewer", f"{n:02d}-review.md", front=front)
    orch = project.up()
    wait_for(
        lambda: len(project.folder("reviewer", "archive")) + len(project.folder("reviewer", "held")) == len(written),
        what="every memo archived or held",
    )
    assert orch.stop() == 0
    assert project.folder("reviewer", "held") == [f"{len(written) - 1:02d}-review.md"]
    reason = (project.root / "memo" / "reviewer" / "held" / f"{len(written) - 1:02d}-review.reason").read_text()
    assert "builder already sent reviewer 20 memos within 1h, the limits.pair_rate (20/1h)" in reason
    assert len(starts(project)) == len(written) - 1
