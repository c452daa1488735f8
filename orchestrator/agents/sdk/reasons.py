"""Failure wording: one line that says what went wrong with the CLI, the API or the account, and what to do."""

from __future__ import annotations

import re
from collections import deque
from typing import Any

from orchestrator.agents.sdk.protocol import SpecOptions


def one_line(text: str, limit: int = 240) -> str:
    """Whitespace collapsed, cut to ``limit`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def usd(amount: float) -> str:
    """Dollars for people: cents, or four places below one cent."""
    return f"${amount:.2f}" if amount >= 0.01 or amount == 0 else f"${amount:.4f}"


_AUTH_ERRORS = {
    "authentication_failed",
    "oauth_org_not_allowed",
    "account_on_hold",
    "verification_required",
    "cloud_credential_error",
}
_AUTH_TEXT = re.compile(r"not logged in|/login|invalid api key|authenticat|unauthori[sz]ed|\b401\b", re.I)
_OVERLOADED_TEXT = re.compile(r"overloaded|\b529\b", re.I)
_RATE_TEXT = re.compile(r"rate.?limit|\b429\b", re.I)


def known_problem(text: str, error_kind: str | None = None, status: int | None = None) -> str | None:
    """A one-line reason for the problems people meet most, or None."""
    detail = one_line(text, 200)
    if error_kind in _AUTH_ERRORS or status == 401 or _AUTH_TEXT.search(text):
        return (
            f"Claude Code is not logged in ({detail}); run `claude` once and sign in with /login, "
            "or set ANTHROPIC_API_KEY"
        )
    if error_kind == "overloaded" or status == 529 or _OVERLOADED_TEXT.search(text):
        return f"the Anthropic API is overloaded ({detail}); try again later"
    if error_kind == "rate_limit" or status == 429 or _RATE_TEXT.search(text):
        return f"rate limited by the Anthropic API ({detail})"
    if error_kind == "billing_error":
        return f"the Anthropic account has a billing problem ({detail})"
    if text.startswith("API Error") or error_kind in {"server_error", "invalid_request", "model_not_found"}:
        return f"the Anthropic API returned an error ({detail})"
    return None


def describe_error_result(fields: dict[str, Any], error_kind: str | None, options: SpecOptions) -> str:
    """Why a result with ``is_error`` failed, from its raw fields."""
    errors = [e for e in fields.get("errors") or [] if isinstance(e, str) and e.strip()]
    text = "; ".join(errors) or str(fields.get("result") or "").strip()
    subtype = str(fields.get("subtype") or "")
    if subtype == "error_max_turns":
        return f"stopped after the role's max_turns ({options.max_turns}) turns"
    if subtype == "error_max_budget_usd":
        return f"stopped at the role's max_budget_usd ({usd(options.max_budget_usd or 0)})"
    status = fields.get("api_error_status")
    known = known_problem(text, error_kind, status if isinstance(status, int) else None)
    if known:
        return known
    return f"Claude Code reported an error ({subtype or 'no subtype'}): {one_line(text or 'no details', 200)}"


def stderr_summary(lines: deque[str], count: int = 3) -> str:
    """The CLI's last ``count`` stderr lines that say something, joined on one line."""
    tail = [one_line(line, 160) for line in list(lines)[-count:] if line.strip()]
    return " | ".join(tail)


def describe_exception(exc: BaseException, stderr: deque[str], options: SpecOptions) -> str:
    """One line for an exception from the SDK, with the CLI's last stderr lines where they explain it."""
    from claude_agent_sdk import CLIConnectionError, CLIJSONDecodeError, CLINotFoundError, ProcessError

    tail = stderr_summary(stderr)
    result_data = getattr(exc, "data", None)  # ``ResultError`` (SDK 0.2): an error result, then a failed exit
    if isinstance(exc, CLINotFoundError):
        where = f" at {options.cli_path}" if options.cli_path else ""
        return (
            f"the Claude Code CLI was not found{where}; install it (npm install -g @anthropic-ai/claude-code) "
            "or set the role's cli_path"
        )
    if isinstance(exc, CLIJSONDecodeError):
        return f"Claude Code wrote output that is not JSON: {one_line(exc.line, 120)!r}"
    if type(exc).__name__ == "MessageParseError":
        return f"Claude Code sent a message the SDK cannot read: {one_line(str(exc), 160)}"
    if isinstance(exc, ProcessError) and isinstance(result_data, dict) and result_data.get("type") == "result":
        return describe_error_result(result_data, None, options)
    if isinstance(exc, ProcessError):
        known = known_problem(tail) if tail else None
        if known:
            return known
        status = f"status {exc.exit_code}" if exc.exit_code is not None else "an error"
        return f"Claude Code exited with {status}: " + (tail or "it wrote nothing to stderr")
    if isinstance(exc, CLIConnectionError):
        return f"cannot talk to Claude Code: {one_line(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}"
    message = str(exc).splitlines()[0] if str(exc) else ""
    if "Control request timeout: initialize" in message:
        return "Claude Code did not answer the SDK's start-up handshake" + (f": {tail}" if tail else "")
    return one_line(f"{type(exc).__name__}: {message}" + (f" ({tail})" if tail else ""))
