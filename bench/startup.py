"""start-up: `up` over a large backlog until the first agent starts, beside a shell loop."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from bench.common import Context, Outcome, Row
from bench.harness import (
    Orchestrator,
    Project,
    Stats,
    child_env,
    fill_inbox,
    memo_name,
    read_records,
    wait_for,
)


def startup(ctx: Context) -> Outcome:
    s = ctx.sizes
    out = Outcome("start-up")
    roles = [f"r{k}" for k in range(s.startup_roles)]
    per_role = s.startup_memos // len(roles)
    ctx.say(f"start-up: {per_role * len(roles)} memos in {len(roles)} inboxes; {s.startup_repeats} start(s)")
    project = ctx.project("startup")
    project.configure({r: {} for r in roles})
    for role in roles:
        fill_inbox(project.folder(role, "inbox"), [f"{role}-{memo_name(i)}" for i in range(per_role)], role)

    ours: list[float] = []
    base: list[float] = []
    for _ in range(s.startup_repeats):
        base.append(_shell_first_start(ctx, project.root))
        project.record.unlink(missing_ok=True)
        orch = Orchestrator(project).start()
        rec = wait_for(lambda o=orch: (o.check_alive(), project.records())[1], 60, "the first agent start")
        ours.append((min(r.ns for r in rec) - orch.launched_ns) / 1e9)
        orch.stop()
        _restore(project, roles)
    st, bst = Stats.of(ours), Stats.of(base)
    waiting = per_role * len(roles)
    bname = "sh: glob the inboxes, exec the agent"
    out.rows.append(
        Row(
            "start-up", f"{waiting} memos waiting: launch -> first agent, p50", st.p50, "s", bst.p50, bname, "", None, 3
        )
    )
    out.rows.append(
        Row(
            "start-up",
            f"the same, slowest of {st.n} starts",
            st.high,
            "s",
            bst.high,
            bname,
            "<= 1 s",
            st.high <= 1.0,
            3,
        )
    )
    out.details.append(f"orchestrator, launch of `orchestrator up` -> first agent start (s): {st.line('s', 3)}")
    out.details.append(
        f"baseline `sh -c 'for f in memo/*/inbox/*.md; do exec agent \"$f\"; done'` (s): {bst.line('s', 3)}"
    )
    return out


def _shell_first_start(ctx: Context, root: Path) -> float:
    record = ctx.scratch / "startup-baseline.txt"
    record.unlink(missing_ok=True)
    t0 = time.time_ns()
    subprocess.run(
        ["sh", "-c", 'for f in "$1"/memo/*/inbox/*.md; do exec "$2" "$f"; done', "sh", str(root), str(ctx.agent)],
        env=child_env(record),
        check=True,
    )
    return (read_records(record)[0].ns - t0) / 1e9


def _restore(project: Project, roles: list[str]) -> None:
    """Put the few memos the last start ran back into their inboxes, dated in the past again."""
    when = time.time() - 60
    for role in roles:
        inbox = project.folder(role, "inbox")
        for folder in ("archive", "active", "failed"):
            src = project.folder(role, folder)
            if not src.is_dir():
                continue
            for entry in os.scandir(src):
                if entry.name.endswith(".md"):
                    os.rename(entry.path, inbox / entry.name)
                    os.utime(inbox / entry.name, (when, when))
