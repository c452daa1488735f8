"""Children without asyncio's subprocess layer: a keeper's ``posix_spawn``, an agent started without a keeper
(``start_direct``), a pidfd for their end, their stdin written without asyncio.

Real child processes (``/bin/sh`` and Python), no keeper: what is tested is the
start itself (descriptors, session, folder, stdin, exit status).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.agents import posix_child, procs


def test_exit_codes_and_signals_come_back_as_asyncio_gives_them():
    async def main() -> list[int | None]:
        codes: list[int | None] = []
        for script in ("exit 0", "exit 3", "kill -TERM $$", "kill -KILL $$"):
            child = posix_child.spawn(["/bin/sh", "-c", script], dict(os.environ), stdin_pipe=False)
            assert child.pid in procs._spared, "reap_orphans must leave it to us"
            codes.append(await child.wait())
            assert child.returncode == codes[-1]
            assert child.pid not in procs._spared, "released once its status is read"
        return codes

    assert asyncio.run(main()) == [0, 3, -signal.SIGTERM, -signal.SIGKILL]


def test_the_child_leads_a_session_and_inherits_the_descriptors_it_is_given(tmp_path: Path):
    out = tmp_path / "seen.json"
    probe = (
        "import json, os; json.dump({'pid': os.getpid(), 'sid': os.getsid(0), 'cwd': os.getcwd(), "
        f"'fds': sorted(int(n) for n in os.listdir('/proc/self/fd'))}}, open({str(out)!r}, 'w'))"
    )

    async def main() -> tuple[int, int, int]:
        kept_r, kept_w = os.pipe()
        other_r, other_w = os.pipe()  # ours alone: not inherited
        try:
            child = posix_child.spawn(
                [sys.executable, "-c", probe], dict(os.environ), stdin_pipe=True, keep_fds=(kept_w,)
            )
            assert child.send(b"") is None
            assert await child.wait() == 0
            assert not os.get_inheritable(kept_w), "inheritable for that one start only"
            return child.pid, kept_w, other_w
        finally:
            for fd in (kept_r, kept_w, other_r, other_w):
                os.close(fd)

    pid, kept, other = asyncio.run(main())
    seen = json.loads(out.read_text())
    assert seen["pid"] == seen["sid"] == pid
    assert seen["cwd"] == os.getcwd()
    # ours are all close-on-exec, as Python makes them (what a parent left inheritable the keeper closes)
    assert kept in seen["fds"] and other not in seen["fds"]


def test_stdin_takes_a_prompt_larger_than_the_pipe_and_closes(tmp_path: Path):
    out = tmp_path / "got"
    reader = f"import sys, time; time.sleep(0.3); open({str(out)!r}, 'w').write(str(len(sys.stdin.buffer.read())))"
    big = b"x" * (3 * 1024 * 1024)

    async def main() -> tuple[bool, bool, int]:
        small = posix_child.spawn([sys.executable, "-c", reader], dict(os.environ), stdin_pipe=True)
        small_now = small.send(b"hello") is None
        await small.wait()
        small_got = out.read_text() == "5"
        large = posix_child.spawn([sys.executable, "-c", reader], dict(os.environ), stdin_pipe=True)
        rest = large.send(big)
        assert rest is not None, "a pipe holds far less than 3 MiB: the rest is written as the child reads"
        await rest
        return small_now, small_got, await large.wait()

    small_now, small_got, code = asyncio.run(main())
    assert small_now and small_got and code == 0
    assert out.read_text() == str(len(big))


def test_a_child_that_stops_reading_its_stdin_does_not_hang_the_writer():
    async def main() -> int:
        child = posix_child.spawn(["/bin/sh", "-c", "exit 5"], dict(os.environ), stdin_pipe=True)
        rest = child.send(b"y" * (1024 * 1024))
        if rest is not None:
            await asyncio.wait_for(rest, 10)  # EPIPE once the child is gone: ends, without an error
        return await child.wait()

    assert asyncio.run(main()) == 5


def test_without_pidfds_the_loop_looks_for_the_childs_end(monkeypatch):
    def no_pidfd(_pid: int) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)

    async def main() -> list[int]:
        codes = []
        for script in ("exit 4", "kill -TERM $$"):
            child = posix_child.spawn(["/bin/sh", "-c", script], dict(os.environ), stdin_pipe=False)
            codes.append(await asyncio.wait_for(child.wait(), 10))
        return codes

    assert asyncio.run(main()) == [4, -signal.SIGTERM]


def test_a_direct_start_enters_its_folder_leads_a_session_and_writes_to_the_log(tmp_path: Path):
    folder = tmp_path / "work"
    folder.mkdir()
    log = tmp_path / "agent.log"
    probe = "import os, sys; print(os.getcwd(), os.getsid(0) == os.getpid(), sys.stdin.read()); sys.exit(6)"

    async def main() -> tuple[int, int]:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            child = posix_child.start_direct(
                [sys.executable, "-c", probe], dict(os.environ), cwd=folder, output=fd, stdin_pipe=True
            )
        finally:
            os.close(fd)
        assert child.pid in procs._spared, "reap_orphans must leave it to us"
        assert child.send(b"the prompt") is None
        return child.pid, await asyncio.wait_for(child.wait(), 10)

    pid, code = asyncio.run(main())
    assert code == 6 and pid not in procs._spared
    assert log.read_text().split() == [str(folder), "True", "the", "prompt"]


def test_a_direct_start_into_a_missing_folder_names_it():
    async def main() -> None:
        posix_child.start_direct(["/bin/true"], dict(os.environ), cwd=Path("/nonexistent/x"), output=1, stdin_pipe=True)

    with pytest.raises(OSError) as caught:
        asyncio.run(main())
    assert str(caught.value.filename) == "/nonexistent/x"


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_end_of_a_process_that_is_not_our_child_is_seen(monkeypatch, pidfd):
    if not pidfd:
        monkeypatch.setattr(os, "pidfd_open", lambda _pid: (_ for _ in ()).throw(OSError(38, "no pidfd")))
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    ref = procs.ProcRef.of(other.pid)
    assert ref is not None

    async def main() -> bool:
        waiting = asyncio.ensure_future(posix_child.process_ended(ref))
        await asyncio.sleep(0.2)
        early = waiting.done()
        assert other.stdin is not None
        other.stdin.close()  # it ends; it is the test's child, not the loop's
        await asyncio.wait_for(waiting, 10)
        return early

    try:
        assert asyncio.run(main()) is False
    finally:
        other.wait(5)
