"""A real local Ray cluster for the tests and the benchmark: a head and a second node, on this machine.

Both are ``ray start --block`` processes in their own sessions, so stopping them
is signalling exactly what we started (never ``ray stop``, which would end every
Ray on the machine); at the end every process they started is checked dead.
Starting the two takes about 20-30 s on a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
#: for the nodes and for every orchestrator that joins them: the same authentication mode on both sides, whatever
#: this machine's ~/.ray holds (Ray turns token authentication on when ~/.ray/auth_token exists, and a private
#: `ray.init()` writes that file), and no usage reports
ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
STARTED = "Ray runtime started"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalCluster:
    """A head (``head_cpus`` CPUs) and a worker node with custom resources and a label."""

    def __init__(
        self,
        head_cpus: int = 2,
        node_cpus: int = 2,
        node_resources: str = '{"role_builder": 2}',
        second_node: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        # a short path: Ray's socket paths must fit in 107 bytes
        self.temp = Path(tempfile.mkdtemp(prefix="ort", dir="/tmp"))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.outs: list[Path] = []
        self.env = {**ENV, **(env or {})}  # ``env``: over ENV, for the nodes and the orchestrators that join them
        env = {**os.environ, **self.env}
        common = ["--block", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
        self._start(
            [
                RAY,
                "start",
                "--head",
                f"--port={self.port}",
                f"--num-cpus={head_cpus}",
                "--include-dashboard=false",
                f"--temp-dir={self.temp}",
                *common,
            ],
            env,
        )
        if not second_node:
            return
        self._start(
            [
                RAY,
                "start",
                f"--address={self.address}",
                f"--num-cpus={node_cpus}",
                f"--resources={node_resources}",
                "--labels=pool=builders",
                *common,
            ],
            env,
        )

    def _start(self, argv: list[str], env: dict[str, str], timeout: float = 90.0) -> None:
        out = self.temp / f"node-{len(self.procs)}.out"
        with open(out, "wb") as handle:
            proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append(proc)
        self.outs.append(out)
        end = time.monotonic() + timeout
        while STARTED not in out.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > end:
                text = out.read_text(errors="replace")
                self.stop()
                raise RuntimeError(f"`{' '.join(argv[:3])}` did not start a Ray node:\n{text[-3000:]}")
            time.sleep(0.1)

    def members(self) -> list[psutil.Process]:
        """Every live process the cluster's nodes started (their whole trees)."""
        found: list[psutil.Process] = []
        for proc in self.procs:
            try:
                parent = psutil.Process(proc.pid)
                found += [parent, *parent.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        return found

    def stop(self, grace: float = 10.0) -> list[int]:
        """Stop both nodes (SIGTERM, ``grace``, SIGKILL to every process they started); return the pids that
        survived even SIGKILL: none, if all is well. Ray's workers do not all end on SIGTERM within the grace."""
        members = self.members()
        for proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        _gone, alive = psutil.wait_procs(members, timeout=grace)
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        _gone, alive = psutil.wait_procs(alive, timeout=10)
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.temp, ignore_errors=True)
        return [p.pid for p in alive]
