"""The port's ``waits`` hook: a queued memo an extension says waits stays queued while the role's later memos
start, up to ``WAITS_PASSED`` of them; a hook that fails between the claims of a batch leaves no memo claimed
without a run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from orchestrator.config import Role
from orchestrator.supervisor.extension import WAITS_PASSED, Extension, Host
from replay import Replay


class Waiter(Extension):
    """Memos whose name begins with ``w`` wait; ``boom.md`` makes the hook fail."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def waits(self, role: Role, memo: Path) -> str | None:
        if memo.name == "boom.md":
            raise RuntimeError("a bug in a waits hook")
        return "waits for its turn" if memo.name.startswith("w") else None


def play(tmp_path: Path, scenario: Any, roles: dict[str, dict[str, Any]] | None = None) -> None:
    async def main() -> None:
        r = Replay(tmp_path, roles, more=[Waiter])
        try:
            await scenario(r)
        finally:
            r.close()

    asyncio.run(main())


def test_later_memos_pass_the_memos_that_wait_up_to_a_bound(tmp_path: Path) -> None:
    async def scenario(r: Replay) -> None:
        for i in range(WAITS_PASSED):
            await r.drop("builder", f"w{i:03d}.md")
        await r.drop("builder", "a.md")
        assert r.state("a") == "running", "passed all the memos that wait"
        await r.drop("builder", "w-last.md")
        await r.drop("builder", "b.md")  # behind WAITS_PASSED + 1 that wait: a pass looks no further
        assert r.state("b") == "unknown" and "b.md" in r.folder("builder", "inbox")
        assert len(r.folder("builder", "inbox")) == WAITS_PASSED + 2

    play(tmp_path, scenario)


def test_a_waits_hook_that_fails_between_two_claims_of_a_batch_leaves_no_memo_claimed_without_a_run(
    tmp_path: Path,
) -> None:
    async def scenario(r: Replay) -> None:
        await r.drop("pm", "first.md")
        await r.drop("pm", "a.md")  # queued behind the batch role's live run, with the memo that breaks the hook
        await r.drop("pm", "boom.md")
        await r.exit("first", 0)  # the next pass claims a.md, then asks the hook of boom.md
        assert r.folder("pm", "active") == [] and r.folder("pm", "failed") == ["a.md"], r.folder("pm", "active")
        assert "internal error: opening a run of pm failed" in r.console.text

    play(tmp_path, scenario, {"pm": {"batch": True, "batch_max": 3}})
