"""What every benchmark scenario needs: the C stand-in agent, project folders, a real `orchestrator up`, records.

Nothing here is faked: the orchestrator is the installed command started as a
person would start it, and the only stand-in is the agent (``agent.c``), whose
own records (CLOCK_REALTIME at its first instruction) are the measurements. The
`up` process, the roles.yaml and the polling are the tests' harness
(``tests/harness.py``); what is here is the benchmark's: timing, the agent, /proc.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import harness
from tests.harness import UpProcess, kill_marked, write_team

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
INOTIFY_HELP = (
    "inotifywait not found: the bare inotify loop (a latency figure beside the target's watchdog floor) is not "
    "measured. Install inotify-tools (`make bench` does, as root with apt-get; "
    "Debian/Ubuntu: `sudo apt-get install -y inotify-tools`; Fedora: `sudo dnf install inotify-tools`; "
    "Alpine: `apk add inotify-tools`) and run the benchmark again."
)


class BenchError(Exception):
    """A benchmark that cannot run or went wrong; the message says what to do."""


# ------------------------------------------------------------------ timing helpers
def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.01) -> Any:
    """Poll ``condition`` until it is truthy; ``BenchError`` naming ``what`` after ``timeout`` seconds."""
    return harness.wait_for(condition, timeout, what, interval, error=BenchError)


def percentile(values: list[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class Stats:
    """A summary of one series of samples (all in the same unit)."""

    n: int
    p50: float
    p90: float
    p99: float
    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Stats:
        if not values:
            raise BenchError("no samples")
        return cls(
            len(values),
            percentile(values, 50),
            percentile(values, 90),
            percentile(values, 99),
            sum(values) / len(values),
            min(values),
            max(values),
        )

    def line(self, unit: str, digits: int = 1) -> str:
        f = f"{{:.{digits}f}}"
        return (
            f"n={self.n} p50={f.format(self.p50)} p90={f.format(self.p90)} p99={f.format(self.p99)} "
            f"mean={f.format(self.mean)} min={f.format(self.low)} max={f.format(self.high)} {unit}"
        )


# ------------------------------------------------------------------ the stand-in agent
def build_agent(build_dir: Path) -> Path:
    """Compile agent.c with cc/gcc/clang; static when the C library allows it (no dynamic loader at start)."""
    compilers = [c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)]
    if not compilers:
        raise BenchError(
            "no C compiler found (tried $CC, cc, gcc, clang); install one, e.g. `sudo apt-get install -y gcc`"
        )
    out = build_dir / "agent"
    errors = []
    for flags in (["-O2", "-static"], ["-O2"]):
        cmd = [compilers[0], *flags, "-o", str(out), str(HERE / "agent.c")]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return out
        errors.append(f"{' '.join(cmd)}: {done.stderr.strip()}")
    raise BenchError("cannot compile bench/agent.c:\n" + "\n".join(errors))


def agent_is_static(agent: Path) -> bool:
    """No PT_INTERP program header: no dynamic loader runs before the agent's first instruction."""
    import struct

    with open(agent, "rb") as handle:
        head = handle.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # not a 64-bit ELF: say dynamic, the cautious answer
            return False
        (phoff,) = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        handle.seek(phoff)
        table = handle.read(phentsize * phnum)
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != 3 for i in range(phnum))  # 3 = PT_INTERP


@dataclass(frozen=True)
class Record:
    """One agent start, as the agent itself wrote it."""

    ns: int
    pid: int
    memo: str

    @property
    def name(self) -> str:
        return os.path.basename(self.memo)


def read_records(path: Path) -> list[Record]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0].isdigit():
            out.append(Record(int(parts[0]), int(parts[1]), parts[2]))
    return out


def count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as handle:
            return handle.read().count(b"\n")
    except FileNotFoundError:
        return 0


# ------------------------------------------------------------------ memos and projects
def memo_text(i: int, role: str) -> str:
    return (
        f"---\nid: BENCH-{i}\nsubject: benchmark memo {i}\nfrom: owner\nto: {role}\n---\n\n"
        "A memo of a typical size for a hand-off between two agents: a few lines of context, "
        "what to do, and where the result should go.\n"
    )


def memo_name(i: int) -> str:
    return f"m{i:06d}.md"


