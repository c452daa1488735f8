"""What runs on a Ray worker for one attempt: start the agent, stream its output, stop its whole tree when asked.

Nothing here imports Ray: the actor (``board.WrapperActor``) passes in ``ask``. With no head for
``reconnect_within`` (``lost_after`` when that is 0) the wrapper kills its agent itself. Before it starts an agent
it kills those whose wrapper died, since a worker killed mid-run leaves its agent orphaned on the node.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.agents import memo_list, procs
from orchestrator.agents.posix_child import popen_session
from orchestrator.agents.proc_table import KEY_ENV, identity
from orchestrator.agents.ray.wire import AnyMessage, Beat, Ended, Output, Payload, Started, StartFailed

WRAPPER_ENV = "ORCHESTRATOR_WRAPPER"  # "<pid>:<create time>" of the wrapper that started the agent
LEASE_ENV = "ORCHESTRATOR_LEASE"
CHUNK = 64 * 1024

#: the stop-request probe: the grace period asked for, None when nobody asked; raises when the head is unreachable
Ask = Callable[[], float | None]
#: the control messages (``{"id", "what", "line"}``) the head left for an sdk session since the last probe
Inbox = Callable[[], list[dict[str, Any]]]


def _wrapper_alive(mark: str | None) -> bool:
    """Whether the wrapper named by an agent's ``WRAPPER_ENV`` mark lives (True: no mark, not a wrapper's agent)."""
    if mark is None:
        return True
    pid, _, created = mark.partition(":")
    try:
        ref = procs.ProcRef(int(pid), float(created))
    except ValueError:
        return True  # not ours to judge
    return ref.process() is not None


def who(payload: Payload) -> str:
    """The project the payload's agent belongs to, as its processes' marks say it (``proc_table.identity``)."""
    return identity(payload.root, payload.env.get(KEY_ENV))


def sweep_orphans(root: str, key: str | None = None, run_id: int | None = None, attempt: int = 0) -> list[int]:
    """Kill every agent of this project (``root`` and its ``key``) on this node whose wrapper is dead, and every agent
    of an earlier attempt of run ``run_id`` than ``attempt`` (the head gave that one up: its wrapper hung or was cut
    off, and may outlive even its actor's kill by seconds); return the pids ended. An orphan that carries no key (an
    agent started before projects had one) is this root's too."""
    mine = identity(root, key)
    targets: dict[tuple[str, str, str], procs.Target] = {}
    for pid in procs.all_pids():
        env = procs.environ(pid)
        if not env:
            continue
        theirs = identity(env.get("ORCHESTRATOR_ROOT", ""), env.get(KEY_ENV))
        if theirs != mine and theirs != root:
            continue
        run, tried = env.get("ORCHESTRATOR_RUN_ID", ""), env.get("ORCHESTRATOR_ATTEMPT", "")
        if not run.isdigit() or not tried.isdigit():
            continue
        superseded = theirs == mine and int(run) == run_id and int(tried) < attempt
        if not superseded and _wrapper_alive(env.get(WRAPPER_ENV)):
            continue
        stat = procs.proc_stat(pid)
        if stat is None:
            continue
        targets.setdefault((theirs, run, tried), procs.Target(None, stat[0], int(run), theirs, attempt=int(tried)))
    ended: list[int] = []
    for target in targets.values():
        ended += asyncio.run(procs.stop_tree(target, 0.0)).pids
    return sorted(set(ended))


def run(payload: Payload, ask: Ask, node: str, inbox: Inbox | None = None) -> Iterator[AnyMessage]:
    """The wrapper's life as a stream of messages: started (or start failed), output and beats, then ended.

    For ``backend: sdk`` the agent is the sdk runner (``sdk_worker``): what it prints is the output; its events,
    transcript lines and the answers to the controls ``inbox`` brings travel as messages of their own.
    """
    lease = payload.lease
    orphans = sweep_orphans(payload.root, payload.env.get(KEY_ENV), payload.run_id, payload.attempt)
    folder = Path(tempfile.mkdtemp(prefix=f"orchestrator-run{payload.run_id}-{payload.attempt}-"))
    proc: subprocess.Popen[bytes] | None = None
    target: procs.Target | None = None
    out: queue.Queue[bytes | None] = queue.Queue()
    session = None
    if payload.backend == "sdk":
        from orchestrator.agents.ray.sdk_worker import SdkSession

        session = SdkSession(payload, folder, out)
    try:
        try:
            proc, feed = _start(payload, folder) if session is None else session.start(*_environment(payload, folder))
        except (OSError, ValueError) as exc:
            what = "the sdk runner" if session is not None else repr(payload.argv[0])
            yield StartFailed(lease=lease, reason=f"cannot start {what} on {node}: {exc}", node=node)
            return
        procs.spare(proc.pid)  # our direct child: Popen reaps it, the kill ladder's reaper must leave it
        # threads feed stdin and read the output, so the pipes move while this generator waits for its consumer
        reader = threading.Thread(target=_read_stream, args=(proc.stdout, out), daemon=True)
        reader.start()
        if feed is not None:
            threading.Thread(target=_feed, args=(proc, feed), daemon=True).start()
        ref = procs.ProcRef.of(proc.pid)
        target = procs.Target(ref, proc.pid, payload.run_id, who(payload), attempt=payload.attempt)
        yield Started(
            lease=lease, pid=proc.pid, create_time=ref.create_time if ref else 0.0, node=node, orphans=orphans
        )
        yield from _watch(payload, proc, target, ask, out, reader, session, inbox)
    finally:
        if proc is not None and target is not None and proc.poll() is None:
            # closed early (the task was cancelled, the head went away): the tree must not outlive us
            asyncio.run(procs.stop_tree(target, 0.0))
        if proc is not None:
            procs.unspare(proc.pid)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        shutil.rmtree(folder, ignore_errors=True)


