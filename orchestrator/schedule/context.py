"""What the schedule's parts share: the host, the settings and the state the wakes keep for all of them.

``Wakes`` makes one and hands it to each helper (what is due, the memo writer, the holds, the
preflight gate) with the other helpers it needs, so none of them holds the whole ``Wakes``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path
from typing import Any

from orchestrator.config import Config
from orchestrator.console import Console
from orchestrator.core.clock import Clock
from orchestrator.schedule.probes import Probe, run_probes
from orchestrator.supervisor.extension import Host


@dataclass
class ScheduleContext:
    """The schedule's share of one orchestrator."""

    host: Host
    tz: tzinfo
    wake_ids: set[str]  # the ids of every wake memo on record (only this loop writes them)
    probing: set[str] = field(default_factory=set)  # roles whose wake's signals and preflight run now
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)  # the commands under way, cancelled at the end
    # the one boundary the replay tests replace: running the signal and preflight commands
    probe_runner: Callable[[list[Probe], Path], Any] = run_probes

    @property
    def config(self) -> Config:
        return self.host.config

    @property
    def clock(self) -> Clock:
        return self.host.clock

    @property
    def console(self) -> Console:
        return self.host.console

    @property
    def db(self) -> sqlite3.Connection:
        return self.host.store.db
