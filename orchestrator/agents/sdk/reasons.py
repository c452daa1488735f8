"""Failure wording for an sdk session: one line that says what went wrong with the CLI, the API or the account.

Each reason is a ``claude_errors.Problem``, read by ``claude_errors.classify`` as a ``command`` agent's output
is, so whether a retry can help travels with the words."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from orchestrator.agents import claude_errors
from orchestrator.agents.claude_errors import Problem, classify, hit_limit, one_line
from orchestrator.agents.claude_stream import error_problem
from orchestrator.agents.sdk.protocol import SpecOptions


def usd(amount: float) -> str:
    """Dollars for people, to four significant figures, with at least cents: ``$0.10``, ``$0.006412``, ``$12.35``."""
    if amount == 0:
        return "$0.00"
    if amount >= 100:
        return f"${amount:.2f}"
    text = f"{amount:.4g}"
    if "e" in text:  # below $0.0001
        text = f"{amount:.{3 - math.floor(math.log10(amount))}f}".rstrip("0")
    whole, _, cents = text.partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


def describe_error_result(fields: dict[str, Any], error_kind: str | None, options: SpecOptions) -> Problem:
    """Why a result with ``is_error`` failed, from its raw fields: the role's own caps by name, else as a
    ``command`` role's stream says it."""
    subtype = fields.get("subtype")
    if subtype == "error_max_turns":
        return Problem(f"stopped after the role's max_turns ({options.max_turns}) turns")
    if subtype == "error_max_budget_usd":
        return Problem(f"stopped at the role's max_budget_usd ({usd(options.max_budget_usd or 0)})")
    return error_problem(fields, error_kind)


def rejected_limit(info: Any) -> tuple[str, float | None] | None:
    """(kind, resets_at) of a ``rate_limit_event``'s info that says the limit was hit (``status: rejected``)."""
    if getattr(info, "status", None) != "rejected":
        return None
    return hit_limit(getattr(info, "rate_limit_type", None), getattr(info, "resets_at", None))


def result_limit(
    fields: dict[str, Any], error_kind: str | None, rejected: tuple[str, float | None] | None
) -> tuple[str, float | None] | None:
    """(kind, resets_at) when an error result was the account's usage or rate limit, else None.

    A limit the stream said was hit comes first (it knows the window and the reset); else the result's HTTP
    status 429, its ``rate_limit_error``, or the assistant message's ``error: rate_limit``."""
    if rejected is not None:
        return rejected
    return claude_errors.result_limit(fields, error_kind)


def stderr_summary(lines: deque[str], count: int = 3) -> str:
    """The CLI's last ``count`` stderr lines that say something, joined on one line."""
    tail = [one_line(line, 160) for line in list(lines)[-count:] if line.strip()]
    return " | ".join(tail)


def describe_exception(exc: BaseException, stderr: deque[str], options: SpecOptions) -> Problem:
    """One line for an exception from the SDK, with the CLI's last stderr lines where they explain it."""
    from claude_agent_sdk import ProcessError

    tail = stderr_summary(stderr)
    result_data = getattr(exc, "data", None)  # ``ResultError`` (SDK 0.2): an error result, then a failed exit
    if isinstance(exc, ProcessError) and isinstance(result_data, dict) and result_data.get("type") == "result":
        return describe_error_result(result_data, None, options)
    known = classify(tail) if tail and isinstance(exc, ProcessError) else None
    return known or Problem(_exception_reason(exc, tail, options))


def _exception_reason(exc: BaseException, tail: str, options: SpecOptions) -> str:
    from claude_agent_sdk import CLIConnectionError, CLIJSONDecodeError, CLINotFoundError, ProcessError

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
    if isinstance(exc, ProcessError):
        status = f"status {exc.exit_code}" if exc.exit_code is not None else "an error"
        return f"Claude Code exited with {status}: " + (tail or "it wrote nothing to stderr")
    if isinstance(exc, CLIConnectionError):
        return f"cannot talk to Claude Code: {one_line(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}"
    message = str(exc).splitlines()[0] if str(exc) else ""
    if "Control request timeout: initialize" in message:
        return "Claude Code did not answer the SDK's start-up handshake" + (f": {tail}" if tail else "")
    return one_line(f"{type(exc).__name__}: {message}" + (f" ({tail})" if tail else ""))
