"""Test fixtures: real `orchestrator` processes in real folders, with a stand-in agent script.

Only the agent command is faked (``tests/agents/stand_in.py``); everything else is
the real CLI, watcher, supervisor and file system. The `up` process, the roles.yaml and
the waiting are ``tests/harness.py``'s, shared with the benchmark.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import harness
from harness import UpProcess, kill_marked, write_team
from harness import dead as dead  # the tests take these from here, with the fixtures
from harness import pid_alive as pid_alive

HERE = Path(__file__).parent
STAND_IN = HERE / "agents" / "stand_in.py"
DEADLINE = 20.0


@pytest.fixture(autouse=True)
def _sigpipe_ignored_as_python_starts() -> Any:
    """A test that runs ``up`` in this process leaves SIGPIPE at its default when its loop closes (asyncio's
    ``remove_signal_handler``), and the next write to a closed socket would then kill pytest itself (exit 141)."""
    yield
    if signal.getsignal(signal.SIGPIPE) is not signal.SIG_IGN:
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def wait_for(
    condition: Callable[[], Any], timeout: float = DEADLINE, what: str = "condition", interval: float = 0.02
) -> Any:
    """Poll until ``condition()`` is truthy; fail naming ``what`` after ``timeout`` seconds."""
    return harness.wait_for(condition, timeout, what, interval)


def error_line(line: str) -> bool:
    """One of our error lines: ``orchestrator: ...``, or a message that names the program itself
    (``orchestrator stop: ...``, ``orchestrator (pid 7) still runs ...``), which ``console.fail`` prints as it is."""
    return re.match(r"orchestrator(:| [a-z][a-z-]*( [a-z][a-z-]*)?( --[a-z-]+ \S+)?:| \(pid \d+\)) ", line) is not None


def read_found(folder: Path, pattern: str, what: str, timeout: float = DEADLINE) -> tuple[Path, str]:
    """The first file matching ``pattern`` under ``folder`` and its text, read whole even when an agent moves it on
    meanwhile (a notice goes inbox -> active -> archive as its role's agent takes it)."""

    def found() -> tuple[Path, str] | None:
        for path in sorted(folder.glob(pattern)):
            try:
                return path, path.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
        return None

    return wait_for(found, timeout, what)


class Orchestrator(UpProcess):
    """A running `orchestrator up` subprocess of a test's project."""

    def __init__(self, project: Project, *args: str, **env: str) -> None:
        self.project = project
        out = project.root / f"up-{len(project.procs)}.out"
        cwd = project.root if project.installed else None
        super().__init__(project.command, project.root, out, project.env(**env), args, cwd)

    @property
    def output(self) -> str:
        return self.text()

    def wait_output(self, text: str, timeout: float = DEADLINE) -> None:
        wait_for(lambda: text in self.output, timeout, f"{text!r} in the orchestrator's output:\n{self.output}")

    def wait_ready(self, timeout: float = DEADLINE, error: type[Exception] = AssertionError) -> None:
        super().wait_ready(timeout, error)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = DEADLINE) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"orchestrator did not exit within {timeout}s:\n{self.output}") from None

    def stop(self) -> int:
        status = self.terminate(DEADLINE)
        if status is None:
            raise AssertionError(f"orchestrator did not exit within {DEADLINE}s:\n{self.output}")
        return status


