"""The dashboard's extension as ``orchestrator.compose`` plugs it in: the ``Attachment``'s reads, actions and
hooks, plus what it serves beside the loop (the server when ``web:`` asks for it, the spans when a collector
is named), opened once the control channel listens and closed at shutdown."""

from __future__ import annotations

from typing import Any

from orchestrator.console import say
from orchestrator.web import otel, server
from orchestrator.web.attach import Attachment


class Dashboard(Attachment):
    """The dashboard and the spans per run, through the one port."""

    server: Any = None  # the dashboard's server, while it serves
    tracing: Any = None  # the spans per run, while a collector is named

    async def open(self) -> None:
        """Serve the dashboard (``web:``) and start the spans (``OTEL_EXPORTER_OTLP_ENDPOINT``), as asked."""
        console = self._host.console
        if self.config.web is not None:
            terminal = console.stream  # the token goes to the terminal only, never to the log or `status`
            self.server = await server.start(self, self.config.web, console.line, lambda text: say(text, terminal))
        self.tracing = otel.start(self, console.line)

    async def close(self) -> None:
        if self.server is not None:
            await self.server.stop()
        if self.tracing is not None:
            self.tracing.shutdown()