def drop_atomically(inbox: Path, name: str, text: str, staging: Path | None = None) -> int:
    """Write under a hidden temporary name (in ``staging``, else in the inbox), then rename into the inbox.

    Returns the time of the rename in ns (CLOCK_REALTIME, the clock the agent reads).
    """
    tmp = (staging or inbox) / f".{name}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    at = time.time_ns()
    os.rename(tmp, inbox / name)
    return at


def fill_inbox(inbox: Path, names: Iterable[str], role: str, age: float = 60.0) -> int:
    """Memos that are "already in the inbox": written directly and dated ``age`` seconds ago.

    The orchestrator treats a memo found by a scan with an mtime under one second old as
    possibly still being written, so memos that really were waiting have older mtimes.
    """
    inbox.mkdir(parents=True, exist_ok=True)
    when = time.time() - age
    count = 0
    for i, name in enumerate(names):
        path = inbox / name
        path.write_text(memo_text(i, role), encoding="utf-8")
        os.utime(path, (when, when))
        count += 1
    return count


def count_memos(folder: Path) -> int:
    try:
        return sum(1 for e in os.scandir(folder) if e.name.endswith(".md") and not e.name.startswith("."))
    except FileNotFoundError:
        return 0


class Project:
    """A project root in a scratch folder: roles.yaml whose every role runs the C agent."""

    def __init__(self, root: Path, agent: Path) -> None:
        self.root = root
        self.agent = agent
        self.record = root / "records.txt"
        root.mkdir(parents=True, exist_ok=True)

    def configure(self, roles: dict[str, dict[str, Any]], **top: Any) -> None:
        defaults = {"command": [str(self.agent)], "retry": {"max": 0}, "grace": "1s"}
        write_team(
            self.root, roles, defaults, lambda name: f"You are the {name}. Your memo is $memo_path:\n\n$memo\n", **top
        )
        for name in roles:
            for folder in ("inbox", "active"):
                self.folder(name, folder).mkdir(parents=True, exist_ok=True)

    def folder(self, role: str, name: str) -> Path:
        return self.root / "memo" / role / name

    def records(self) -> list[Record]:
        return read_records(self.record)


def child_env(record: Path, **extra: str) -> dict[str, str]:
    """Our environment for a child: no ORCHESTRATOR_* leaking in, bytecode caching on as on a normal install."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCHESTRATOR_", "BENCH_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["BENCH_RECORD"] = str(record)
    env.update(extra)
    return env


def orchestrator_command() -> list[str]:
    """The installed console script beside this interpreter, as a person runs it; else ``python -m``.

    ``BENCH_ORCHESTRATOR`` (split like a shell would) replaces it, to compare a change against the installed code.
    """
    override = os.environ.get("BENCH_ORCHESTRATOR", "").strip()
    if override:
        import shlex

        command = shlex.split(override)
        if "/" in command[0]:  # a path relative to here, where the scenarios' commands run elsewhere
            command[0] = str(Path(command[0]).absolute())
        return command
    script = Path(sys.executable).parent / "orchestrator"
    return [str(script)] if script.exists() else [sys.executable, "-m", "orchestrator"]


def command_seconds(cmd: list[str], env: dict[str, str], check: Callable[[str], Any] | None = None) -> float:
    """Wall seconds of one command run to its end (a fresh process, as a person runs it); ``check`` is given its
    output. A failure is a ``BenchError`` with the end of what it said."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=120)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise BenchError(f"`{' '.join(cmd)}` exited {done.returncode}: {done.stderr.strip()[-300:]}")
    if check is not None:
        check(done.stdout)
    return took


def orchestrator_python() -> str:
    """The interpreter the measured orchestrator runs on: the ``python`` beside its console script (``make bench``
    installs the wheel into a venv of its own), else this one."""
    first = Path(orchestrator_command()[0])
    beside = first.parent / "python"
    return str(beside) if first.name == "orchestrator" and beside.exists() else sys.executable


@functools.cache
def package_init() -> str:
    """The measured orchestrator's ``__init__.py``, as its console script imports it ("?" when it cannot say); asked
    once per run (RESULTS.md's header names both the package and its keeper)."""
    done = subprocess.run(
        [orchestrator_python(), "-c", "import orchestrator; print(orchestrator.__file__)"],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",  # as the console script imports it: not from the folder it was started in
    )
    return done.stdout.strip() or "?"


def installed_from() -> str:
    """Where the measured orchestrator's package is loaded from, as a person reads it in RESULTS.md."""
    where = package_init()
    editable = "/site-packages/" not in where
    return f"{' '.join(orchestrator_command())} ({'this checkout, editable' if editable else 'installed'}: {where})"