class Project:
    """A project root under tmp_path with a stand-in team; ``installed``: run that copy of the orchestrator
    (a wheel in a fresh venv) instead of this checkout's."""

    def __init__(self, root: Path, installed: Installed | None = None) -> None:
        self.root = root
        self.record = root / "records.jsonl"
        self.procs: list[Orchestrator] = []
        self.installed = installed
        self.command = installed.command if installed else [sys.executable, "-m", "orchestrator"]

    def configure(
        self, roles: dict[str, dict[str, Any]] | None = None, prompt: str = "memo $memo_path\n$memo", **top: Any
    ) -> Path:
        """roles.yaml with the stand-in agent as every role's command; each role gets a prompt file."""
        roles = roles if roles is not None else {"builder": {}}
        defaults = {"command": [sys.executable, str(STAND_IN)], "grace": "2s", "retry": {"max": 0, "backoff": ["0.1s"]}}
        return write_team(self.root, roles, defaults, lambda _role: prompt, **{"rescan_interval": "0.5s", **top})

    def memo_text(self, front: dict[str, Any] | None = None, body: str = "body") -> str:
        if front is None:
            return body + "\n"
        return "---\n" + yaml.safe_dump(front, allow_unicode=True, sort_keys=False) + "---\n" + body + "\n"

    def drop(
        self, role: str, name: str, front: dict[str, Any] | None = None, body: str = "body", atomic: bool = True
    ) -> Path:
        """Write a memo into an inbox: atomically (temp + rename) by default."""
        inbox = self.root / "memo" / role / "inbox"
        inbox.mkdir(parents=True, exist_ok=True)
        path = inbox / name
        text = self.memo_text(front, body)
        if atomic:
            tmp = inbox / f".{name}.tmp"
            tmp.write_text(text, encoding="utf-8")
            os.rename(tmp, path)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("ORCHESTRATOR_SPAWN_CMD", None)
        env["STANDIN_RECORD"] = str(self.record)
        env["PYTHONUNBUFFERED"] = "1"
        if self.installed is not None:
            env.pop("PYTHONPATH", None)  # this checkout must not shadow the installed copy
            env.update(self.installed.env)
        env.update(extra)
        return env

    def up(self, *args: str, wait_ready: bool = True, **env: str) -> Orchestrator:
        orch = Orchestrator(self, *args, **env)
        self.procs.append(orch)
        if wait_ready:
            orch.wait_ready()
        return orch

    def cli(
        self, *args: str, input: str | None = None, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command, *args, "--root", str(self.root)],
            capture_output=True,
            text=True,
            env=self.env(**env),
            input=input,
            timeout=timeout,
            cwd=self.root if self.installed else None,
        )

    def status(self) -> dict[str, Any]:
        result = self.cli("status", "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def records(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text(encoding="utf-8").splitlines() if line.strip()]

    def folder(self, role: str, folder: str) -> list[str]:
        path = self.root / "memo" / role / folder
        if not path.is_dir():
            return []
        return sorted(p.name for p in path.iterdir() if p.name.endswith(".md"))

    def cleanup(self) -> None:
        for orch in self.procs:
            orch.kill()
        kill_marked("ORCHESTRATOR_ROOT", str(self.root))  # no stand-in agent of this project may outlive its test


def pytest_sessionstart(session: pytest.Session) -> None:
    """The checkout's keeper is built by its install (``make``), never by ``up``: one older than keeper.c would
    test yesterday's keeper, so the session stops at once and says how to build it."""
    source = HERE.parent / "orchestrator" / "agents" / "keeper.c"
    binary = source.with_name("orchestrator-keeper")
    if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
        state = "is older than keeper.c" if binary.exists() else "is missing"
        pytest.exit(
            f"{binary} {state}: build it with `make` (the editable install compiles it), or "
            f"`cc -O2 -static -o {binary} {source}`",
            returncode=4,
        )


# ------------------------------------------------------------------ the two tiers
# A test that starts a real orchestrator (through one of these fixtures) or a Ray cluster, the real Claude CLI
# or a fresh install is in the full tier only (`make test-all`, what CI runs); `make test` runs `-m "not full"`:
# units, replays and the real-process tests marked `os_level`, whose point is what the operating system does.
REAL_PROCESS_FIXTURES = frozenset({"project", "installed_project", "installed", "fake_cli"})
FULL_ONLY_MARKERS = ("ray", "real_cli", "real_codex", "slow", "browser")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``full`` every test the fast tier leaves out, so ``-m`` selects a tier and no list of names can
    go stale: a new real-process test is in the full tier unless it says it proves an OS-level guarantee."""
    for item in items:
        if item.get_closest_marker("os_level") is not None:
            continue
        starts_processes = not REAL_PROCESS_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        if starts_processes or any(item.get_closest_marker(name) is not None for name in FULL_ONLY_MARKERS):
            item.add_marker(pytest.mark.full)


LOUD = ("Traceback (most recent call last)", "internal error")


def loud_lines(proj: Project) -> list[str]:
    """Lines of any orchestrator's terminal output that say a bug happened (a traceback, an internal error)."""
    found = []
    for orch in proj.procs:
        found += [line for line in orch.output.splitlines() if any(mark in line for mark in LOUD)]
    return found


@pytest.fixture
def project(tmp_path: Path, request: pytest.FixtureRequest):
    proj = Project(tmp_path)
    yield proj
    proj.cleanup()
    # a broken invariant is never swallowed: a test whose orchestrator printed one fails, whatever it asserted
    if request.node.get_closest_marker("internal_error_expected") is None:
        loud = loud_lines(proj)
        if loud:
            pytest.fail("the orchestrator reported a bug:\n" + "\n".join(loud[:10]), pytrace=False)


FAKE_CLAUDE = HERE / "fake_claude.py"


@pytest.fixture
def fake_cli(tmp_path: Path) -> Path:
    """An executable wrapper that runs the fake Claude Code CLI with this interpreter (``exec``: it keeps its pid).

    Every sdk test passes it as ``cli_path``: without one, the SDK would start the real CLI it bundles.
    """
    wrapper = tmp_path / "bin" / "fake-claude"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_CLAUDE}" "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    return wrapper


