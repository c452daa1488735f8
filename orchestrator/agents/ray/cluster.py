"""Joining the Ray cluster (or starting a private one), with one line for a person when it cannot be reached."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.agents.ray import INSTALL_HINT, first_line, ray_installed
from orchestrator.config.ray import ExecutorSettings
from orchestrator.core.errors import ConfigError, ExecutorError

PROBE_WAIT = 5.0  # how long the start-up check waits for the cluster's port to answer
#: Ray's token authentication: the mode, and where a token is read from, first found first
AUTH_MODE, AUTH_TOKEN, AUTH_TOKEN_PATH = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"


def token_missing(env: dict[str, str], home: Path) -> str | None:
    """Why Ray's token authentication, turned on here (``RAY_AUTH_MODE=token``), has no token to send; None when it
    is off or a token is there (``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` names, ``~/.ray/auth_token``)."""
    if env.get(AUTH_MODE, "").lower() != "token" or env.get(AUTH_TOKEN, "").strip():
        return None
    named = env.get(AUTH_TOKEN_PATH)
    path = Path(named).expanduser() if named else home / ".ray" / "auth_token"
    try:
        if path.read_text(encoding="utf-8").strip():
            return None
        problem = f"{path} is empty"
    except OSError as exc:
        problem = f"{path} cannot be read ({exc.strerror or exc})"
    return (
        f"{AUTH_MODE}=token is set, but there is no token: {AUTH_TOKEN} is not set and {problem}; without it the "
        "cluster refuses this orchestrator"
    )


def connect(settings: ExecutorSettings) -> Any:
    """Import Ray and join (or, for ``local-cluster``, start) the cluster; one line for a person if it cannot."""
    if not ray_installed():
        raise ConfigError(f"executor: kind ray needs the Ray package, which is not installed; run `{INSTALL_HINT}`")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        return ray
    problem = _probe(settings.address)
    if problem:
        raise _unreachable(settings, problem)
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING, "configure_logging": True}
    try:
        if settings.address == "local-cluster":
            ray.init(num_cpus=settings.num_cpus, include_dashboard=False, **options)
        else:
            with _stderr_aside():
                ray.init(address=settings.address, **options)
    except Exception as exc:  # noqa: BLE001 - Ray raises many kinds (ConnectionError, RuntimeError, ValueError)
        raise _refused(settings, exc) or _unreachable(settings, first_line(exc)) from None
    return ray


@contextlib.contextmanager
def _stderr_aside() -> Iterator[None]:
    """Ray's core writes a warning straight to descriptor 2 at every retry of a refused connection (once a second,
    for half a minute): set aside while joining an existing cluster, whose error says it once. Joining starts no
    process that would keep the descriptor."""
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as aside:
            os.dup2(aside.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _refused(settings: ExecutorSettings, exc: BaseException) -> ExecutorError | None:
    """When the cluster refused this orchestrator's token (Ray says so only in the error's cause), that in a line."""
    cause: BaseException | None = exc
    while cause is not None:
        if "token" in str(cause).lower() and "auth" in str(cause).lower():
            return ExecutorError(
                f"executor: the Ray cluster at {settings.address!r} refused this orchestrator's token; set "
                f"{AUTH_TOKEN} (or {AUTH_TOKEN_PATH}, or ~/.ray/auth_token) to the cluster's (`ray get-auth-token` "
                "there prints it; see docs/operations.md, Running on a cluster)"
            )
        cause = cause.__cause__ or cause.__context__
    return None


def _unreachable(settings: ExecutorSettings, problem: str) -> ExecutorError:
    return ExecutorError(
        f"executor: cannot reach the Ray cluster at {settings.address!r}: {problem}; start one with "
        "`ray start --head` (see docs/operations.md, Running on a cluster) or use `address: local-cluster`"
    )


def _probe(address: str, timeout: float = PROBE_WAIT) -> str | None:
    """Why a ``host:port`` (or ``ray://host:port``) address takes no connection, or None; Ray itself would retry
    an unreachable address for minutes."""
    if address in ("auto", "local-cluster"):
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return "expected auto, local-cluster, host:port or ray://host:port"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__
