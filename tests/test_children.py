"""The child watcher: agents' exits are seen through pidfds on the loop, with no thread per child."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest

from orchestrator.agents import children


@pytest.mark.skipif(sys.version_info >= (3, 12) or not children.pidfd_works(), reason="pidfds are 3.12's default")
def test_exits_are_seen_without_a_thread_per_child() -> None:
    async def main() -> list[int]:
        assert children.use_pidfd_watcher()
        before = threading.active_count()
        procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", f"raise SystemExit({i})") for i in range(5)]
        assert threading.active_count() == before, "no waitpid thread was started"
        return [await proc.wait() for proc in procs]

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]
