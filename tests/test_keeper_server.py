"""The keeper server: keepers started for the orchestrator by one long-lived process, their ends on one socket.

Real processes: the built keeper binary in ``--serve`` mode, real keepers and real
agents (``/bin/sh``); at the end a real ``orchestrator up`` whose server is killed.
"""

from __future__ import annotations

import array
import asyncio
import errno
import os
import signal
import socket
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import Project, pid_alive, wait_for
from orchestrator.agents import keeper, keeper_server, kept

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the keeper server is Linux-only")


@pytest.fixture(scope="module")
def binary() -> Path:
    built = keeper.locate()
    assert built is not None, f"no usable keeper in this checkout: {keeper.find().problem} (make, or pip install -e .)"
    return built


ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "KEEPER_ORCHESTRATOR_RUN_ID": "7"}


async def start(server: keeper_server.KeeperServer, binary: Path, tmp: Path, program: list[str], stdin: bool = False):
    """One start through ``server``: (what the status pipe said, the keeper's child, our end of its stdin)."""
    read_fd, write_fd = os.pipe()
    stdin_read = stdin_write = None
    if stdin:
        stdin_read, stdin_write = os.pipe()
    argv = keeper.keeper_argv(binary, tmp / "runs" / "7" / "1.exit", 0, 0.2, keeper_server.STATUS_FD, cwd=tmp)
    sent_at = server.send([*argv, *program], ENV, write_fd, stdin_read)
    assert sent_at is not None
    os.close(write_fd)
    if stdin_read is not None:
        os.close(stdin_read)
    status = await keeper.read_status(read_fd)
    os.close(read_fd)
    server.done(sent_at)
    child = keeper_server.ServedChild(status.keeper, stdin_write, server, sent_at) if status.keeper else None
    return status, child


def test_a_served_keeper_runs_its_agent_and_its_end_comes_over_the_socket(binary, tmp_path):
    gate = tmp_path / "gate"
    script = f"while [ ! -e {gate} ]; do sleep 0.02; done; pwd > where; exit 3"

    async def main():
        server = keeper_server.KeeperServer(binary, asyncio.get_running_loop())
        try:
            status, child = await start(server, binary, tmp_path, ["/bin/sh", "-c", script])
            assert status.keeper and status.agent and status.exec_errno is None
            forked = psutil.Process(status.keeper)
            assert forked.ppid() == server.pid, "the server's child, not ours"
            assert forked.environ() == {"KEEPER_ORCHESTRATOR_RUN_ID": "7"}, "its marks, where adoption reads them"
            assert keeper.is_keeper(status.keeper)
            gate.touch()
            assert await asyncio.wait_for(child.wait(), 10) == 3
        finally:
            gate.touch()
            server.close()
        return server.pid

    server_pid = asyncio.run(main())
    assert keeper.read_exit(tmp_path / "runs" / "7" / "1.exit") == keeper.ExitRecord(3, False)
    assert (tmp_path / "where").read_text().strip() == str(tmp_path)
    wait_for(lambda: not pid_alive(server_pid), what="the server gone at the socket's end")


def test_the_prompt_goes_to_the_agents_stdin(binary, tmp_path):
    async def main():
        server = keeper_server.KeeperServer(binary, asyncio.get_running_loop())
        status, child = await start(server, binary, tmp_path, ["/bin/sh", "-c", "cat > got"], stdin=True)
        rest = child.send(b"the prompt\n" * 100_000)  # more than a pipe holds: the rest is written by a task
        if rest is not None:
            await rest
        assert await asyncio.wait_for(child.wait(), 10) == 0
        server.close()

    asyncio.run(main())
    assert (tmp_path / "got").read_bytes() == b"the prompt\n" * 100_000


