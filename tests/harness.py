"""One harness for the tests and the benchmark: a real `orchestrator up` in a project folder, and waiting on it.

Both start the orchestrator as a person would and fake only the agent: the tests with a
Python stand-in (``tests/conftest.py``), the benchmark with a compiled no-op (``bench/``).
What they share is here: polling with a deadline, writing a team's roles.yaml, the `up`
process itself (started, ready when its control socket answers, stopped by SIGTERM) and
killing what a test or a scenario left behind. It imports nothing of pytest; the tests
import it as ``harness``, the benchmark as ``tests.harness`` (the checkout's ``tests/``,
a folder without ``__init__.py``, is a namespace package from the repository's root).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil
import yaml

SOCKET = Path(".orchestrator") / "control.sock"


def _accepts(path: Path) -> bool:
    """A server listens on the Unix socket at ``path`` (a connection that sends nothing is dropped in silence).

    Through ``/proc/self/fd`` of its folder, as the client does, since a test's path can pass AF_UNIX's 108 bytes.
    """
    try:
        folder = os.open(path.parent, os.O_PATH)
    except OSError:
        return False
    try:
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(f"/proc/self/fd/{folder}/{path.name}")
    except OSError:
        return False
    finally:
        os.close(folder)
    return True


def wait_for(
    condition: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.02,
    error: type[Exception] = AssertionError,
) -> Any:
    """Poll until ``condition()`` is truthy and return it; raise ``error`` naming ``what`` after ``timeout`` s."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise error(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def dead(pid: int, create_time: float) -> bool:
    """Dead for good: gone, a zombie, or the pid now belongs to another process."""
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) > 0.05 or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def write_team(
    root: Path,
    roles: Mapping[str, Mapping[str, Any]],
    base: Mapping[str, Any],
    prompt: Callable[[str], str],
    **top: Any,
) -> Path:
    """roles.yaml under ``root``: ``base`` as its defaults (updated by a ``defaults=`` in ``top``), and each
    role's prompt file (``prompts/<role>.md`` unless the role names one), written from ``prompt(role)`` when it
    does not exist yet."""
    data: dict[str, Any] = {"max_concurrent": 10, **top}
    data["defaults"] = {**base, **data.pop("defaults", {})}
    data["roles"] = {}
    for name, given in roles.items():
        settings = {"prompt": f"prompts/{name}.md", **given}
        data["roles"][name] = settings
        path = root / settings["prompt"]
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text(prompt(name), encoding="utf-8")
    config = root / "roles.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return config


class UpProcess:
    """A running ``<command> up --plain --root <root> [args]``, its terminal output in the file ``out``."""

    def __init__(
        self,
        command: list[str],
        root: Path,
        out: Path,
        env: Mapping[str, str],
        args: tuple[str, ...] = (),
        cwd: Path | None = None,
    ) -> None:
        self.root = root
        self.out = out
        with open(out, "ab") as handle:
            self.launched_ns = time.time_ns()
            self.proc = subprocess.Popen(
                [*command, "up", "--plain", "--root", str(root), *args],
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env),
                cwd=cwd,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        """Everything it has printed so far."""
        return self.out.read_text(encoding="utf-8", errors="replace")

    def ended(self) -> int | None:
        return self.proc.poll()

    def wait_ready(self, timeout: float, error: type[Exception] = AssertionError) -> None:
        """Its control socket answers (the watcher runs, the first scan is under way); ``error`` if it ended first.

        A socket file alone is not enough: one left by an ``up`` killed with SIGKILL is there before this one binds.
        """
        wait_for(
            lambda: _accepts(self.root / SOCKET) or self.proc.poll() is not None,
            timeout,
            "the control socket",
            error=error,
        )
        if self.proc.poll() is not None:
            tail = "\n".join(self.text().splitlines()[-15:])
            raise error(f"orchestrator exited early with status {self.proc.returncode}; its output ends:\n{tail}")

    def terminate(self, timeout: float) -> int | None:
        """SIGTERM (graceful: running agents finish) and wait; its status, or None if it still runs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self, timeout: float = 5) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout)


def kill_marked(name: str, value: str) -> list[int]:
    """Kill every process (but this one) whose environment has ``name`` set to ``value`` or to a path under it:
    what a test or a scenario left behind (its project's nested roots included)."""
    killed = []
    for proc in psutil.process_iter(["pid", "environ"]):
        try:
            found = (proc.info.get("environ") or {}).get(name)
            if (
                found is not None
                and (found == value or found.startswith(value.rstrip("/") + "/"))
                and proc.pid != os.getpid()
            ):
                proc.kill()
                killed.append(proc.pid)
        except psutil.Error:
            pass
    return killed
