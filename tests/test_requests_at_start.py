"""A control request sent while ``up`` starts waits until every feature has started.

The control socket (and the dashboard's server) listen before the features open, and opening may take a while: the
workspaces feature puts back a landing a kill interrupted, with git. A request carried out meanwhile, an ``answer``
before the asks feature has read back its questions, say, would act on what a restart left half-done. Here the real
loop of ``up`` runs with a feature of the test's own whose ``open`` sends a request through the socket's entry and
one through the dashboard's, and lets the loop turn many times before it returns.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from harness import write_team
from orchestrator.compose import build_supervisor
from orchestrator.config import load_config
from orchestrator.console import Console
from orchestrator.control.authority import PERSON
from orchestrator.control.channel import Peer
from orchestrator.control.protocol import StatusRequest, StopRequest
from orchestrator.supervisor.extension import Extension, Host
from orchestrator.supervisor.loop import Supervisor
from orchestrator.web.attach import Attachment

TURNS = 200  # turns of the loop a slow ``open`` lets pass: an answer that does not wait comes back in a few


def test_requests_sent_while_features_open_are_carried_out_after_every_feature_started(tmp_path: Path) -> None:
    write_team(tmp_path, {"builder": {}}, {}, lambda _name: "$memo\n", web={"port": 0})  # the dashboard serves
    config = load_config(tmp_path)
    console = Console(config.state_dir / "orchestrator.log", live=False)
    order: list[str] = []
    early: dict[str, bool] = {}
    answers: list[asyncio.Task[Any]] = []
    supervisor: Supervisor

    class SlowOpening(Extension):
        """Opens slowly (as a landing put back does), sending requests meanwhile; notes when it starts."""

        def __init__(self, host: Host) -> None:
            self.host = host

        async def open(self) -> None:
            for name, request in (
                ("socket", supervisor.answer(StatusRequest(), Peer(os.getpid()))),
                ("dashboard", supervisor.extension(Attachment).ask(StatusRequest(), PERSON)),
            ):
                task = asyncio.ensure_future(request)
                task.add_done_callback(lambda _t, name=name: order.append(f"answered {name}"))
                answers.append(task)
            for _ in range(TURNS):
                await asyncio.sleep(0)
            early.update(socket=answers[0].done(), dashboard=answers[1].done())

        def start(self) -> None:
            order.append("started")

    supervisor = build_supervisor(config, console, more=[SlowOpening])

    async def scenario() -> int:
        serving = asyncio.ensure_future(supervisor.serve())
        async with asyncio.timeout(30):
            while len(answers) < 2 or not all(t.done() for t in answers):
                await asyncio.sleep(0.01)
                assert not serving.done(), "up ended before the requests were answered"
        await supervisor.answer(StopRequest(who="the test"), Peer(os.getpid()))
        return await serving

    try:
        assert asyncio.run(scenario()) == 0
    finally:
        console.close()
    assert early == {"socket": False, "dashboard": False}, "a request was carried out while a feature was opening"
    assert order[0] == "started" and sorted(order[1:]) == ["answered dashboard", "answered socket"], order
    assert all("running" in task.result() for task in answers), [sorted(t.result()) for t in answers]
