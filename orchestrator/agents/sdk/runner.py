"""``python -m orchestrator.agents.sdk.runner``: one Claude session through claude-agent-sdk, in a process of its own.

It reads the spec, opens the socket channel, runs the ``Session`` and turns SIGTERM, SIGINT or a bug into an exit
status. Its own process in its own session, so the kill ladder reaches the CLI below it and a hung or crashing SDK
takes down one run only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys

from orchestrator.agents.claude_errors import one_line
from orchestrator.agents.sdk.broadcast import Broadcast
from orchestrator.agents.sdk.options import build_options
from orchestrator.agents.sdk.phases import ControlLine, Event
from orchestrator.agents.sdk.protocol import (
    EXIT_FAILED,
    EXIT_SIGNALLED,
    RUNNER_PATH_ENV,
    FailureEvent,
    parse_spec,
)
from orchestrator.agents.sdk.session import Session
from orchestrator.agents.sdk.transcript import Output


def _restore_pythonpath() -> None:
    """Put back the agent's own PYTHONPATH, which ``backend.runner_environment`` extended to find this package.

    The interpreter has read it already; the CLI and its tools must see the original.
    """
    raw = os.environ.pop(RUNNER_PATH_ENV, None)
    if raw is None:
        return
    try:
        original = json.loads(raw)
    except json.JSONDecodeError:
        return
    if isinstance(original, str):
        os.environ["PYTHONPATH"] = original
    else:
        os.environ.pop("PYTHONPATH", None)


def _terminate_children() -> None:
    """SIGTERM to our direct children (the CLI); the orchestrator's ladder handles the rest of the group."""
    try:
        import psutil

        children = psutil.Process().children()
    except Exception:  # noqa: BLE001 - best effort: the ladder stops the group anyway
        return
    for child in children:
        with contextlib.suppress(Exception):
            child.terminate()


async def serve(output: Output) -> int:
    """Read the spec, run the session, and return the exit status; SIGTERM or SIGINT ends it at once."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)  # only records; the code below acts
    work = asyncio.ensure_future(run_session(output))
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if work.done():
        stopper.cancel()
        return work.result()
    output.note("stopped by a signal")
    _terminate_children()
    output.close(EXIT_SIGNALLED)
    os._exit(EXIT_SIGNALLED)  # at once: a clean SDK shutdown can take many seconds


def _read_spec() -> str:
    """All of stdin: the spec, then end of file."""
    chunks = []
    while chunk := os.read(0, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


async def run_session(output: Output) -> int:
    """The spec from stdin, the socket channel it names, then the session it describes."""
    events: asyncio.Queue[Event] = asyncio.Queue()
    text = await asyncio.get_running_loop().run_in_executor(None, _read_spec)  # a signal still ends us meanwhile
    try:
        spec = parse_spec(text)
        channel = output.channel = Broadcast(spec, lambda line: events.put_nowait(ControlLine(line)))
        await channel.start()
        options = build_options(spec, output)  # imports the SDK; a bad option fails here, before the CLI starts
        if spec.transcript:
            output.open_transcript(spec.transcript)
    except ImportError as exc:
        problem = f"claude-agent-sdk is not importable by {sys.executable}: {exc}"
    except (TypeError, ValueError, OSError) as exc:  # ``ProtocolError`` is a ``ValueError``
        problem = str(exc)
    else:
        return await Session(spec, options, events, output).run()
    output.event(FailureEvent(reason=one_line(f"bad spec: {problem}", 600)))
    return EXIT_FAILED


def main() -> None:
    """``python -m orchestrator.agents.sdk.runner``: exit with the session's status, never with a traceback."""
    _restore_pythonpath()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="claude_agent_sdk: %(message)s")
    output = Output()
    code = EXIT_FAILED
    try:
        code = asyncio.run(serve(output))
    except Exception as exc:  # noqa: BLE001 - a bug here must still end with one line the orchestrator can show
        output.event(FailureEvent(reason=one_line(f"the sdk runner failed: {type(exc).__name__}: {exc}")))
        import traceback

        traceback.print_exc()
    finally:
        output.close(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