def test_a_request_the_server_cannot_take_is_refused_on_the_status_pipe(binary):
    async def main():
        server = keeper_server.KeeperServer(binary, asyncio.get_running_loop())
        read_fd, write_fd = os.pipe()
        fds = array.array("i", [write_fd]).tobytes()  # it says a stdin comes with it, and none does
        server.sock.sendmsg([b"1 1 0\0/bin/true\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        os.close(write_fd)
        status = await keeper.read_status(read_fd)
        os.close(read_fd)
        server.close()
        return status

    status = asyncio.run(main())
    assert (status.keeper, status.spawn_errno) == (None, errno.EINVAL)


def test_a_start_the_socket_cannot_carry_goes_the_direct_way(binary):
    async def main():
        server = keeper_server.KeeperServer(binary, asyncio.get_running_loop())
        read_fd, write_fd = os.pipe()
        try:
            too_big = server.send(["/bin/true", "x" * (keeper_server.MAX_REQUEST + 1)], ENV, write_fd, None)
            with_nul = server.send(["/bin/true", "a\0b"], ENV, write_fd, None)
        finally:
            os.close(read_fd)
            os.close(write_fd)
            server.close()
        return too_big, with_nul

    assert asyncio.run(main()) == (None, None)


def test_keepers_outlive_their_server(binary, tmp_path):
    gate = tmp_path / "gate"

    async def main():
        server = keeper_server.KeeperServer(binary, asyncio.get_running_loop())
        status, _child = await start(
            server, binary, tmp_path, ["/bin/sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"]
        )
        server.close()
        return server.pid, status

    try:  # the gate opened whatever happens: a failing test leaves no agent behind
        server_pid, status = asyncio.run(main())
        wait_for(lambda: not pid_alive(server_pid), what="the server gone")
        assert pid_alive(status.keeper) and pid_alive(status.agent), "a keeper does not need its server"
    finally:
        gate.touch()
    wait_for(lambda: keeper.read_exit(tmp_path / "runs" / "7" / "1.exit") is not None, what="the keeper's record")


def marked(mark: str) -> list[int]:
    """Live processes whose environment carries ``mark``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if mark in proc.environ().values() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.Error:
            pass
    return found


def test_an_end_read_before_its_start_is_kept_for_it_however_long_the_start_takes(binary, tmp_path):
    """The socket and the status pipe are two channels: a quick keeper's end may be read first."""

    async def main():
        server = keeper_server.KeeperServer(binary, asyncio.get_running_loop())
        read_fd, write_fd = os.pipe()
        argv = keeper.keeper_argv(binary, tmp_path / "runs" / "7" / "1.exit", 0, 0.2, keeper_server.STATUS_FD)
        sent_at = server.send([*argv, "/bin/sh", "-c", "exit 4"], ENV, write_fd, None)
        os.close(write_fd)
        os.set_blocking(read_fd, True)
        said = b""
        while chunk := os.read(read_fd, 256):  # the pipe read without the loop: the end comes in meanwhile
            said += chunk
        os.close(read_fd)
        status = keeper.parse_status(said)
        await asyncio.wait_for(asyncio.shield(wait_until(lambda: status.keeper in server.ended)), 10)
        stale = keeper_server.ServedChild(status.keeper, None, server, time.monotonic())  # sent after that end
        stale_code = stale.returncode
        server.watched.pop(status.keeper, None)
        later = keeper_server.ServedChild(status.keeper, None, server, sent_at)  # the start resumes, late
        server.done(sent_at)
        code = await asyncio.wait_for(later.wait(), 1)
        server.close()
        return code, stale_code

    code, stale = asyncio.run(main())
    assert code == 4, "the end reported before the start read the pid"
    assert stale is None, "a start sent after an end is never given it"


async def wait_until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.005)


def test_a_called_off_start_leaves_nothing_running(binary, tmp_path):
    mark = f"called-off-{tmp_path.name}"

    async def main():
        server = keeper_server.KeeperServer(binary, asyncio.get_running_loop())
        argv = keeper.keeper_argv(binary, tmp_path / "runs" / "7" / "1.exit", 0, 0.2, keeper_server.STATUS_FD)
        task = asyncio.ensure_future(
            kept._served(server, [*argv, "/bin/sleep", "30"], {**ENV, "KEEPER_MARK": mark}, False)
        )
        await asyncio.sleep(0)  # the request is sent; the start waits for the status pipe
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        server.close()

    asyncio.run(main())
    wait_for(lambda: keeper.read_exit(tmp_path / "runs" / "7" / "1.exit"), what="the keeper's record of the kill")
    wait_for(lambda: not marked(mark), what="the keeper and the agent of the called-off start gone")
    # the keeper shows the mark as KEEPER_MARK, the agent as MARK: both are looked for


def servers_of(pid: int) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(pid).children():
        try:
            if "--serve" in child.cmdline():
                found.append(child)
        except psutil.Error:  # a zombie (a server just killed, not reaped yet) or gone
            pass
    return found


def test_a_killed_server_loses_no_run_and_the_next_start_gets_a_new_one(project: Project):
    project.configure({"builder": {}})
    gate = project.root / "gate"
    orch = project.up()
    project.drop("builder", "S-1.md", {"id": "S-1", "agent": {"until": str(gate)}})
    record = wait_for(lambda: project.records(), what="the agent started")[0]
    first = wait_for(lambda: servers_of(orch.proc.pid), what="the keeper server")[0]
    keeper_pid = psutil.Process(record["pid"]).ppid()
    assert psutil.Process(keeper_pid).ppid() == first.pid
    os.kill(first.pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(first.pid), what="the server gone")
    assert pid_alive(keeper_pid) and pid_alive(record["pid"])
    gate.touch()  # the keeper, ours now as subreaper, is watched on its own: its end still comes back
    wait_for(lambda: project.folder("builder", "archive") == ["S-1.md"], what="S-1 archived")
    project.drop("builder", "S-2.md", {"id": "S-2"})
    wait_for(lambda: project.folder("builder", "archive") == ["S-1.md", "S-2.md"], what="S-2 archived")
    second = servers_of(orch.proc.pid)
    assert second and second[0].pid != first.pid, "the next start started a new server"
    assert len(project.records()) == 2
    assert orch.stop() == 0
