"""The keeper and adoption: exit statuses that outlive the orchestrator, live agents taken back at a restart.

Real processes throughout: the built keeper binary, the stand-in agent, and a real
``orchestrator up`` that the tests SIGKILL and start again.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from conftest import Project, pid_alive, wait_for
from orchestrator.agents import keeper

SLEEPER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


@pytest.fixture(scope="module", params=["installed", "cc", "musl-gcc"])
def binary(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The keeper of this checkout, then keeper.c built statically by each C library's compiler that ``setup.py``
    may use (glibc's ``cc``; ``musl-gcc``, preferred where it is installed): each passes every test of it."""
    if request.param == "installed":
        built = keeper.locate()
        assert built is not None, (
            f"no usable keeper in this checkout: {keeper.find().problem} (make, or pip install -e .)"
        )
        return built
    compiler = shutil.which(request.param)
    if compiler is None:
        pytest.skip(f"{request.param} is not installed (.ci/needs installs it for CI)")
    target = tmp_path_factory.mktemp(request.param) / "orchestrator-keeper"
    source = Path(keeper.__file__).with_name("keeper.c")
    done = subprocess.run(
        [compiler, "-O2", "-Wall", "-Werror", "-static", "-o", str(target), str(source)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert keeper.self_check(target) is None
    assert (b"GLIBC_" in target.read_bytes()) == (request.param == "cc"), "built against the other C library"
    return target


def run_keeper(
    binary: Path,
    record: Path,
    program: list[str],
    kill_after: float = 0,
    grace: float = 0.2,
    log: tuple[Path, str] | None = None,
    cwd: Path | None = None,
    pass_fds: tuple[int, ...] = (),
    leaked: tuple[int, ...] = (),
):
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        keeper.keeper_argv(binary, record, kill_after, grace, write_fd, log, cwd, pass_fds) + program,
        pass_fds=(write_fd, *pass_fds, *leaked),
        env=keeper.keeper_env({**os.environ, "ORCHESTRATOR_RUN_ID": "7", "ORCHESTRATOR_ATTEMPT": "1"}),
        start_new_session=True,
    )
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as status:
        lines = status.read().decode().split()
    return proc, lines


@pytest.mark.parametrize(
    ("code", "expected"),
    [("raise SystemExit(0)", keeper.ExitRecord(0, False)), ("raise SystemExit(3)", keeper.ExitRecord(3, False))],
)
def test_the_keeper_records_the_exit_status(binary, tmp_path, code, expected):
    record = tmp_path / "1.exit"
    proc, lines = run_keeper(binary, record, [sys.executable, "-c", code])
    assert lines[0].startswith("P") and len(lines) == 1
    assert proc.wait(10) == expected.returncode
    assert keeper.read_exit(record) == expected
    assert not (tmp_path / "1.exit.tmp").exists()


def test_the_keeper_opens_the_log_and_the_agent_writes_after_the_header(binary, tmp_path):
    log = tmp_path / "logs" / "7-builder.log"  # its folder does not exist yet
    program = [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"]
    for attempt in (1, 2):
        proc, lines = run_keeper(binary, tmp_path / f"{attempt}.exit", program, log=(log, f"=== attempt {attempt}\n"))
        assert lines[0].startswith("P") and proc.wait(10) == 0
    assert log.read_text().splitlines() == ["=== attempt 1", "out", "err", "=== attempt 2", "out", "err"]
    assert oct(log.stat().st_mode & 0o777) == "0o600"


def test_a_log_the_keeper_cannot_open_is_said_on_the_status_pipe(binary, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    proc, lines = run_keeper(binary, tmp_path / "1.exit", ["/bin/true"], log=(blocker / "x.log", "header\n"))
    assert lines == [f"L{errno.ENOTDIR}"] and proc.wait(10) == 126
    assert not (tmp_path / "1.exit").exists(), "no agent ran, so no record"


def test_the_agent_starts_in_the_folder_the_keeper_is_given(binary, tmp_path):
    folder = tmp_path / "work"
    folder.mkdir()
    log = tmp_path / "agent.log"
    proc, lines = run_keeper(
        binary, tmp_path / "1.exit", [sys.executable, "-c", "import os; print(os.getcwd())"], log=(log, ""), cwd=folder
    )
    assert lines[0].startswith("P") and proc.wait(10) == 0
    assert log.read_text().strip() == str(folder)
    assert keeper.read_exit(tmp_path / "1.exit") == keeper.ExitRecord(0, False), "the record path is absolute"


def test_a_folder_the_keeper_cannot_enter_is_said_on_the_status_pipe(binary, tmp_path):
    proc, lines = run_keeper(binary, tmp_path / "1.exit", ["/bin/true"], cwd=tmp_path / "gone")
    assert lines == [f"C{errno.ENOENT}"] and proc.wait(10) == 126
    assert not (tmp_path / "1.exit").exists(), "no agent ran, so no record"


def test_the_agent_inherits_only_the_descriptors_it_is_passed(binary, tmp_path):
    out = tmp_path / "fds.json"
    probe = f"import json, os; json.dump(sorted(int(n) for n in os.listdir('/proc/self/fd')), open({str(out)!r}, 'w'))"
    passed_r, passed_w = os.pipe()
    leaked_r, leaked_w = os.pipe()  # what a careless parent of the orchestrator left inheritable
    try:
        proc, lines = run_keeper(
            binary, tmp_path / "1.exit", [sys.executable, "-c", probe], pass_fds=(passed_w,), leaked=(leaked_w,)
        )
        assert lines[0].startswith("P") and proc.wait(10) == 0
    finally:
        for fd in (passed_r, passed_w, leaked_r, leaked_w):
            os.close(fd)
    seen = json.loads(out.read_text())
    assert passed_w in seen and leaked_w not in seen
    assert len([fd for fd in seen if fd > 2]) == 2, f"the passed one and the probe's listdir only: {seen}"


def test_the_agent_leads_its_own_session_and_gets_the_marks_back(binary, tmp_path):
    out = tmp_path / "seen.json"
    probe = (
        "import json, os, sys; json.dump({'pid': os.getpid(), 'sid': os.getsid(0), 'pgid': os.getpgid(0), "
        "'run': os.environ.get('ORCHESTRATOR_RUN_ID'), 'kept': os.environ.get('KEEPER_ORCHESTRATOR_RUN_ID')}, "
        f"open({str(out)!r}, 'w'))"
    )
    proc, lines = run_keeper(binary, tmp_path / "1.exit", [sys.executable, "-c", probe])
    assert proc.wait(10) == 0
    seen = json.loads(out.read_text())
    assert lines == [f"P{seen['pid']}"]
    assert seen["pid"] == seen["sid"] == seen["pgid"] != proc.pid
    assert seen["run"] == "7" and seen["kept"] is None


def test_a_failed_exec_is_reported_on_the_status_pipe(binary, tmp_path):
    script = tmp_path / "broken.sh"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    proc, lines = run_keeper(binary, tmp_path / "1.exit", [str(script)])
    assert proc.wait(10) == 127
    assert lines == ["E2"]  # ENOENT, and no agent


def test_a_keeper_left_alone_past_the_timeout_kills_its_agent(binary, tmp_path):
    """An agent that ignores SIGTERM: the keeper's ladder ends in SIGKILL, and says it was the timeout."""
    record = tmp_path / "1.exit"
    proc, lines = run_keeper(binary, record, [sys.executable, "-c", SLEEPER], kill_after=0.5, grace=0.3)
    agent = int(lines[0][1:])
    assert proc.wait(20) == 128 + signal.SIGKILL
    assert not pid_alive(agent)
    assert keeper.read_exit(record) == keeper.ExitRecord(-signal.SIGKILL, True)


def test_the_keeper_ignores_termination_signals_and_ends_with_its_agent(binary, tmp_path):
    gate = tmp_path / "gate"
    waiter = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
    proc, _ = run_keeper(binary, tmp_path / "1.exit", [sys.executable, "-c", waiter])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        proc.send_signal(sig)
    time.sleep(0.1)  # a negative check: the keeper must still be there after the signals
    assert proc.poll() is None
    gate.touch()
    assert proc.wait(10) == 0


# ------------------------------------------------------------------ adoption through a real orchestrator
def ends(project: Project) -> list[dict]:
    path = project.root / "ends.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def crash(orch) -> None:
    orch.signal(signal.SIGKILL)
    orch.wait()


def restart(project: Project, **env: str):
    """Up again after a crash; ready once it says so (the dead one's socket file is still there)."""
    orch = project.up(**env)
    orch.wait_output("orchestrator up:")
    return orch


@pytest.mark.os_level
def test_an_agent_that_ends_while_the_orchestrator_is_down_is_not_run_again(project):
    project.configure({"builder": {}})
    gate = project.root / "gate"
    orch = project.up(STANDIN_ENDS=str(project.root / "ends.jsonl"))
    project.drop("builder", "A-1.md", {"id": "A-1", "agent": {"until": str(gate)}})
    record = wait_for(lambda: project.records(), what="the agent started")[0]
    crash(orch)
    assert pid_alive(record["pid"]), "the agent outlives its orchestrator"
    gate.touch()
    wait_for(lambda: not pid_alive(record["pid"]), what="the agent done")
    exit_file = project.root / ".orchestrator" / "runs" / str(record["run_id"]) / "1.exit"
    # the keeper writes its record just after the agent's end: wait for it rather than race it
    assert wait_for(lambda: keeper.read_exit(exit_file), what="the keeper's record") == keeper.ExitRecord(0, False)
    down = 2.0  # the orchestrator stays down past the agent's end: its run's end and time are still the agent's
    wait_for(lambda: time.time() - json.loads((project.root / "ends.jsonl").read_text())["end"] > down, what="a wait")
    orch = restart(project, STANDIN_ENDS=str(project.root / "ends.jsonl"))
    wait_for(lambda: project.folder("builder", "archive") == ["A-1.md"], what="A-1 archived")
    assert len(project.records()) == 1, "never run again"
    orch.wait_output("ended while the orchestrator was down (exit status 0)")
    (end,) = [json.loads(line) for line in (project.root / "ends.jsonl").read_text().splitlines()]
    (run,) = json.loads(project.cli("history", "--json").stdout)["runs"]
    ended = datetime.fromisoformat(run["ended_at"]).timestamp()
    assert abs(ended - end["end"]) < 1.0, (run["ended_at"], end)  # not the restart's time, 2 s or more later
    done = re.search(r"done A-1 in ([0-9.]+)s", orch.output)
    assert done and float(done.group(1)) < end["end"] - end["start"] + 1.0, orch.output
    wait_for(lambda: not exit_file.exists(), timeout=5, what="the spent record removed with its run")
    assert orch.stop() == 0


@pytest.mark.os_level
def test_a_live_agent_is_adopted_and_its_exit_comes_back(project):
    project.configure({"builder": {}})
    gate = project.root / "gate"
    orch = project.up()
    project.drop("builder", "A-2.md", {"id": "A-2", "agent": {"until": str(gate)}})
    record = wait_for(lambda: project.records(), what="the agent started")[0]
    crash(orch)
    orch = restart(project)
    orch.wait_output("adopted its live agent")
    run = project.status()["runs"][0]
    assert (run["state"], run["pid"], run["memo"]) == ("running", record["pid"], "A-2.md")
    assert project.folder("builder", "active") == ["A-2.md"]
    gate.touch()
    wait_for(lambda: project.folder("builder", "archive") == ["A-2.md"], what="A-2 archived")
    assert len(project.records()) == 1
    assert orch.stop() == 0


@pytest.mark.os_level
def test_an_adopted_agent_can_be_cancelled_and_times_out_from_its_first_start(project):
    # the timeout leaves room for the crash, the restart and the adoption on a loaded machine
    project.configure({"builder": {"timeout": "10s", "grace": "0.5s"}})
    orch = project.up()
    project.drop("builder", "C-1.md", {"id": "C-1", "agent": {"sleep": 60}})
    project.drop("builder", "T-1.md", {"id": "T-1", "agent": {"sleep": 60}})
    records = wait_for(lambda: len(project.records()) == 2 and project.records(), what="two agents")
    started = time.monotonic()
    crash(orch)
    orch = restart(project)
    wait_for(lambda: len(project.status()["runs"]) == 2, what="both adopted")
    done = project.cli("cancel", "C-1", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    cancelled = next(r for r in records if r["memo"].endswith("C-1.md"))
    assert answer["previous_state"] == "running" and cancelled["pid"] in answer["pids"]
    assert project.folder("builder", "cancelled") == ["C-1.md"]
    wait_for(lambda: project.folder("builder", "failed") == ["T-1.md"], what="T-1 timed out")
    assert time.monotonic() - started < 10 + 0.5 + 15, "the timeout counts from the first start"
    assert "timed out" in (project.root / "memo/builder/failed/T-1.reason").read_text()
    assert len(project.records()) == 2
    assert orch.stop() == 0


@pytest.mark.os_level
def test_recovery_restart_stops_and_requeues_as_before(project):
    project.configure({"builder": {}}, recovery="restart")
    gate = project.root / "gate"
    orch = project.up()
    project.drop("builder", "R-1.md", {"id": "R-1", "agent": {"until": str(gate)}})
    first = wait_for(lambda: project.records(), what="the agent started")[0]
    crash(orch)
    orch = restart(project)
    wait_for(lambda: not pid_alive(first["pid"]), what="the old agent stopped")
    gate.touch()
    wait_for(lambda: project.folder("builder", "archive") == ["R-1.md"], what="R-1 archived")
    assert len(project.records()) == 2, "run again from the inbox"
    orch.wait_output("stopped its agent")
    assert orch.stop() == 0


@pytest.mark.os_level
def test_stop_force_still_kills_every_agent(project):
    project.configure({"builder": {}})
    orch = project.up()
    project.drop("builder", "F-1.md", {"id": "F-1", "agent": {"sleep": 60}})
    record = wait_for(lambda: project.records(), what="the agent started")[0]
    assert project.cli("stop", "--force").returncode == 0
    assert orch.wait() == 1
    assert not pid_alive(record["pid"])
    assert not any(keeper.is_keeper(p.pid) and p.ppid() == orch.proc.pid for p in psutil.process_iter())
    assert project.folder("builder", "inbox") == ["F-1.md"]


@pytest.mark.os_level
def test_a_killed_keeper_leaves_its_run_waiting_for_the_agent(project):
    """Nobody may start a second agent for the memo while the first still works, even without its keeper."""
    project.configure({"builder": {"retry": {"max": 1, "backoff": ["0.1s"]}}})
    gate = project.root / "gate"
    orch = project.up()
    project.drop("builder", "K-1.md", {"id": "K-1", "agent": {"until": str(gate)}})
    record = wait_for(lambda: project.records(), what="the agent started")[0]
    keeper_pid = psutil.Process(record["pid"]).ppid()
    assert keeper.is_keeper(keeper_pid)
    os.kill(keeper_pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(keeper_pid), what="the keeper gone")
    assert project.status()["runs"][0]["state"] == "running"
    assert pid_alive(record["pid"]) and len(project.records()) == 1
    gate.touch()
    wait_for(lambda: len(project.records()) == 2, what="the retry")  # its status died with the keeper: a failure
    assert not pid_alive(record["pid"]), "the retry starts only after the first agent ended"
    assert orch.stop() == 0
