"""The client commands start lean: what `status`, `cancel`, `stop`, `tell`, `interrupt` and `wake` import.

Each runs as a fresh ``python -X importtime -m orchestrator`` against a real orchestrator with a sleeping
stand-in agent; the modules it imported are read from the importtime lines. A module added to their path
that brings pydantic, rich, YAML, asyncio, SQLite, psutil, pathlib, typing or socket, or any orchestrator module not listed here, fails
this test: the start-up of these commands comes from the layering, and this is its guard.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from conftest import Project, error_line, wait_for

CHECKOUT = Path(__file__).resolve().parent.parent

HEAVY = {
    "pydantic",
    "pydantic_core",
    "rich",
    "yaml",
    "watchdog",
    "psutil",
    "asyncio",
    "sqlite3",
    "argcomplete",
    "tempfile",
    "traceback",
    "pathlib",
    "typing",
    "socket",
}  # the last five: about 8 ms, 7 and 4 (half of what the client adds to Python's own start, argparse and json
# aside): a client module takes path texts (os.path), names typing's types under ``TYPE_CHECKING = False`` /
# ``if TYPE_CHECKING:``, and the control client speaks through ``_socket``
#: every orchestrator module a client command may import
CLIENT_MODULES = {
    "orchestrator",
    "orchestrator.cli",
    "orchestrator.commands",
    "orchestrator.commands.arguments",
    "orchestrator.commands.asking",
    "orchestrator.commands.common",
    "orchestrator.commands.completion",
    "orchestrator.commands.memos",
    "orchestrator.commands.running",
    "orchestrator.console",
    "orchestrator.console.live",  # pause_lines, for status (rich is imported only where the live view draws)
    "orchestrator.console.log",
    "orchestrator.control",
    "orchestrator.control.client",
    "orchestrator.control.status",
    "orchestrator.control.status_view",
    "orchestrator.core",
    "orchestrator.core.durations",
    "orchestrator.core.errors",
    "orchestrator.core.text",
    "orchestrator.core.turn",
    "orchestrator.intake",
    "orchestrator.intake.names",
    "orchestrator.memory",
    "orchestrator.tables",
}


def run_client(project: Project, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The command's result (its own stderr lines only) and every module it imported.

    Without ``site`` (``-S``: the package from this checkout, the libraries from site-packages with no ``.pth``
    hook run): what an environment's start-up hooks import (an editable install's finder imports pathlib) is not
    the client's, and would hide what the client imports."""
    env = project.env()
    paths = sysconfig.get_paths()
    found = (str(CHECKOUT), paths["purelib"], paths["platlib"], env.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in found if p))
    done = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-m", "orchestrator", *args, "--root", str(project.root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    rows = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    modules = {row.split("|")[-1].strip() for row in rows[1:]}  # the first row is the header
    stderr = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("import time:"))
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, stderr), modules


def assert_lean(modules: set[str], what: str) -> None:
    assert "orchestrator.cli" in modules, f"{what}: no importtime lines read"
    heavy = {m for m in modules if m.split(".")[0] in HEAVY}
    assert not heavy, f"{what} imported {sorted(heavy)}"
    extra = {m for m in modules if m.split(".")[0] == "orchestrator"} - CLIENT_MODULES
    assert not extra, f"{what} imported orchestrator modules outside the client's layer: {sorted(extra)}"


def test_the_client_commands_import_only_the_standard_library(project: Project) -> None:
    project.configure()
    orch = project.up()
    project.drop("builder", "long.md", {"id": "L-1", "subject": "sleeps", "agent": {"sleep": 300}})
    wait_for(lambda: any(Path(r["memo"] or "").name == "long.md" for r in project.records()), what="L-1 to start")

    status, modules = run_client(project, "status")
    assert status.returncode == 0 and "orchestrator running for" in status.stdout, status.stderr
    assert "L-1" in status.stdout and "current runs" in status.stdout
    assert_lean(modules, "status")
    as_json, modules = run_client(project, "status", "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["runs"][0]["memo_id"] == "L-1"
    assert_lean(modules, "status --json")

    for args in (("tell", "L-1", "more"), ("interrupt", "L-1"), ("wake", "nosuchrole")):
        refused, modules = run_client(project, *args)
        assert refused.returncode != 0 and error_line(refused.stderr), refused
        assert_lean(modules, args[0])

    cancel, modules = run_client(project, "cancel", "L-1")
    assert cancel.returncode == 0 and cancel.stdout.startswith("cancelled L-1 (builder, was running)"), cancel
    assert_lean(modules, "cancel")

    stop, modules = run_client(project, "stop", "--timeout", "60s")
    assert stop.returncode == 0 and "is ending" in stop.stdout, stop
    assert_lean(modules, "stop --timeout")
    assert orch.proc.wait(60) == 0


def test_a_client_command_without_an_orchestrator_stays_lean(project: Project) -> None:
    project.configure()
    cancel, modules = run_client(project, "cancel", "X-1")
    assert cancel.returncode == 4 and "no orchestrator is running" in cancel.stderr
    assert_lean(modules, "cancel")


def test_the_caller_check_of_agent_side_commands_stays_off_psutil_and_asyncio() -> None:
    """``send``, ``memory``, ``handoff`` and ``task`` ask ``control.permission`` before they act, as agents, many
    times a run: it reads ``/proc`` itself. Reading it through ``agents.procs`` once added psutil and asyncio
    (``agents.keeper`` -> ``posix_child``), about 30 ms, to each of those commands."""
    probe = (
        "import sys, orchestrator.control.permission; "
        "print(sorted(m for m in ('psutil', 'asyncio', 'orchestrator.agents') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_send_stays_off_psutil_asyncio_and_the_supervisor(project: Project) -> None:
    """Its check of an agent's sender takes the loop breaker's names from ``core.senders``: importing them from the
    breaker once loaded the supervisor, psutil and asyncio, about 100 modules, into every send."""
    project.configure()
    sent, modules = run_client(project, "send", "--to", "builder", "a note")
    assert sent.returncode == 0, sent.stderr
    heavy = {m for m in modules if m.split(".")[0] in {"psutil", "asyncio"} or m.startswith("orchestrator.supervisor")}
    assert "orchestrator.tools.send" in modules and not heavy, sorted(heavy)