def _start(payload: Payload, folder: Path) -> tuple[subprocess.Popen[bytes], bytes | None]:
    """The agent, and what to write to its stdin (None: nothing, its stdin is ``/dev/null``)."""
    env, cwd = _environment(payload, folder)
    argv = list(payload.argv) + ([payload.prompt] if payload.prompt_via == "arg" else [])
    executable = shutil.which(argv[0], path=env.get("PATH")) if os.sep not in argv[0] else str(cwd / argv[0])
    if executable is None:
        raise ValueError("not found on PATH")
    feed = payload.prompt.encode("utf-8") if payload.prompt_via == "stdin" else None
    stdin = subprocess.PIPE if feed is not None else subprocess.DEVNULL
    return popen_session([executable, *argv[1:]], env, cwd, stdin, subprocess.PIPE), feed


def _environment(payload: Payload, folder: Path) -> tuple[dict[str, str], Path]:
    """The agent's environment (this worker's, the role's, the memo copies, the lease and this wrapper) and cwd."""
    paths = []
    for name, text in payload.memos.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    env = dict(os.environ)
    for key in memo_list.MEMO_KEYS:
        env.pop(key, None)
    env.update(payload.env)
    listed = folder / memo_list.FILE_NAME
    if payload.batch:  # the list of the copies, as on the head: a file, and the variable while it is short
        memo_list.write_list(listed, paths)
    env.update(memo_list.memo_environment(payload.batch, paths, listed))
    env[LEASE_ENV] = payload.lease
    me = procs.ProcRef.of(os.getpid())
    env[WRAPPER_ENV] = f"{os.getpid()}:{me.create_time if me else 0.0}"
    workdir = Path(payload.root) / payload.cwd
    cwd = workdir if workdir.is_dir() else folder
    return env, cwd


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
        proc.stdin.write(data)
    with contextlib.suppress(OSError):
        proc.stdin.close()


def _read_stream(stream: Any, out: queue.Queue[bytes | None]) -> None:
    """Each piece the agent prints, then None once its output has ended (or cannot be read)."""
    with contextlib.suppress(OSError):
        while chunk := os.read(stream.fileno(), CHUNK):
            out.put(chunk)
    out.put(None)


def _drain(out: queue.Queue[bytes | None], wait: float) -> tuple[bytes, bool]:
    """What the agent printed so far (waiting at most ``wait`` for the first piece), and whether its output ended."""
    data = b""
    with contextlib.suppress(queue.Empty):
        item = out.get(timeout=wait) if wait > 0 else out.get_nowait()
        while item is not None:
            data += item
            item = out.get_nowait()
        return data, True
    return data, False


def _watch(
    payload: Payload,
    proc: subprocess.Popen[bytes],
    target: procs.Target,
    ask: Ask,
    out: queue.Queue[bytes | None],
    reader: threading.Thread,
    session: Any = None,
    inbox: Inbox | None = None,
) -> Iterator[AnyMessage]:
    lease = payload.lease
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span two reads
    last_said = last_heard = time.monotonic()
    closed = False
    grace: float | None = None  # set: a stop was asked for (``why``), else the agent exited by itself
    fence = payload.reconnect_within or payload.lost_after  # with no head this long, the agent is killed
    while True:
        data, ended_output = _drain(out, 0.0 if closed else payload.poll)
        closed = closed or ended_output
        if closed and proc.poll() is None:
            time.sleep(payload.poll)  # its output is closed but it runs on: keep polling at the same pace
        now = time.monotonic()
        if data:
            yield Output(lease=lease, data=text.decode(data))
            last_said = now
        if session is not None:
            for message in session.tick():
                yield message
                last_said = now
        code = proc.poll()
        if code is not None:
            break
        why = "asked"
        try:
            grace = ask()
            last_heard = now
            if session is not None and inbox is not None:
                session.deliver(inbox())
        except Exception:  # noqa: BLE001 - whatever the transport raised, the head did not answer
            grace = 0.0 if now - last_heard >= fence else None
            why = "lost the head"
        if grace is not None:
            # reaped the moment it dies: a zombie still counts in its group, so the ladder would wait for its next
            # reading of /proc (a quarter of a second) to see the group empty
            threading.Thread(target=proc.wait, daemon=True).start()
            report = asyncio.run(procs.stop_tree(target, grace))
            code = proc.wait()
            break
        if now - last_said >= payload.beat:
            yield Beat(lease=lease)
            last_said = now
    ended_at = time.time()  # kept with its end: a head that comes back later records the run's end at this time
    if grace is None:
        # what the agent left in its group or under its run id after it exited (only this attempt's): killed
        # before the output is read to its end, since a leftover may hold the pipe open
        left = procs.Target(None, target.pgid, target.run_id, target.project_root, attempt=target.attempt)
        found = procs.find_tree(left)
        report = asyncio.run(procs.stop_tree(left, payload.poll, found=found)) if found else procs.KillReport()
    reader.join(timeout=2)
    rest, _ = _drain(out, 0.0)
    if rest:
        yield Output(lease=lease, data=text.decode(rest, final=True))
    if session is not None:
        yield from session.finish()
    stopped = grace is not None
    yield Ended(
        lease=lease,
        code=code,
        stopped=stopped,
        why=why if stopped else None,
        pids=report.pids,
        seconds=round(report.seconds, 3),
        escalated=report.escalated and stopped,
        survivors=report.survivors if stopped else [],
        at=ended_at,
    )