def claude_records(project: Project, record: str = "claude") -> list[dict[str, Any]]:
    """What the fake CLI(s) received, in order: one ``argv`` entry per start, then prompts and controls (the file
    ``FAKE_CLAUDE_RECORD`` names, ``<record>.jsonl`` in the project's root)."""
    path = project.root / f"{record}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------ the project as users install it (slow tier)
REPO = HERE.parent


class Installed:
    """A copy of the orchestrator installed from its wheel into a fresh venv; ``env`` is added to its commands'."""

    def __init__(self, venv: Path, dist: Path, env: dict[str, str] | None = None, command: list[str] | None = None):
        self.venv = venv
        self.dist = dist  # the sdist and the wheel it was installed from
        self.python = venv / "bin" / "python"
        self.command = command or [str(venv / "bin" / "orchestrator")]
        self.env = env or {}

    def run(self, code: str, **env: str) -> subprocess.CompletedProcess[str]:
        """``code`` run by the installed copy's interpreter, away from this checkout."""
        full = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        full.update(self.env)
        full.update(env)
        return subprocess.run(
            [str(self.python), "-c", code], capture_output=True, text=True, env=full, cwd=self.venv, timeout=60
        )


def run_checked(argv: list[str], what: str, timeout: float = 600, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a build or install step; fail the test with its output when it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
    if done.returncode != 0:
        pytest.fail(f"{what} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}", pytrace=False)
    return done


def fresh_venv(folder: Path) -> Path:
    """A new venv with no site packages but its own (no `--system-site-packages`)."""
    run_checked([sys.executable, "-m", "venv", str(folder)], "python -m venv")
    return folder


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The project as users get it, once a session: ``python -m build`` (an sdist, then the wheel built from
    it), the wheel installed into a fresh venv with its dependencies from the registry."""
    base = tmp_path_factory.mktemp("installed")
    dist = base / "dist"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run_checked([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], "python -m build", env=env)
    (wheel,) = dist.glob("*.whl")
    venv = fresh_venv(base / "venv")
    run_checked([str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)], "pip install <wheel>", env=env)
    return Installed(venv, dist)


@pytest.fixture
def installed_project(tmp_path: Path, installed: Installed, request: pytest.FixtureRequest):
    """A project whose ``up`` and commands are the installed copy's (see ``installed``)."""
    proj = Project(tmp_path / "project", installed)
    proj.root.mkdir()
    yield proj
    proj.cleanup()
    loud = loud_lines(proj)
    if loud and request.node.get_closest_marker("internal_error_expected") is None:
        pytest.fail("the orchestrator reported a bug:\n" + "\n".join(loud[:10]), pytrace=False)


class Opened:
    """The memo files (under ``root/memo``) opened for reading while it counts: what a command read to answer."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.paths: list[str] = []
        real = builtins.open
        memo = str(root / "memo")

        def counting(file: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, (str, os.PathLike)) and os.fspath(file).startswith(memo):
                self.paths.append(os.fspath(file))
            return real(file, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", counting)
