"""One JSON error for every refusal: ``{"error": {"code", "message"}}``, the CLI's meanings as HTTP statuses.

The codes are the control channel's (``core.errors``): a client that knows the CLI's exit statuses knows these.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from orchestrator.core import errors

# most specific first: the first class an error is an instance of decides
STATUS: tuple[tuple[type[errors.OrchestratorError], int, str], ...] = (
    (errors.UnknownMemoError, 404, "unknown_memo"),
    (errors.MemoFinishedError, 409, "finished"),
    (errors.AmbiguousMemoError, 409, "ambiguous"),
    (errors.UnsupportedError, 422, "unsupported"),
    (errors.DeadlineError, 504, "deadline"),
    (errors.RefusedError, 403, "refused"),
    (errors.UnknownRoleError, 404, "unknown_role"),
    (errors.UsageError, 400, "usage"),
    (errors.ConfigError, 400, "config"),
    (errors.NotRunningError, 503, "not_running"),
    (errors.ControlError, 409, "error"),
    (errors.MemoryRefusedError, 422, "memory_refused"),
    (errors.SecretRefusedError, 422, "secret_refused"),
    (errors.MemoryUnavailableError, 503, "memory_unavailable"),
    (errors.OrchestratorError, 400, "error"),
)


def error(status: int, code: str, message: str, **headers: Any) -> JSONResponse:
    """The one shape of a refusal."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers or None)


def from_exception(exc: errors.OrchestratorError) -> JSONResponse:
    """An error of the one tree as its HTTP status and code; the message is the CLI's line."""
    for cls, status, code in STATUS:
        if isinstance(exc, cls):
            return error(status, code, str(exc))
    return error(400, "error", str(exc))  # pragma: no cover - OrchestratorError is last in STATUS