def keeper_build() -> str:
    """How the measured install's keeper was built, as RESULTS.md says it: linking and C library (musl-gcc or not:
    glibc's static start-up costs about 0.5 ms a start on a virtual machine, docs/operations.md)."""
    binary = Path(package_init()).parent / "agents" / "orchestrator-keeper"
    try:
        data = binary.read_bytes()
    except OSError:
        return f"none at {binary}"
    libc = "glibc" if b"GLIBC_" in data else "no glibc (musl-gcc)"
    return f"{'statically' if agent_is_static(binary) else 'dynamically'} linked, {libc}"


def precompile() -> None:
    """Write the orchestrator's bytecode once, so no timed start pays for compiling it."""
    import orchestrator

    package = Path(orchestrator.__file__).parent
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(package)], env=env, check=False, stdout=subprocess.DEVNULL
    )


# ------------------------------------------------------------------ processes
def proc_status(pid: int | str) -> dict[str, str]:
    """/proc/<pid>/status as a mapping (``pid`` may be ``"<pid>/task/<tid>"``); empty when it is gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                out[key] = value.strip()
    except OSError:
        pass
    return out


def kb(value: str | None) -> float:
    return float(value.split()[0]) if value else math.nan


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the whole process (every thread, living or ended)."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_with_children(pid: int) -> tuple[float, float]:
    """(own CPU, CPU of its children, ended or not), both user + system, in seconds.

    The children's part counts the ones it has reaped and, for a child still running (the keeper
    server), that child's own CPU and what it has reaped in turn (the keepers it started)."""
    own, reaped, _ = _stat_times(pid)
    live = 0.0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                child_own, child_reaped, ppid = _stat_times(int(entry))
                if ppid == pid:
                    live += child_own + child_reaped
    return own, reaped + live


def _stat_times(pid: int) -> tuple[float, float, int]:
    """(own CPU, reaped children's CPU, parent pid) of ``pid`` from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick, int(fields[1])


def context_switches(pid: int) -> int:
    """Voluntary context switches summed over the process's threads: roughly, how often it woke up."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        total += int(proc_status(f"{pid}/task/{tid}").get("voluntary_ctxt_switches", "0"))
    return total


class Orchestrator:
    """A real `orchestrator up --plain` for one project root (``start`` starts it)."""

    def __init__(self, project: Project, env_extra: dict[str, str] | None = None) -> None:
        self.project = project
        self.env_extra = dict(env_extra or {})
        self.up: UpProcess | None = None

    @property
    def log(self) -> Path:
        return self.project.root / "up.out"

    def start(self) -> Orchestrator:
        env = child_env(self.project.record, **self.env_extra)
        self.up = UpProcess(orchestrator_command(), self.project.root, self.log, env)
        return self

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.up.proc if self.up is not None else None

    @property
    def launched_ns(self) -> int:
        return self.up.launched_ns if self.up is not None else 0

    @property
    def pid(self) -> int:
        assert self.up is not None
        return self.up.pid

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def check_alive(self) -> None:
        if self.up is not None and self.up.ended() is not None:
            tail = "\n".join(self.output().splitlines()[-15:])
            raise BenchError(f"orchestrator exited with status {self.up.proc.returncode}; its output ends:\n{tail}")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """The control socket exists: the watcher is running and the first scan is under way."""
        assert self.up is not None
        self.up.wait_ready(timeout, error=BenchError)

    def peak_rss_mb(self) -> float:
        return kb(proc_status(self.pid).get("VmHWM")) / 1024

    def rss_mb(self) -> float:
        return kb(proc_status(self.pid).get("VmRSS")) / 1024

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (graceful: running agents finish), then SIGKILL if it will not end."""
        if self.up is None:
            return 0
        status = self.up.terminate(timeout)
        if status is None:
            self.up.kill(10)
            status = self.up.proc.returncode
        return status


def kill_leftovers(record: Path) -> list[int]:
    """Kill every process that carries this benchmark's record path (agents a failed scenario left behind)."""
    return kill_marked("BENCH_RECORD", str(record))


def inotifywait_path() -> str | None:
    """``inotifywait``, or what ``BENCH_INOTIFYWAIT`` names (a name that is not found: as if it were missing)."""
    return shutil.which(os.environ.get("BENCH_INOTIFYWAIT") or "inotifywait")
