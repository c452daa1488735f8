"""A test-only feature that uses the whole port, composed in through ``compose.build_supervisor(more=...)``.

It changes where each attempt runs (``prepare``: a folder of its own per attempt, a variable and an argument),
redirects ends (``decide_end``: an agent that left ``park.txt`` in its folder is parked for a person, one that
exited 3 fails for good with the feature's reason) and serves a command of its own (``port_folders``: where each
attempt ran, and what was parked), which an agent may send only about its own role. Nothing under
``orchestrator/supervisor/`` knows of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any, Literal

from orchestrator.agents.spec import LaunchSpec
from orchestrator.config import RoleRun
from orchestrator.control.authority import Caller
from orchestrator.control.protocol import FeatureRequest
from orchestrator.core.agent import AttemptVerdict
from orchestrator.core.errors import UsageError
from orchestrator.supervisor.decisions import DEFAULT, EndDecision, Fail, Park
from orchestrator.supervisor.extension import Extension, Host
from orchestrator.supervisor.feature_requests import Command, Needs

FOLDERS = "work"  # under the project root: one folder per attempt
PARK_FILE = "park.txt"
FAIL_CODE = 3


class FoldersRequest(FeatureRequest):
    """``port_folders``: the folders the feature gave ``role``'s attempts, and the runs it parked."""

    op: Literal["port_folders"] = "port_folders"
    role: str


class PortFeature(Extension):
    """Per-attempt folders, redirected ends and one command: the port, used from outside the core."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.folders: dict[str, dict[str, str]] = {}  # role -> "run/attempt" -> folder
        self.parked: list[int] = []
        self.seen_adopted: list[int] = []

    async def prepare(self, run: RoleRun, spec: LaunchSpec) -> LaunchSpec:
        if spec.adopted:  # the agent runs already: only what it sees is recorded
            self.seen_adopted.append(spec.run_id)
            return spec
        folder = self.host.config.root / FOLDERS / f"{spec.run_id}-{spec.attempt}"
        await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)  # slow work is awaited, off the loop
        self.folders.setdefault(run.role.name, {})[f"{spec.run_id}/{spec.attempt}"] = str(folder)
        env = {**spec.env, "PORT_FOLDER": str(folder)}
        return dataclasses.replace(spec, cwd=folder, env=env, args=(*spec.args, "--prepared"))

    def decide_end(self, run: RoleRun, verdict: AttemptVerdict) -> EndDecision:
        folder = self.folders.get(run.role.name, {}).get(f"{run.run_id}/{run.attempt}")
        asked = Path(folder or "/nonexistent") / PARK_FILE
        if asked.exists():
            self.parked.append(run.run_id)
            return Park(f"the agent asked for a person: {asked.read_text(encoding='utf-8').strip()}")
        if verdict.returncode == FAIL_CODE:
            return Fail(f"exit {FAIL_CODE} means the work is wrong; not retried")
        return DEFAULT

    def requests(self) -> list[Command[Any]]:
        return [Command(FoldersRequest, self.answer, Needs("task", own=_own_role), command="port folders")]

    def answer(self, request: FoldersRequest) -> dict[str, Any]:
        if request.role not in self.host.config.roles:
            raise UsageError(f"port folders: no role {request.role!r}")
        return {"folders": self.folders.get(request.role, {}), "parked": self.parked, "who": request.who}


def _own_role(request: FoldersRequest, caller: Caller) -> bool:
    return request.role == caller.role
